// The cuda target's mla-paged-decode expert (tasks/mla-paged-decode/seeds/cuda/expert: mla.cuh, split.cu then
// merge.cu, as the worker launches them) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h: output and
// the base-2 lse must match the absorbed-form attention computed here in double. Its PTX primitives are emulated
// below with mma.sync m16n8k16's fragment layout (cp.async as plain copies, zeros where the seed asks for them),
// its dynamic shared memory from the emulation's per-block arena. Cases: sequences of one page, of fewer pages
// than a tile, of exactly a tile, of several chunks with a short last one, of more chunks than a merge block has
// threads; batches of more than 32 sequences (the prefix sum's second round); bf16 and fp16; chunks of 32 to 512.
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
  unsigned char* name = static_cast<unsigned char*>(cpu_block_shared(ksmla::kSharedBytes))

#include "split.cu"
#include "merge.cu"

static std::mt19937 rng(7);
constexpr int H = 16, DC = 512, DP = 64;

template <typename T, int CH>
int check(const char* what, const std::vector<int>& lens, int P) {
  const int B = (int)lens.size(), N = std::accumulate(lens.begin(), lens.end(), 0);
  std::normal_distribution<float> nd(0, 1);
  auto rnd = [&](size_t n) { std::vector<T> x(n); for (auto& e : x) e = T(nd(rng)); return x; };
  const auto qn = rnd((size_t)B * H * DC), qp = rnd((size_t)B * H * DP);
  const auto ckv = rnd((size_t)P * DC), kpe = rnd((size_t)P * DP);
  std::vector<int> indptr(B + 1, 0), pages(P);
  for (int b = 0; b < B; ++b) indptr[b + 1] = indptr[b] + lens[b];
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int> indices(pages.begin(), pages.begin() + N);
  const int items = (N + CH - 1) / CH + B;
  std::vector<float> part((size_t)items * H * (DC + 2), NAN), lse((size_t)B * H, NAN);
  std::vector<T> out((size_t)B * H * DC, T(NAN));
  // The plan's launches: 128 ((N + CH - 1) / CH + B) threads in blocks of 128; then DC B H threads in blocks of DC.
  cpu_launch({(unsigned)(128 * items), 1, 1}, {128, 1, 1}, [&] {
    mla_decode_split<CH, T>(qn.data(), qp.data(), ckv.data(), kpe.data(), indptr.data(), indices.data(), part.data(), B);
  });
  cpu_launch({(unsigned)(DC * B * H), 1, 1}, {DC, 1, 1}, [&] {
    mla_decode_merge<CH, T>(part.data(), indptr.data(), out.data(), lse.data(), B);
  });
  double worst = 0, worst_lse = 0;
  int bad = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const size_t row = (size_t)b * H + h;
      std::vector<double> s;
      for (int t = indptr[b]; t < indptr[b + 1]; ++t) {
        const int p = indices[t];
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
        for (size_t j = 0; j < s.size(); ++j)
          want += std::exp(s[j] - mx) / sum * (double)(float)ckv[(size_t)indices[indptr[b] + j] * DC + x];
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
  bad += check<bf, 64>("defaults: lengths 1, 7, 16, 150", {1, 7, 16, 150}, 300);
  bad += check<__half, 64>("fp16", {33, 64, 2}, 120);
  bad += check<bf, 32>("chunks of 32, 40 sequences", std::vector<int>(40, 9), 400);
  bad += check<bf, 32>("600 chunks (more than a merge block has threads)", {19200, 3}, 19300);
  bad += check<bf, 512>("chunks of 512", {700, 40}, 800);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("mla decode expert agrees with the reference\n");
  return 0;
}
