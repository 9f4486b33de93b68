// The cuda target's naive MLA seeds (tasks/mla-paged-decode/seeds/cuda/naive, tasks/mla-paged-prefill/seeds/cuda/
// naive) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h, with the plans' launches (one warp per
// output row, blocks of TG threads): output and the base-2 lse must match the absorbed-form attention computed
// here in double: logits (q_nope . ckv + q_pe . kpe) / sqrt(192), values the compressed rows, each prefill query
// i of Lq seeing the first Lkv - Lq + i + 1 of its sequence's Lkv pages. Page lists scattered over the cache,
// sequences of one page and of many, a prefill as long as its pages and one of a single query; bf16 and fp16.
#include "cuda_cpu.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#define __forceinline__ inline
inline float __shfl_xor_sync(unsigned m, float v, int lane_mask) {
  int r = __shfl_sync(m, __float_as_int(v), (int)(cpu_lin() % 32) ^ lane_mask);
  return __int_as_float(r);
}

#include "../../tasks/mla-paged-decode/seeds/cuda/naive/mla_decode.cu"
#include "../../tasks/mla-paged-prefill/seeds/cuda/naive/mla_prefill.cu"

#ifdef KSEARCH_MLX_BODY
// The decode seed as `ksearch translate --to mlx-cuda` writes it (its body, found on the include path), wrapped
// as MLX wraps a body: scalars arrive as pointers, the type argument as `using T`.
namespace mlxbody {
template <typename T_>
void mla_decode_naive(const T_* q_nope, const T_* q_pe, const T_* ckv_cache, const T_* kpe_cache,
                      const int* kv_indptr, const int* kv_indices, T_* output, float* lse, const int* B, const int* H,
                      const int* Dckv, const int* Dkpe) {
  using T = T_;
#include "mla_decode_naive.cu"
}
}  // namespace mlxbody
#endif

static std::mt19937 rng(11);
constexpr int H = 16, DC = 512, DP = 64, TG = 128;

// Sequences of (queries, pages); decode when every sequence has one query.
template <typename T>
int check(const char* what, const std::vector<std::pair<int, int>>& seqs, int P, bool decode) {
  const int B = (int)seqs.size();
  std::vector<int> qo(B + 1, 0), kv(B + 1, 0);
  for (int b = 0; b < B; ++b) {
    qo[b + 1] = qo[b] + seqs[b].first;
    kv[b + 1] = kv[b] + seqs[b].second;
  }
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
  cpu_launch({(unsigned)(32 * Q * H), 1, 1}, {TG, 1, 1}, [&] {
#ifdef KSEARCH_MLX_BODY
    const int sB = B, sH = H, sDC = DC, sDP = DP;
    if (decode)
      mlxbody::mla_decode_naive<T>(qn.data(), qp.data(), ckv.data(), kpe.data(), kv.data(), indices.data(),
                                   out.data(), lse.data(), &sB, &sH, &sDC, &sDP);
#else
    if (decode)
      mla_decode_naive<T>(qn.data(), qp.data(), ckv.data(), kpe.data(), kv.data(), indices.data(), out.data(),
                          lse.data(), B, H, DC, DP);
#endif
    else
      mla_prefill_naive<T>(qn.data(), qp.data(), ckv.data(), kpe.data(), qo.data(), kv.data(), indices.data(),
                           out.data(), lse.data(), B, Q, H, DC, DP);
  });
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
          if (!(e <= 1e-2 + 2e-2 * std::fabs(want))) ++bad;  // the tasks' bfloat16 tolerance
        }
      }
  std::printf("%-44s worst error output %.2e lse %.2e%s\n", what, worst, worst_lse, bad ? "  FAILED" : "");
  return bad;
}

int main() {
  using bf = __nv_bfloat16;
  int bad = 0;
  bad += check<bf>("decode: lengths 1, 37, 200", {{1, 1}, {1, 37}, {1, 200}}, 300, true);
  bad += check<__half>("decode fp16", {{1, 90}, {1, 3}}, 120, true);
  bad += check<bf>("prefill: whole, chunked, single query", {{9, 9}, {5, 40}, {1, 17}}, 80, false);
  bad += check<__half>("prefill fp16", {{12, 30}}, 40, false);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("mla naive seeds agree with the reference\n");
  return 0;
}
