#include <cuda_runtime.h>
namespace kern {
template <typename T>
__device__ inline T relu(T v) { return v > T(0) ? v : T(0); }

template <typename T>
__global__ void relu_kernel(T* out, const T* __restrict__ in, const int n) {
    const int idx = blockDim.x * blockIdx.x + threadIdx.x;
    if (idx >= n) return;
    out[idx] = relu(in[idx]);
}
}  // namespace kern

void launch(float* out, const float* in, int n, cudaStream_t s) {
    constexpr int kThreads = 128;
    kern::relu_kernel<float><<<(n + kThreads - 1) / kThreads, kThreads, 0, s>>>(out, in, n);
}
