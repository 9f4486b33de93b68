// Row softmax, one block per row: max, then sum of exponentials, then normalise.
#include <cuda_runtime.h>
#include <float.h>

#define THREADS 256

__device__ float block_max(float v, float* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
        __syncthreads();
    }
    float r = scratch[0];
    __syncthreads();
    return r;
}

__global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    __shared__ float red[THREADS];
    int row = blockIdx.x;
    if (row >= rows) return;
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float m = -FLT_MAX;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = block_max(m, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += __expf(xr[j] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;
}

void softmax(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    dim3 block(THREADS);
    dim3 grid(rows);
    softmax_rows<<<grid, block, 0, stream>>>(x, y, rows, cols);
}
