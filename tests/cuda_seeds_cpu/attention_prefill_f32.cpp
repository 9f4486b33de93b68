// The shipped CUDA expert prefill of attention for float32 (tasks/attention/seeds/mlx-cuda/expert: attn.cuh's
// prefill_f32, launched as prefill.cu) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h (each
// CUDA thread a fiber, blocks in turn): it must match softmax(q k^T / sqrt(D)) v computed here in
// double, with the causal diagonal offset by Tk - Tq. The FMA path keeps a tile's scores in shared memory, one
// row per query row written by the even thread of its pair and read by both after __syncwarp; shapes reach
// a last key tile shorter than 32, a pass with rows past Tq, query tiles of one and several passes, a chunked
// causal prefill (Tq < Tk), rows that see no key of a tile, GQA and MHA, D 64 and 128, 4 and 8 warps, WM 1
// and 2. The 16-bit tensor-core path is compiled, not run. The launch is the plan's (tests/testsuite/
// cuda_seeds_cpu.rs): a block of 32 * NW threads per (b * Hq + h, query tile of 16 * WM * NW rows).
#include "cuda_cpu.h"
#include <cstdio>
#include <random>
// The few CUDA names attn.cuh uses that cuda_cpu.h leaves out (the 16-bit ones only to compile).
#define __forceinline__ inline
#define __align__(n) __attribute__((aligned(n)))
inline int min(int a, int b) { return a < b ? a : b; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float __shfl_xor_sync(unsigned m, float v, int lane_mask) {
  int r = __shfl_sync(m, __float_as_int(v), (int)(cpu_lin() % 32) ^ lane_mask);
  return __int_as_float(r);
}
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline __half __float2half_rn(float f) { return __half(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline size_t __cvta_generic_to_shared(const void* p) { return reinterpret_cast<size_t>(p); }
// PTX in the tensor-core primitives is never emitted here: none of them is instantiated for float.
#define asm(...) ((void)0)

#include "attn.cuh"

static std::mt19937 rng(11);

// One shape: the seed's prefill body as prefill.cu calls it, on the shared memory the float32 path uses (the
// launch gives (16 * WM * NW + 4 * BK) * D * 2 bytes; attn.cuh asserts its use fits).
template <int D, int NW, int WM, int BK, int B, int Hq, int Hkv, int Tq, int Tk, int CAUSAL>
int check(const char* what) {
  constexpr int BQ = 16 * WM * NW, NT = 32 * NW, G = Hq / Hkv;
  const double atol = 1e-4, rtol = 1e-3;  // the task's float32 tolerance
  std::normal_distribution<float> nd(0, 1);
  auto rnd = [&](size_t n) { std::vector<float> x(n); for (auto& e : x) e = 2 * nd(rng); return x; };
  const auto q = rnd((size_t)B * Hq * Tq * D), k = rnd((size_t)B * Hkv * Tk * D), v = rnd((size_t)B * Hkv * Tk * D);
  std::vector<float> o((size_t)B * Hq * Tq * D, NAN);
  cpu_launch({(unsigned)(NT * B * Hq), (unsigned)((Tq + BQ - 1) / BQ), 1}, {NT, 1, 1}, [&] {
    auto* smem = static_cast<unsigned char*>(cpu_block_shared(2 * 32 * D * 4 + 32 * (NT / 2) * 4));
    ksattn::prefill<D, NW, WM, BK>(q.data(), k.data(), v.data(), o.data(), Hq, Hkv, Tq, Tk, CAUSAL, smem);
  });
  int bad = 0;
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (int i = 0; i < Tq; ++i) {
        const float* qi = &q[(((size_t)b * Hq + h) * Tq + i) * D];
        const size_t kv = (size_t)b * Hkv + h / G;
        const int n = CAUSAL ? std::min(Tk, i + (Tk - Tq) + 1) : Tk;
        std::vector<double> s(n);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; ++j) {
          double d = 0;
          for (int e = 0; e < D; ++e) d += (double)qi[e] * k[(kv * Tk + j) * D + e];
          s[j] = d / std::sqrt((double)D);
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int e = 0; e < D; ++e) {
          double ref = 0;
          for (int j = 0; j < n; ++j) ref += s[j] * v[(kv * Tk + j) * D + e];
          ref = n ? ref / sum : 0;
          const double got = o[(((size_t)b * Hq + h) * Tq + i) * D + e];
          const double err = std::fabs(got - ref) / (atol + rtol * std::fabs(ref));
          if (!(err <= 1)) ++bad;
          worst = std::max(worst, std::isnan(err) ? INFINITY : err);
        }
      }
  printf("%-48s worst error %.3g of tolerance\n", what, worst);
  return bad;
}

int main() {
  int bad = 0;
  //                 D    NW WM BK  B  Hq Hkv Tq   Tk   CAUSAL
  bad += check<128, 4, 2, 64, 1, 2, 1, 100, 100, 1>("causal, one pass short of its rows, GQA 2");
  bad += check<128, 4, 2, 64, 1, 2, 2, 70, 130, 0>("non-causal, last key tile of 2 keys");
  bad += check<128, 4, 1, 32, 1, 4, 1, 150, 250, 1>("chunked causal (Tq < Tk), 3 query tiles");
  bad += check<64, 4, 1, 32, 2, 2, 1, 90, 90, 1>("D 64, two sequences, smallest shared memory");
  bad += check<64, 8, 2, 64, 1, 1, 1, 300, 300, 1>("D 64, 8 warps, two passes per tile");
  bad += check<128, 8, 1, 32, 1, 2, 1, 33, 41, 0>("8 warps, one short pass");
  if (bad) {
    printf("%d outputs outside the tolerance\n", bad);
    return 1;
  }
  printf("prefill (float32) agrees with the reference\n");
  return 0;
}
