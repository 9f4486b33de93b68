// What the trimul drivers (trimul_naive.cpp, trimul_expert.cpp) share: GPU MODE's draws for one case (x, a random
// 0/1 mask or none, LayerNorm scales and shifts, projections scaled by 1/sqrt(fan-in)) and the comparison of out
// with the outgoing triangle multiplicative update computed in double.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

template <int D, int H>
struct TrimulCase {
  int B, S;
  size_t plane;
  std::vector<float> x, mask, nw, nb, onw, onb, lp, rp, lg, rg, og, to, out;

  TrimulCase(int B_, int S_, bool masked, std::mt19937& rng) : B(B_), S(S_), plane((size_t)S_ * S_) {
    std::normal_distribution<float> nd(0, 1);
    auto rnd = [&](size_t n, float scale) { std::vector<float> v(n); for (auto& e : v) e = nd(rng) * scale; return v; };
    x = rnd((size_t)B * S * S * D, 1), nw = rnd(D, 1), nb = rnd(D, 1), onw = rnd(H, 1), onb = rnd(H, 1);
    const float ws = 1 / std::sqrt((float)H);
    lp = rnd(H * D, ws), rp = rnd(H * D, ws), lg = rnd(H * D, ws), rg = rnd(H * D, ws), og = rnd(H * D, ws);
    to = rnd(D * H, 1 / std::sqrt((float)D));
    mask.assign((size_t)B * S * S, 1.0f);
    if (masked) for (auto& m : mask) m = (float)(rng() % 2);
    out.assign(B * plane * D, NAN);
  }

  static std::vector<double> layer_norm(const std::vector<double>& v, const float* w, const float* c) {
    double mean = 0, var = 0;
    for (double e : v) mean += e;
    mean /= v.size();
    for (double e : v) var += (e - mean) * (e - mean);
    var /= v.size();
    std::vector<double> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = (v[i] - mean) / std::sqrt(var + 1e-5) * w[i] + c[i];
    return r;
  }

  static double sig(double u) { return 1 / (1 + std::exp(-u)); }

  // Prints one line ("worst error ...") and returns the elements outside the task's tolerance (2e-2), plus one
  // where the worst error passes `worst_allowed`.
  int compare(const char* what, double worst_allowed) const {
    std::vector<double> L(B * plane * H), R(B * plane * H), G(B * plane * H);
    for (size_t r = 0; r < (size_t)B * plane; ++r) {
      std::vector<double> v(x.begin() + r * D, x.begin() + (r + 1) * D);
      const auto z = layer_norm(v, nw.data(), nb.data());
      for (int c = 0; c < H; ++c) {
        double a = 0, b = 0, cg = 0, dg = 0, e = 0;
        for (int d = 0; d < D; ++d) {
          a += lp[c * D + d] * z[d]; b += rp[c * D + d] * z[d]; cg += lg[c * D + d] * z[d];
          dg += rg[c * D + d] * z[d]; e += og[c * D + d] * z[d];
        }
        L[r * H + c] = mask[r] * a * sig(cg);
        R[r * H + c] = mask[r] * b * sig(dg);
        G[r * H + c] = sig(e);
      }
    }
    double worst = 0;
    int bad = 0;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < S; ++i)
        for (int j = 0; j < S; ++j) {
          std::vector<double> t(H, 0.0);
          for (int c = 0; c < H; ++c)
            for (int k = 0; k < S; ++k)
              t[c] += L[((size_t)b * plane + (size_t)i * S + k) * H + c] * R[((size_t)b * plane + (size_t)j * S + k) * H + c];
          auto g = layer_norm(t, onw.data(), onb.data());
          const size_t pr = (size_t)b * plane + (size_t)i * S + j;
          for (int c = 0; c < H; ++c) g[c] *= G[pr * H + c];
          for (int d = 0; d < D; ++d) {
            double want = 0;
            for (int c = 0; c < H; ++c) want += to[d * H + c] * g[c];
            const double e = std::fabs(out[pr * D + d] - want);
            worst = std::max(worst, e);
            if (!(e <= 2e-2 + 2e-2 * std::fabs(want))) ++bad;
          }
        }
    std::printf("%-36s worst error %.2e%s\n", what, worst, bad ? "  FAILED" : "");
    return bad + (worst > worst_allowed);
  }
};
