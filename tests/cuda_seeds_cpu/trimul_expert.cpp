// The cuda target's trimul expert (tasks/trimul/seeds/cuda/expert: trimul.cuh, project.cu, triangle.cu and
// output.cu, with its plan's launches and fp16 buffers) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h:
// out must match GPU MODE's outgoing triangle multiplicative update computed here in double, within the task's
// 2e-2. Its PTX primitives are emulated below (mma.sync m16n8k16 in fp16 with its fragment layout; cp.async as
// copies of the bytes asked for, zeros after), its dynamic shared memory from the emulation's per-block arena.
// Cases: an S that is no multiple of the 128 x 128 tiles nor of the K step, a random 0/1 mask, D 64 and 128, a
// batch whose pair rows end inside a block.
#include "cuda_cpu.h"
#include <cmath>
#include <cstdio>
#include <random>
#include <array>
#include <cstring>
#include <vector>
#define __forceinline__ inline
inline float __shfl_xor_sync(unsigned m, float v, int lane_mask) {
  int r = __shfl_sync(m, __float_as_int(v), (int)(cpu_lin() % 32) ^ lane_mask);
  return __int_as_float(r);
}

#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

#define KSTRI_HOST_PRIMITIVES
static std::vector<std::array<unsigned, 6>> g_frag(1024);  // each thread's MMA fragments, as posted
namespace kstri {
// c += a (16x16, row-major) * b (16x8, col-major) in fp16, warp-wide, with mma.sync's fragment layout.
inline void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  const unsigned l = cpu_lin(), w = l / 32, g = (l % 32) / 4, t4 = l % 4;
  g_frag[l] = {a[0], a[1], a[2], a[3], b0, b1};
  __syncwarp();
  auto half = [&](int lane, int reg, int hi) {
    __half x;
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
inline void cp16(void* dst, const void* src, int bytes) {
  std::memcpy(dst, src, bytes);
  std::memset(static_cast<char*>(dst) + bytes, 0, 16 - bytes);
}
inline void cp_commit() {}
template <int N> inline void cp_wait() {}
}  // namespace kstri
#define KSTRI_DYNAMIC_SHARED(name, bytes) unsigned char* name = static_cast<unsigned char*>(cpu_block_shared(bytes))

#include "project.cu"
#include "triangle.cu"
#include "output.cu"

static std::mt19937 rng(3);
constexpr int H = 64;

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

template <int D>
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
  std::vector<__half> left(B * H * plane, __half(NAN)), right(B * H * plane, __half(NAN)), gate(B * H * plane, __half(NAN));
  std::vector<float> tri(B * H * plane, NAN), out(B * plane * D, NAN);
  // The plan's launches: 256 ceil(B S S / 128) threads in blocks of 256; 256 ceil(S / 128) x ceil(S / 128) x B H;
  // then as the first.
  const unsigned rows = (unsigned)((B * plane + 127) / 128), tiles = (unsigned)((S + 127) / 128);
  cpu_launch({256 * rows, 1, 1}, {256, 1, 1}, [&] {
    trimul_project<D, H>(x.data(), mask.data(), nw.data(), nb.data(), lp.data(), rp.data(), lg.data(), rg.data(),
                         og.data(), left.data(), right.data(), gate.data(), B, S);
  });
  cpu_launch({256 * tiles, tiles, (unsigned)(B * H)}, {256, 1, 1},
             [&] { trimul_triangle(left.data(), right.data(), tri.data(), S); });
  cpu_launch({256 * rows, 1, 1}, {256, 1, 1}, [&] {
    trimul_output<D, H>(tri.data(), gate.data(), onw.data(), onb.data(), to.data(), out.data(), B, S);
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
  return bad;
}

int main() {
  int bad = 0;
  bad += check<64>("B 2, S 40, D 64, no mask", 2, 40, false);
  bad += check<128>("B 1, S 72, D 128, random mask", 1, 72, true);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("trimul expert agrees with the reference\n");
  return 0;
}
