#include <cuda_runtime.h>
#include <math.h>
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__global__ void softmax_kernel(float* __restrict__ out, const float* __restrict__ in, int N, int D) {
  extern __shared__ float smem[];
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  const int nwarps = blockDim.x / 32;
  const float* x = in + (long)row * D;
  float* y = out + (long)row * D;
  float m = -INFINITY;
  for (int i = tid; i < D; i += blockDim.x) m = fmaxf(m, x[i]);
  m = warpMax(m);
  if (lane == 0) smem[warp] = m;
  __syncthreads();
  if (tid < 32) {
    float v = tid < nwarps ? smem[tid] : -INFINITY;
    v = warpMax(v);
    if (tid == 0) smem[0] = v;
  }
  __syncthreads();
  m = smem[0];
  __syncthreads();
  float s = 0.f;
  for (int i = tid; i < D; i += blockDim.x) s += expf(x[i] - m);
  s = warpSum(s);
  if (lane == 0) smem[warp] = s;
  __syncthreads();
  if (tid < 32) {
    float v = tid < nwarps ? smem[tid] : 0.f;
    v = warpSum(v);
    if (tid == 0) smem[0] = v;
  }
  __syncthreads();
  float inv = 1.f / smem[0];
  for (int i = tid; i < D; i += blockDim.x) y[i] = expf(x[i] - m) * inv;
}
void launch(float* out, const float* in, int N, int D) {
  int threads = 256;
  softmax_kernel<<<N, threads, (threads / 32) * sizeof(float)>>>(out, in, N, D);
}
