// The prelude's Metal semantics, checked on the CPU emulation of cuda_cpu.h: warp reductions, scans,
// shuffles (lanes without a source keep their value), quads, simdgroup ids, a float2 shuffle, and 8x8
// simdgroup_matrix load (stride, origin, transpose) / multiply(-accumulate) / store / thread_elements().
// warp/ and mma/ are the Metal kernels of this folder, back-translated by tests/testsuite/back_translate.rs.
#include "cuda_cpu.h"
#include "warp/metal_prelude.cuh"
#include <cstdio>
namespace mlx { namespace core { namespace cu {
void warp_k(const float* x, float* y) {
#include "warp/k.cu"
}
void mma_k(const float* A, const float* B, const float* C, float* D, float* E, float* F) {
#include "mma/k.cu"
}
} } }
static int bad = 0;
static void check(const char* what, int i, float got, float want) {
  if (std::fabs(got - want) > 1e-4f * (1 + std::fabs(want))) { if (bad++ < 20) printf("%s[%d]: got %g want %g\n", what, i, got, want); }
}
int main() {
  std::vector<float> x(64), y(64 * 12);
  for (int i = 0; i < 64; ++i) x[i] = float((i * 37) % 64) - 20.0f;
  cpu_launch({64, 1, 1}, {64, 1, 1}, [&] { mlx::core::cu::warp_k(x.data(), y.data()); });
  for (int i = 0; i < 64; ++i) {
    int w = i / 32, l = i % 32; const float* xs = &x[w * 32]; const float* o = &y[i * 12];
    float s = 0, mx = -1e30f, mn = 1e30f, inc = 0, exc = 0;
    for (int k = 0; k < 32; ++k) { s += xs[k]; mx = std::max(mx, xs[k]); mn = std::min(mn, xs[k]); if (k <= l) inc += xs[k]; if (k < l) exc += xs[k]; }
    check("sum", i, o[0], s); check("max", i, o[1], mx); check("min", i, o[2], mn);
    check("incl", i, o[3], inc); check("excl", i, o[4], exc);
    check("up3", i, o[5], l >= 3 ? xs[l - 3] : xs[l]);
    check("down5", i, o[6], l + 5 < 32 ? xs[l + 5] : xs[l]);
    check("xor7", i, o[7], xs[l ^ 7]);
    check("bcast9", i, o[8], xs[9]);
    int q = l & ~3; check("quad", i, o[9], xs[q] + xs[q + 1] + xs[q + 2] + xs[q + 3]);
    check("ids", i, o[10], float(w * 100 + l));
    check("rot", i, o[11], 2.0f * xs[(l + 1) % 32]);
  }
  std::vector<float> A(64), B(64), C(128), D(64), E(64), F(128);
  for (int i = 0; i < 64; ++i) { A[i] = float(i % 7) - 3; B[i] = float((i * 5) % 11) - 5; }
  for (int i = 0; i < 128; ++i) C[i] = float(i % 13);
  cpu_launch({32, 1, 1}, {32, 1, 1}, [&] { mlx::core::cu::mma_k(A.data(), B.data(), C.data(), D.data(), E.data(), F.data()); });
  for (int r = 0; r < 8; ++r) for (int c = 0; c < 8; ++c) {
    float d = C[r * 16 + 8 + c], e = 0;
    for (int k = 0; k < 8; ++k) { d += A[r * 8 + k] * B[k * 8 + c]; e += A[k * 8 + r] * B[k * 8 + c]; }
    check("D", r * 8 + c, D[r * 8 + c], d);
    check("E^T", r * 8 + c, E[c * 8 + r], e);
  }
  for (int l = 0; l < 32; ++l) for (int i = 0; i < 2; ++i) {
    int row = ((l / 4) & 4) + ((l / 2) % 4), col = ((l / 4) & 2) * 2 + (l % 2) * 2 + i;
    check("elems", 2 * l + i, F[2 * l + i], A[row * 8 + col]);
    check("elems of D", 2 * l + i, F[64 + 2 * l + i], D[row * 8 + col]);
  }
  printf(bad ? "FAILED: %d mismatches\n" : "all prelude checks passed\n", bad);
  return bad != 0;
}
