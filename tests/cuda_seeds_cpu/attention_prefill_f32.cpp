// The shipped CUDA expert prefill of attention for float32 (tasks/attention/seeds/mlx-cuda/expert: attn.cuh's
// prefill_f32, launched as prefill.cu) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h (each
// CUDA thread a fiber, blocks in turn): it must match softmax(q k^T / sqrt(D)) v computed here in
// double, with the causal diagonal offset by Tk - Tq. The float32 path runs 3xTF32 on tensor cores; here its
// PTX primitives are emulated (TF32 rounding to nearest, ties away; the m16n8k8 MMA over the warp's fragments,
// exchanged through one slot per lane), so the fragment layouts, the permuted reduction index, the split and
// the online softmax are all checked. Shapes reach a last key tile shorter than the tile, a pass with rows past
// Tq, query tiles of one and several passes, a chunked causal prefill (Tq < Tk), rows that see no key of a
// tile, GQA and MHA, D 64 and 128, 4 and 8 warps, WM 1 and 2, key tiles of 16 and 32, each in the shared
// memory the plan gives the launch. The 16-bit tensor-core path is compiled, not run. The launch is the plan's
// (tests/testsuite/cuda_seeds_cpu.rs): a block of 32 * NW threads per (b * Hq + h, query tile of 16 * WM * NW
// rows).
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
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
// The float32 path's primitives (KSATTN_HOST_PRIMITIVES): 2^x, cvt.rna.tf32.f32 and mma.m16n8k8 (tf32).
#define KSATTN_HOST_PRIMITIVES
inline float ex2(float x) { return std::exp2(x); }
inline unsigned tf32(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;  // 10 mantissa bits, ties away
  return u;
}
struct MmaLane { unsigned a[4], b[2]; };
inline MmaLane g_mma[8][32];  // per warp of the running block (blocks run one at a time)
// A (16 x 8) row r, column k is in lane 4 (r % 8) + k % 4, register (r >= 8) + 2 (k >= 4); B (8 x 8) row k,
// column n in lane 4 n + k % 4, register k >= 4; lane 4 g + t accumulates C (g, 2t), (g, 2t + 1), (g + 8, 2t),
// (g + 8, 2t + 1). The hardware reads 19 bits of each operand (the low 13 are ignored, as here), so an
// operand that skipped tf32() loses its low bits here too; TF32 products are exact in float; the sum runs in
// float, in k order (the tensor cores round differently: float32 accuracy is proven on the device).
inline void mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  const unsigned l = cpu_lin(), w = l / 32, lane = l % 32, g = lane / 4, t = lane % 4, m = 0xffffe000u;
  g_mma[w][lane] = {{a[0] & m, a[1] & m, a[2] & m, a[3] & m}, {b0 & m, b1 & m}};
  __syncwarp();
  for (unsigned e = 0; e < 4; ++e) {
    const unsigned r = g + 8 * (e >> 1), n = 2 * t + (e & 1);
    float sum = c[e];
    for (unsigned kk = 0; kk < 8; ++kk)
      sum += __uint_as_float(g_mma[w][4 * (r % 8) + kk % 4].a[(r >= 8) + 2 * (kk >= 4)]) *
             __uint_as_float(g_mma[w][4 * n + kk % 4].b[kk >= 4]);
    c[e] = sum;
  }
  __syncwarp();  // every lane has read the slots before any writes its next operands
}
// PTX in the 16-bit tensor-core primitives is never emitted here: none of them is instantiated for float.
#define asm(...) ((void)0)

#include "attn.cuh"

static std::mt19937 rng(11);

// One shape: the seed's prefill body as prefill.cu calls it, on the dynamic shared memory the plan gives the
// launch, (16 * WM * NW + 4 * BK) * D * 2 bytes (attn.cuh asserts its use fits).
template <int D, int NW, int WM, int BK, int B, int Hq, int Hkv, int Tq, int Tk, int CAUSAL>
int check(const char* what) {
  constexpr int BQ = 16 * WM * NW, NT = 32 * NW, G = Hq / Hkv;
  const double atol = 1e-4, rtol = 1e-3;  // the task's float32 tolerance
  std::normal_distribution<float> nd(0, 1);
  auto rnd = [&](size_t n) { std::vector<float> x(n); for (auto& e : x) e = 2 * nd(rng); return x; };
  const auto q = rnd((size_t)B * Hq * Tq * D), k = rnd((size_t)B * Hkv * Tk * D), v = rnd((size_t)B * Hkv * Tk * D);
  std::vector<float> o((size_t)B * Hq * Tq * D, NAN);
  cpu_launch({(unsigned)(NT * B * Hq), (unsigned)((Tq + BQ - 1) / BQ), 1}, {NT, 1, 1}, [&] {
    auto* smem = static_cast<unsigned char*>(cpu_block_shared((size_t)(BQ + 4 * BK) * D * 2));
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
  bad += check<128, 4, 1, 32, 1, 6, 2, 33, 153, 0>("GQA 3, Tq < Tk (the held-out odd shape's kind)");
  bad += check<64, 4, 2, 32, 1, 3, 1, 140, 200, 1>("chunked causal with two passes, GQA 3");
  if (bad) {
    printf("%d outputs outside the tolerance\n", bad);
    return 1;
  }
  printf("prefill (float32) agrees with the reference\n");
  return 0;
}
