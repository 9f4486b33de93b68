// tests/translate/mma_gemm.cu (inline PTX: mma.sync m16n8k16, cp.async) translated to mlx-metal, that Metal
// back-translated to CUDA over the Metal prelude (tests/testsuite/cuda_seeds_cpu.rs), its body run on the CPU emulation
// against a double product: the emulated PTX computes what the tensor cores would. KS_T: __half, or __nv_bfloat16
// for the bf16 variant the test makes of the fixture.
#include "cuda_cpu.h"
#include "header.cuh"
#ifndef KS_T
#define KS_T __half
#endif
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
void gemm(const KS_T* A, const KS_T* B, const int32_t* M, const int32_t* N, const int32_t* K, float* C) {
#include "gemm_mma.cu"
}
int main() {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  int bad = 0;
  for (auto [m, n, k] : {std::array<int, 3>{16, 8, 16}, {37, 21, 40}, {64, 64, 128}}) {
    std::vector<KS_T> a((size_t)m * k), b((size_t)n * k);
    for (auto& x : a) x = KS_T(nd(rng));
    for (auto& x : b) x = KS_T(nd(rng));
    std::vector<float> c((size_t)m * n, NAN);
    cpu_launch({(unsigned)(((n + 7) / 8) * 32), (unsigned)((m + 15) / 16), 1}, {32, 1, 1}, [&] { gemm(a.data(), b.data(), &m, &n, &k, c.data()); });
    double worst = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double want = 0;
        for (int q = 0; q < k; ++q) want += (double)(float)a[(size_t)i * k + q] * (double)(float)b[(size_t)j * k + q];
        worst = std::max(worst, std::fabs(c[(size_t)i * n + j] - want));
      }
    std::printf("M %d N %d K %d: worst error %.2e\n", m, n, k, worst);
    bad += !(worst < 1e-3);
  }
  std::printf(bad ? "FAILED\n" : "tensor-core gemm agrees with the reference\n");
  return bad;
}
