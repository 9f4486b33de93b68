// What the MLA drivers (mla_naive.cpp, mla_decode_expert.cpp, mla_prefill_expert.cpp) share: a batch's inputs
// (page lists scattered over the cache) and the comparison of output and the base-2 lse with absorbed-form
// attention computed in double: logits (q_nope . ckv + q_pe . kpe) / sqrt(192), values the compressed rows,
// query i of Lq seeing the first Lkv - Lq + i + 1 of its sequence's Lkv pages (a decode: Lq = 1, all of them).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

constexpr int MLA_H = 16, MLA_DC = 512, MLA_DP = 64;

template <typename T>
struct MlaCase {
  std::vector<int> qo, kv, indices;  // qo_indptr, kv_indptr (B + 1), kv_indices (N)
  std::vector<T> qn, qp, ckv, kpe;
  std::vector<T> out;
  std::vector<float> lse;
  int B = 0, Q = 0, N = 0;

  // Sequences of (query tokens, pages) over a cache of P pages.
  MlaCase(const std::vector<std::pair<int, int>>& seqs, int P, std::mt19937& rng) {
    B = (int)seqs.size();
    qo.assign(B + 1, 0);
    kv.assign(B + 1, 0);
    for (int b = 0; b < B; ++b) qo[b + 1] = qo[b] + seqs[b].first, kv[b + 1] = kv[b] + seqs[b].second;
    Q = qo[B], N = kv[B];
    std::normal_distribution<float> nd(0, 1);
    auto rnd = [&](size_t n) { std::vector<T> x(n); for (auto& e : x) e = T(nd(rng)); return x; };
    qn = rnd((size_t)Q * MLA_H * MLA_DC), qp = rnd((size_t)Q * MLA_H * MLA_DP);
    ckv = rnd((size_t)P * MLA_DC), kpe = rnd((size_t)P * MLA_DP);
    std::vector<int> pages(P);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    indices.assign(pages.begin(), pages.begin() + N);
    out.assign((size_t)Q * MLA_H * MLA_DC, T(NAN));
    lse.assign((size_t)Q * MLA_H, NAN);
  }

  // Prints one line ("worst error ...") and returns the elements outside the tasks' bfloat16 tolerance.
  int compare(const char* what) const {
    double worst = 0, worst_lse = 0;
    int bad = 0;
    for (int b = 0; b < B; ++b) {
      const int lq = qo[b + 1] - qo[b], lkv = kv[b + 1] - kv[b];
      for (int i = 0; i < lq; ++i)
        for (int h = 0; h < MLA_H; ++h) {
          const size_t row = (size_t)(qo[b] + i) * MLA_H + h;
          const int seen = lkv - lq + i + 1;
          std::vector<double> s;
          for (int t = 0; t < seen; ++t) {
            const size_t p = indices[kv[b] + t];
            double d = 0;
            for (int x = 0; x < MLA_DC; ++x) d += (double)(float)qn[row * MLA_DC + x] * (double)(float)ckv[p * MLA_DC + x];
            for (int x = 0; x < MLA_DP; ++x) d += (double)(float)qp[row * MLA_DP + x] * (double)(float)kpe[p * MLA_DP + x];
            s.push_back(d / std::sqrt(192.0));
          }
          const double mx = *std::max_element(s.begin(), s.end());
          double sum = 0;
          for (double x : s) sum += std::exp(x - mx);
          const double want_lse = (mx + std::log(sum)) / std::log(2.0);
          const double e_lse = std::fabs(lse[row] - want_lse);
          worst_lse = std::max(worst_lse, e_lse);
          if (!(e_lse <= 1e-3 + 1e-4 * std::fabs(want_lse))) ++bad;
          for (int x = 0; x < MLA_DC; ++x) {
            double want = 0;
            for (int t = 0; t < seen; ++t)
              want += std::exp(s[t] - mx) / sum * (double)(float)ckv[(size_t)indices[kv[b] + t] * MLA_DC + x];
            const double e = std::fabs((double)(float)out[row * MLA_DC + x] - want);
            worst = std::max(worst, e);
            if (!(e <= 1e-2 + 2e-2 * std::fabs(want))) ++bad;  // the tasks' bfloat16 tolerance
          }
        }
    }
    std::printf("%-44s worst error output %.2e lse %.2e%s\n", what, worst, worst_lse, bad ? "  FAILED" : "");
    return bad;
  }
};
