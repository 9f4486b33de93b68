// The cuda target's mla-paged-prefill expert (tasks/mla-paged-prefill/seeds/cuda/expert: prefill.cu over tiles of
// 4 query tokens, or for a step of one query per sequence the decode expert's split.cu then merge.cu, as the plan
// dispatches on Q == B) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h: output and the base-2 lse
// must match causal absorbed-form attention computed here in double (query i of Lq seeing the first
// Lkv - Lq + i + 1 of its sequence's Lkv pages). PTX primitives and dynamic shared memory as in
// mla_decode_expert.cpp. Cases: a whole prefill (Lq = Lkv), chunked prefills, token counts that are no multiple of
// a tile, one-token sequences inside a prefill batch, more than 32 sequences, a decode step; bf16 and fp16.
#include "cuda_cpu.h"
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#define __forceinline__ inline
#define __launch_bounds__(...)
inline int min(int a, int b) { return a < b ? a : b; }
inline float __shfl_xor_sync(unsigned m, float v, int lane_mask) {
  int r = __shfl_sync(m, __float_as_int(v), (int)(cpu_lin() % 32) ^ lane_mask);
  return __int_as_float(r);
}
inline int __shfl_up_sync(unsigned m, int v, int delta) {
  const int lane = (int)(cpu_lin() % 32);
  return __shfl_sync(m, v, lane >= delta ? lane - delta : lane);
}

#define KSMLA_HOST_PRIMITIVES
// The running kernel's dynamic shared memory (the decode split's or the prefill tiles'), set by the launcher.
static int g_shared_bytes = 0;
static std::vector<std::array<unsigned, 6>> g_frag(1024);  // each thread's MMA fragments, as posted
namespace ksmla {
template <typename T> struct Mma {
  // c += a (16x16, row-major) * b (16x8, col-major), warp-wide: lane (g, t) holds a0 (row g, k 2t, 2t+1), a1 (row
  // g+8), a2 (row g, k +8), a3 (row g+8, k +8), b0 (k 2t, 2t+1, n g), b1 (k +8), c (rows g, g+8, n 2t, 2t+1).
  static void run(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    const unsigned l = cpu_lin(), w = l / 32, g = (l % 32) / 4, t4 = l % 4;
    g_frag[l] = {a[0], a[1], a[2], a[3], b0, b1};
    __syncwarp();
    auto half = [&](int lane, int reg, int hi) {
      T x;
      x.b = (unsigned short)(g_frag[w * 32 + lane][reg] >> (16 * hi));
      return (float)x;
    };
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1), col = 2 * t4 + (e & 1);
      float acc = c[e];
      for (int k = 0; k < 16; ++k)
        acc += half((row % 8) * 4 + (k % 8) / 2, (row >= 8) + 2 * (k >= 8), k % 2) *
               half(col * 4 + (k % 8) / 2, 4 + (k >= 8), k % 2);
      c[e] = acc;
    }
    __syncwarp();
  }
};
inline void cp16(void* dst, const void* src, bool ok) {
  if (ok) std::memcpy(dst, src, 16); else std::memset(dst, 0, 16);
}
inline void cp_commit() {}
template <int N> inline void cp_wait() {}
}  // namespace ksmla
#define KSMLA_DYNAMIC_SHARED(name) \
  unsigned char* name = static_cast<unsigned char*>(cpu_block_shared(g_shared_bytes))

#include "prefill.cu"
#include "split.cu"
#include "merge.cu"

static std::mt19937 rng(13);
constexpr int H = 16, DC = 512, DP = 64, CH = 64;

// Sequences of (query tokens, pages).
template <typename T>
int check(const char* what, const std::vector<std::pair<int, int>>& seqs, int P) {
  const int B = (int)seqs.size();
  std::vector<int> qo(B + 1, 0), kv(B + 1, 0);
  for (int b = 0; b < B; ++b) qo[b + 1] = qo[b] + seqs[b].first, kv[b + 1] = kv[b] + seqs[b].second;
  const int Q = qo[B], N = kv[B];
  std::normal_distribution<float> nd(0, 1);
  auto rnd = [&](size_t n) { std::vector<T> x(n); for (auto& e : x) e = T(nd(rng)); return x; };
  const auto qn = rnd((size_t)Q * H * DC), qp = rnd((size_t)Q * H * DP);
  const auto ckv = rnd((size_t)P * DC), kpe = rnd((size_t)P * DP);
  std::vector<int> pages(P);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int> indices(pages.begin(), pages.begin() + N);
  std::vector<T> out((size_t)Q * H * DC, T(NAN));
  std::vector<float> lse((size_t)Q * H, NAN);
  if (Q > B) {  // the plan's prefill launch: 256 ((Q + 3) / 4 + B) threads in blocks of 256
    g_shared_bytes = ksmla::kPrefillSharedBytes;
    cpu_launch({(unsigned)(256 * ((Q + 3) / 4 + B)), 1, 1}, {256, 1, 1}, [&] {
      mla_prefill_tiles<T>(qn.data(), qp.data(), ckv.data(), kpe.data(), qo.data(), kv.data(), indices.data(),
                           out.data(), lse.data(), B);
    });
  } else {  // Q == B: the decode expert's split and merge
    const int items = (N + CH - 1) / CH + B;
    std::vector<float> part((size_t)items * H * (DC + 2), NAN);
    g_shared_bytes = ksmla::kSharedBytes;
    cpu_launch({(unsigned)(128 * items), 1, 1}, {128, 1, 1}, [&] {
      mla_decode_split<CH, T>(qn.data(), qp.data(), ckv.data(), kpe.data(), kv.data(), indices.data(), part.data(), B);
    });
    cpu_launch({(unsigned)(DC * B * H), 1, 1}, {DC, 1, 1},
               [&] { mla_decode_merge<CH, T>(part.data(), kv.data(), out.data(), lse.data(), B); });
  }
  double worst = 0, worst_lse = 0;
  int bad = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < seqs[b].first; ++i)
      for (int h = 0; h < H; ++h) {
        const size_t row = (size_t)(qo[b] + i) * H + h;
        const int seen = seqs[b].second - seqs[b].first + i + 1;
        std::vector<double> s;
        for (int t = 0; t < seen; ++t) {
          const int p = indices[kv[b] + t];
          double d = 0;
          for (int x = 0; x < DC; ++x) d += (double)(float)qn[row * DC + x] * (double)(float)ckv[(size_t)p * DC + x];
          for (int x = 0; x < DP; ++x) d += (double)(float)qp[row * DP + x] * (double)(float)kpe[(size_t)p * DP + x];
          s.push_back(d / std::sqrt(192.0));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        const double want_lse = (mx + std::log(sum)) / std::log(2.0);
        const double e_lse = std::fabs(lse[row] - want_lse);
        worst_lse = std::max(worst_lse, e_lse);
        if (!(e_lse <= 1e-3 + 1e-4 * std::fabs(want_lse))) ++bad;
        for (int x = 0; x < DC; ++x) {
          double want = 0;
          for (int t = 0; t < seen; ++t)
            want += std::exp(s[t] - mx) / sum * (double)(float)ckv[(size_t)indices[kv[b] + t] * DC + x];
          const double e = std::fabs((double)(float)out[row * DC + x] - want);
          worst = std::max(worst, e);
          if (!(e <= 1e-2 + 2e-2 * std::fabs(want))) ++bad;  // the task's bfloat16 tolerance
        }
      }
  std::printf("%-44s worst error output %.2e lse %.2e%s\n", what, worst, worst_lse, bad ? "  FAILED" : "");
  return bad;
}

int main() {
  using bf = __nv_bfloat16;
  int bad = 0;
  bad += check<bf>("whole prefill (Lq = Lkv = 37)", {{37, 37}}, 64);
  bad += check<bf>("chunked: 6 of 70, 1 of 20, 9 of 9", {{6, 70}, {1, 20}, {9, 9}}, 120);
  bad += check<__half>("fp16, 13 of 50", {{13, 50}}, 64);
  std::vector<std::pair<int, int>> many(35, {1, 3});
  many[7] = {5, 8};
  bad += check<bf>("35 sequences, one-token ones among them", many, 160);
  bad += check<bf>("decode step (Q == B): 1 of 200, 1 of 3", {{1, 200}, {1, 3}}, 256);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("mla prefill expert agrees with the reference\n");
  return 0;
}
