// The shipped CUDA expert decode of attention (tasks/attention/seeds/mlx-cuda/expert: decode.cuh and its two
// launches, decode_split.cu then decode_combine.cu), float32 instantiation, on the CPU emulation of
// tests/back_translate_cpu/cuda_cpu.h (blocks one after another, one std::thread per CUDA thread): it must match
// softmax(q k^T / sqrt(D)) v computed here in double, for shapes that reach every path (GQA factors 3, 4 and 8,
// a head group with an empty slot, GH above G, a last split shorter than CH, one split, D 64 and 128, 2 to 8
// keys per step, the seed's default tunables). The launches' grids are the plan's (tests/cuda_seeds_cpu.rs).
#include "cuda_cpu.h"
#include <cstdio>
#include <random>
// The few CUDA names the decode uses that cuda_cpu.h leaves out.
#define __forceinline__ inline
#define __align__(n) __attribute__((aligned(n)))
inline int min(int a, int b) { return a < b ? a : b; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
template <class T> T __ldg(const T* p) { return *p; }
inline float __shfl_xor_sync(unsigned m, float v, int lane_mask) {
  int r = __shfl_sync(m, __float_as_int(v), (int)(cpu_lin() % 32) ^ lane_mask);
  return __int_as_float(r);
}
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline float2 __half22float2(__half2) { return {0, 0}; }              // 16-bit paths: compiled, not run here
inline float2 __bfloat1622float2(__nv_bfloat162) { return {0, 0}; }
inline __half __float2half_rn(float f) { return __half(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }

#include "decode.cuh"
#include "decode_combine.cuh"

namespace mlx { namespace core { namespace cu {
// As MLX generates it: template values as constexpr locals, then the body.
template <int D_, int NTD_, int CH_, int GH_, int U_, int Hq_, int Hkv_, int Tk_>
void attn_decode_split(const float* q, const float* k, const float* v, float* part) {
  using T = float;
  constexpr int D = D_, NTD = NTD_, CH = CH_, GH = GH_, U = U_, UC = 1, Hq = Hq_, Hkv = Hkv_, Tk = Tk_;
#include "decode_split.cu"
}
template <int D_, int CH_, int Tk_>
void attn_decode_combine(const float* part, float* o) {
  using T = float;
  constexpr int D = D_, CH = CH_, Tk = Tk_;
#include "decode_combine.cu"
}
} } }

static std::mt19937 rng(7);

template <int D, int NTD, int CH, int GH, int U, int B, int Hq, int Hkv, int Tk>
int check(const char* what) {
  constexpr int G = Hq / Hkv, NSPLIT = (Tk + CH - 1) / CH, NGROUPS = (G + GH - 1) / GH;
  std::normal_distribution<float> nd(0, 1);
  auto rnd = [&](size_t n) { std::vector<float> x(n); for (auto& e : x) e = 2 * nd(rng); return x; };
  auto k = rnd((size_t)B * Hkv * Tk * D), v = rnd((size_t)B * Hkv * Tk * D);
  int bad = 0;
  {
    auto q = rnd((size_t)B * Hq * D);
    std::vector<float> o((size_t)B * Hq * D, NAN), part((size_t)B * Hq * NSPLIT * (D + 4), NAN);
    cpu_launch({(unsigned)(NTD * NSPLIT), (unsigned)(B * Hkv * NGROUPS), 1}, {NTD, 1, 1}, [&] {
      mlx::core::cu::attn_decode_split<D, NTD, CH, GH, U, Hq, Hkv, Tk>(q.data(), k.data(), v.data(), part.data());
    });
    cpu_launch({(unsigned)(256 * B * Hq), 1, 1}, {256, 1, 1}, [&] {
      mlx::core::cu::attn_decode_combine<D, CH, Tk>(part.data(), o.data());
    });
    double worst = 0;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hq; ++h) {
        const float* qh = &q[((size_t)b * Hq + h) * D];
        const size_t kv = (size_t)b * Hkv + h / G;
        std::vector<double> s(Tk);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < Tk; ++j) {
          double d = 0;
          for (int e = 0; e < D; ++e) d += (double)qh[e] * k[(kv * Tk + j) * D + e];
          s[j] = d / std::sqrt((double)D);
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j < Tk; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int e = 0; e < D; ++e) {
          double ref = 0;
          for (int j = 0; j < Tk; ++j) ref += s[j] * v[(kv * Tk + j) * D + e];
          ref /= sum;
          const double got = o[((size_t)b * Hq + h) * D + e];
          const double err = std::fabs(got - ref) / (1e-4 + 1e-3 * std::fabs(ref));
          if (!(err <= 1)) ++bad;
          worst = std::max(worst, std::isnan(err) ? INFINITY : err);
        }
      }
    printf("%-34s %d splits, worst error %.3g of tolerance\n", what, NSPLIT, worst);
  }
  return bad;
}

int main() {
  int bad = 0;
  //          D    NTD  CH  GH U  B  Hq Hkv Tk
  bad += check<128, 128, 64, 2, 2, 2, 6, 2, 300>("GQA 3, half-empty head group");
  bad += check<128, 128, 128, 4, 4, 1, 4, 1, 257>("GQA 4, one head group");
  bad += check<128, 128, 64, 8, 2, 1, 8, 1, 150>("GQA 8, GH 8");
  bad += check<64, 256, 32, 1, 8, 1, 2, 2, 100>("MHA, D 64, 256 threads");
  bad += check<128, 128, 512, 4, 2, 1, 4, 1, 77>("one split");
  bad += check<128, 64, 256, 4, 8, 1, 8, 2, 1100>("64 threads, U 8, short last split");
  bad += check<128, 128, 256, 4, 4, 1, 8, 2, 1100>("the seed's defaults (NTD 128, CH 256)");
  bad += check<64, 128, 64, 4, 2, 2, 4, 2, 130>("GH 4 > G 2");
  printf(bad ? "decode FAILED: %d bad\n" : "decode agrees with the reference\n", bad);
  return bad != 0;
}
