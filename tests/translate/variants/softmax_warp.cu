#include <cuda_fp16.h>
#include <math_constants.h>

// One warp per row, half input, float math.
__global__ void softmax_warp(const __half* x, __half* y, int rows, int cols) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const __half* xr = x + (size_t)row * cols;
    float m = -CUDART_INF_F;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, __half2float(xr[c]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    float s = 0.f;
    for (int c = lane; c < cols; c += 32) s += __expf(__half2float(xr[c]) - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    float inv = 1.f / s;
    for (int c = lane; c < cols; c += 32)
        y[(size_t)row * cols + c] = __float2half(__expf(__half2float(xr[c]) - m) * inv);
}
