// Tile copy through shared memory with cp.async (sm_80+), then scale.
#include <cuda_pipeline.h>

__global__ void scale_tiles(const float* x, float* y, int n) {
    __shared__ float tile[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __pipeline_memcpy_async(&tile[threadIdx.x], &x[i], sizeof(float));
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    if (i < n) y[i] = 2.0f * tile[threadIdx.x];
}

__global__ void copy_asm(const float* x, float* y, int n) {
    __shared__ float buf[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(&buf[threadIdx.x]));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(dst), "l"(&x[i]));
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    if (i < n) y[i] = buf[threadIdx.x];
}
