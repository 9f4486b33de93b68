// 256-bin histogram of byte values: per-block counts in shared memory, merged with global atomics.
#define BINS 256

__global__ void histogram(const int* data, int* hist, int n) {
    __shared__ int local[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) {
        local[b] = 0;
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        int v = data[i] & (BINS - 1);
        atomicAdd(&local[v], 1);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) {
        atomicAdd(&hist[b], local[b]);
    }
}
