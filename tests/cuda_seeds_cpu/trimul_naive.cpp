// The cuda target's naive trimul seed (tasks/trimul/seeds/cuda/naive/trimul.cu) on the CPU emulation, with its
// plan's three launches and buffers: out must match GPU MODE's outgoing triangle multiplicative update computed
// here in double, with a random 0/1 mask and with none, on an S that is no multiple of the 16 x 16 tiles.
#include "cuda_cpu.h"
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#define __forceinline__ inline
inline float __shfl_xor_sync(unsigned m, float v, int lane_mask) {
  int r = __shfl_sync(m, __float_as_int(v), (int)(cpu_lin() % 32) ^ lane_mask);
  return __int_as_float(r);
}

#include "../../tasks/trimul/seeds/cuda/naive/trimul.cu"

static std::mt19937 rng(3);
constexpr int D = 24, H = 32;

static std::vector<double> layer_norm(const std::vector<double>& v, const float* w, const float* c) {
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) var += (x - mean) * (x - mean);
  var /= v.size();
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = (v[i] - mean) / std::sqrt(var + 1e-5) * w[i] + c[i];
  return out;
}

static double sig(double u) { return 1 / (1 + std::exp(-u)); }

int check(const char* what, int B, int S, bool masked) {
  std::normal_distribution<float> nd(0, 1);
  auto rnd = [&](size_t n, float scale) { std::vector<float> x(n); for (auto& e : x) e = nd(rng) * scale; return x; };
  const auto x = rnd((size_t)B * S * S * D, 1), nw = rnd(D, 1), nb = rnd(D, 1), onw = rnd(H, 1), onb = rnd(H, 1);
  const float ws = 1 / std::sqrt((float)H);
  const auto lp = rnd(H * D, ws), rp = rnd(H * D, ws), lg = rnd(H * D, ws), rg = rnd(H * D, ws), og = rnd(H * D, ws);
  const auto to = rnd(D * H, 1 / std::sqrt((float)D));
  std::vector<float> mask((size_t)B * S * S, 1.0f);
  if (masked) for (auto& m : mask) m = (float)(rng() % 2);
  const size_t plane = (size_t)S * S;
  std::vector<float> left(B * H * plane, NAN), right(B * H * plane, NAN), gate(B * H * plane, NAN),
      tri(B * H * plane, NAN), out(B * plane * D, NAN);
  cpu_launch({(unsigned)(H * B * S * S), 1, 1}, {H, 1, 1}, [&] {
    trimul_project<D, H>(x.data(), mask.data(), nw.data(), nb.data(), lp.data(), rp.data(), lg.data(), rg.data(),
                         og.data(), left.data(), right.data(), gate.data(), S);
  });
  cpu_launch({(unsigned)S, (unsigned)S, (unsigned)(B * H)}, {16, 16, 1},
             [&] { trimul_triangle(left.data(), right.data(), tri.data(), S); });
  cpu_launch({(unsigned)(H * B * S * S), 1, 1}, {H, 1, 1}, [&] {
    trimul_output<D, H>(tri.data(), gate.data(), onw.data(), onb.data(), to.data(), out.data(), S);
  });
  // The reference, in double: z, then left/right/gate per (b, i, k), the triangle sum, the output.
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
          if (!(e <= 2e-2 + 2e-2 * std::fabs(want))) ++bad;  // the task's tolerance
        }
      }
  std::printf("%-36s worst error %.2e%s\n", what, worst, bad ? "  FAILED" : "");
  return bad + (worst > 1e-3);  // float32 throughout: far inside the tolerance
}

int main() {
  int bad = 0;
  bad += check("B 2, S 20, no mask", 2, 20, false);
  bad += check("B 1, S 33, random mask", 1, 33, true);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("trimul naive seed agrees with the reference\n");
  return 0;
}
