__global__ void hist256(const unsigned char* __restrict__ img, unsigned int* bins, int width, int height) {
    __shared__ unsigned int smem[256];
    int t = threadIdx.x + threadIdx.y * blockDim.x;
    if (t < 256) smem[t] = 0;
    __syncthreads();
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        atomicAdd(&smem[img[y * width + x]], 1u);
    }
    __syncthreads();
    if (t < 256) atomicAdd(&bins[t], smem[t]);
}

void run(const unsigned char* img, unsigned int* bins, int width, int height) {
    dim3 block(16, 16);
    dim3 grid((width + block.x - 1) / block.x, (height + block.y - 1) / block.y);
    hist256<<<grid, block>>>(img, bins, width, height);
}
