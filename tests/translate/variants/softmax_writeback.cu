// Softmax that stores exp values into y, then rescales y in place; a bias accumulated with +=.
__global__ void softmax_writeback(const float* x, float* y, float* colsum, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = x[r * cols];
    for (int c = 1; c < cols; ++c) m = fmaxf(m, x[r * cols + c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) {
        y[r * cols + c] = expf(x[r * cols + c] - m);
        s += y[r * cols + c];
    }
    for (int c = 0; c < cols; ++c) {
        y[r * cols + c] /= s;
        atomicAdd(&colsum[c], y[r * cols + c]);
    }
}

__global__ void scale_inplace(float* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = 2.0f * v[i];
}

__global__ void accumulate(const float* x, float* acc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += x[i];
}
