// A templated in-place scale with a float scalar, a dynamic shared staging buffer and a 2D launch.
template <typename T, int TILE>
__global__ void __launch_bounds__(256) scale_inplace(T* data, float alpha, int rows, int cols) {
    extern __shared__ float stage[];
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows && c < cols) {
        stage[threadIdx.y * TILE + threadIdx.x] = (float)data[r * cols + c];
        data[r * cols + c] = (T)(stage[threadIdx.y * TILE + threadIdx.x] * alpha);
    }
}

void run(float* d, float alpha, int rows, int cols) {
    dim3 block(16, 16);
    dim3 grid((cols + 15) / 16, (rows + 15) / 16);
    scale_inplace<float, 16><<<grid, block, 16 * 16 * sizeof(float)>>>(d, alpha, rows, cols);
}
