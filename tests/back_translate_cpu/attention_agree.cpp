// The shipped expert Metal seed of attention (8x8 simdgroup_matrix flash prefill; split-K decode and its
// combine), back-translated, computes what the back-translated naive seed computes, on the CPU emulation of
// cuda_cpu.h, with and without the causal mask. Template values follow the seed's defaults (BK 16, NSG 4,
// DSG 4, MAXR 8, NSPLIT 32; D 64).
#include "cuda_cpu.h"
#include "attention-naive/metal_prelude.cuh"
#include <cstdio>
#include <random>
namespace mlx { namespace core { namespace cu {
void naive(const float* q, const float* k, const float* v, const int32_t* B, const int32_t* Hq, const int32_t* Hkv, const int32_t* Tq, const int32_t* Tk, const int32_t* D, const int32_t* CAUSAL, float* o) {
  using T = float;
#include "attention-naive/attention_naive.cu"
}
void prefill(const float* q, const float* k, const float* v, const int32_t* Hq, const int32_t* Hkv, const int32_t* Tq, const int32_t* Tk, const int32_t* CAUSAL, float* o) {
  constexpr int D = 64; constexpr int BK = 16; constexpr int NSG = 4; using T = float;
#include "attention-expert/flash_prefill.cu"
}
void split(const float* q, const float* k, const float* v, const int32_t* Hq, const int32_t* Hkv, const int32_t* Tq, const int32_t* Tk, const int32_t* CAUSAL, float* part_m, float* part_l, float* part_o) {
  constexpr int D = 64; constexpr int DSG = 4; constexpr int MAXR = 8; constexpr int NSPLIT = 32; using T = float;
#include "attention-expert/decode_split.cu"
}
void combine(const float* part_m, const float* part_l, const float* part_o, const int32_t* B, const int32_t* Hq, const int32_t* Tq, float* o) {
  constexpr int D = 64; constexpr int NSPLIT = 32; using T = float;
#include "attention-expert/decode_combine.cu"
}
} } }
using namespace mlx::core::cu;
static std::mt19937 rng(11);
static std::vector<float> rnd(size_t n) { std::normal_distribution<float> d(0, 1); std::vector<float> v(n); for (auto& x : v) x = d(rng); return v; }
static int compare(const char* what, const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0; int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) { double e = std::fabs(a[i] - b[i]) / (1e-3 + std::fabs(b[i])); worst = std::max(worst, e); if (!(e < 1e-3)) ++bad; }
  printf("%-22s %zu elements, worst rel diff %.2e, %d bad\n", what, a.size(), worst, bad);
  return bad;
}
int main() {
  int bad = 0;
  const int B = 1, Hq = 2, Hkv = 1, D = 64;
  for (int causal = 0; causal < 2; ++causal) {
    const int Tq = 20, Tk = 27;
    auto q = rnd(B * Hq * Tq * D), k = rnd(B * Hkv * Tk * D), v = rnd(B * Hkv * Tk * D);
    std::vector<float> o1(B * Hq * Tq * D, NAN), o2 = o1;
    int32_t sB = B, sHq = Hq, sHkv = Hkv, sTq = Tq, sTk = Tk, sD = D, sC = causal;
    cpu_launch({32u * B * Hq * Tq, 1, 1}, {128, 1, 1}, [&] { naive(q.data(), k.data(), v.data(), &sB, &sHq, &sHkv, &sTq, &sTk, &sD, &sC, o1.data()); });
    const int NSG = 4;
    cpu_launch({32u * NSG * ((Tq + 8 * NSG - 1) / (8 * NSG)), Hq, B}, {32 * NSG, 1, 1}, [&] { prefill(q.data(), k.data(), v.data(), &sHq, &sHkv, &sTq, &sTk, &sC, o2.data()); });
    bad += compare(causal ? "prefill causal" : "prefill", o2, o1);
  }
  for (int causal = 0; causal < 2; ++causal) {
    const int Tq = 1, Tk = 90, NSPLIT = 32, DSG = 4;
    auto q = rnd(B * Hq * Tq * D), k = rnd(B * Hkv * Tk * D), v = rnd(B * Hkv * Tk * D);
    std::vector<float> o1(B * Hq * Tq * D, NAN), o2 = o1, pm(B * Hq * Tq * NSPLIT, NAN), pl = pm, po(B * Hq * Tq * NSPLIT * D, NAN);
    int32_t sB = B, sHq = Hq, sHkv = Hkv, sTq = Tq, sTk = Tk, sD = D, sC = causal;
    cpu_launch({32u * B * Hq * Tq, 1, 1}, {128, 1, 1}, [&] { naive(q.data(), k.data(), v.data(), &sB, &sHq, &sHkv, &sTq, &sTk, &sD, &sC, o1.data()); });
    cpu_launch({32u * DSG * NSPLIT, Hkv, B}, {32 * DSG, 1, 1}, [&] { split(q.data(), k.data(), v.data(), &sHq, &sHkv, &sTq, &sTk, &sC, pm.data(), pl.data(), po.data()); });
    cpu_launch({32u * B * Hq * Tq, 1, 1}, {64, 1, 1}, [&] { combine(pm.data(), pl.data(), po.data(), &sB, &sHq, &sTq, o2.data()); });
    bad += compare(causal ? "decode causal" : "decode", o2, o1);
  }
  printf(bad ? "FAILED\n" : "attention: naive and expert back-translations agree\n");
  return bad != 0;
}
