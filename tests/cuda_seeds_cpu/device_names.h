// CUDA names the cuda seeds use that tests/back_translate_cpu/cuda_cpu.h leaves out, for the drivers of the
// cuda target's seeds (mla_*.cpp, trimul_*.cpp).
#pragma once
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float __shfl_xor_sync(unsigned m, float v, int lane_mask) {
  int r = __shfl_sync(m, __float_as_int(v), (int)(cpu_lin() % 32) ^ lane_mask);
  return __int_as_float(r);
}
inline int __shfl_up_sync(unsigned m, int v, int delta) {
  const int lane = (int)(cpu_lin() % 32);
  return __shfl_sync(m, v, lane >= delta ? lane - delta : lane);
}
