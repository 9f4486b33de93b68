#include <cuda_fp16.h>
__global__ void axpy_half(const __half* x, __half* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half two = __float2half(2.0f);
        y[i] = __hadd(__hmul(two, x[i]), hexp(x[i]));
    }
}
