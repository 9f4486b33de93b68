// The shipped expert Metal seeds of mamba-scan and ssd, back-translated, compute what the back-translated
// naive seeds compute (a sequential walk, a nearly literal translation), on the CPU emulation of
// cuda_cpu.h: simd shuffle scans, threadgroup tiles and barriers, four chained launches, grid guards.
// Template values and launches follow the seeds' default tunables (NS 16, ITEMS 4, DB 4; Q 64, KS 16).
#include "cuda_cpu.h"
#include "ssd-naive/softplus.cuh"
#include <cstdio>
#include <random>
namespace mlx { namespace core { namespace cu {
void mamba_naive(const float* u, const float* delta, const float* A, const float* Bm, const float* Cm, const float* Dskip, const float* z, const float* delta_bias, const int32_t* B, const int32_t* D, const int32_t* L, float* y, float* state) {
  constexpr int NS = 16; using T = float;
#include "mamba-scan-naive/mamba_scan.cu"
}
void mamba_expert(const float* u, const float* delta, const float* A, const float* Bm, const float* Cm, const float* Dskip, const float* z, const float* delta_bias, const int32_t* D, const int32_t* L, float* y, float* state) {
  constexpr int NS = 16; constexpr int ITEMS = 4; using T = float;
#include "mamba-scan-expert/mamba_scan.cu"
}
void ssd_naive(const float* x, const float* dt, const float* A_log, const float* Bm, const float* Cm, const float* Dskip, const float* dt_bias, const int32_t* B, const int32_t* L, const int32_t* H, const int32_t* G, const int32_t* P, const int32_t* N, float* y, float* state) {
  using T = float;
#include "ssd-naive/ssd_naive.cu"
}
void chunk_scores(const float* Bm, const float* Cm, const int32_t* L, const int32_t* G, const int32_t* N, float* scores) {
  constexpr int Q = 64; constexpr int KS = 16; using T = float;
#include "ssd-expert/chunk_scores.cu"
}
void chunk_state(const float* x, const float* dt, const float* A_log, const float* Bm, const float* dt_bias, const int32_t* L, const int32_t* H, const int32_t* G, const int32_t* P, const int32_t* N, float* chunk_states, float* chunk_decay) {
  constexpr int Q = 64; constexpr int KS = 16; using T = float;
#include "ssd-expert/chunk_state.cu"
}
void state_pass(const float* chunk_states, const float* chunk_decay, const int32_t* B, const int32_t* H, const int32_t* P, const int32_t* N, const int32_t* L, float* carry, float* state) {
  constexpr int Q = 64;
#include "ssd-expert/state_pass.cu"
}
void chunk_out(const float* x, const float* dt, const float* A_log, const float* Cm, const float* Dskip, const float* dt_bias, const float* scores, const float* carry, const int32_t* L, const int32_t* H, const int32_t* G, const int32_t* P, const int32_t* N, float* y) {
  constexpr int Q = 64; constexpr int KS = 16; using T = float;
#include "ssd-expert/chunk_out.cu"
}
} } }
using namespace mlx::core::cu;
static std::mt19937 rng(7);
static std::vector<float> rnd(size_t n, float lo, float hi) { std::uniform_real_distribution<float> d(lo, hi); std::vector<float> v(n); for (auto& x : v) x = d(rng); return v; }
static int compare(const char* what, const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0; int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) { double e = std::fabs(a[i] - b[i]) / (1e-3 + std::fabs(b[i])); worst = std::max(worst, e); if (!(e < 1e-3)) ++bad; }
  printf("%-14s %zu elements, worst rel diff %.2e, %d bad\n", what, a.size(), worst, bad);
  return bad;
}
int main() {
  int bad = 0;
  { // mamba-scan: B=2, D=6 (not a multiple of DB = 4), L=150 (a partial tile), N=16
    const int B = 2, D = 6, L = 150, N = 16;
    auto u = rnd(B * D * L, -1, 1), delta = rnd(B * D * L, -1, 1), z = rnd(B * D * L, -1, 1);
    auto A = rnd(D * N, -2, -0.5f), Bm = rnd(B * N * L, -1, 1), Cm = rnd(B * N * L, -1, 1);
    auto Ds = rnd(D, -0.5f, 0.5f), db = rnd(D, -0.5f, 0.5f);
    std::vector<float> y1(B * D * L, NAN), s1(B * D * N, NAN), y2 = y1, s2 = s1;
    int32_t sB = B, sD = D, sL = L;
    cpu_launch({B * D, 1, 1}, {128, 1, 1}, [&] { mamba_naive(u.data(), delta.data(), A.data(), Bm.data(), Cm.data(), Ds.data(), z.data(), db.data(), &sB, &sD, &sL, y1.data(), s1.data()); });
    const int DB = 4;
    cpu_launch({32, DB * ((D + DB - 1) / DB), B}, {32, DB, 1}, [&] { mamba_expert(u.data(), delta.data(), A.data(), Bm.data(), Cm.data(), Ds.data(), z.data(), db.data(), &sD, &sL, y2.data(), s2.data()); });
    bad += compare("mamba y", y2, y1) + compare("mamba state", s2, s1);
  }
  { // ssd: B=1, L=100 (two chunks of 64, the second partial), H=4, G=2, P=64, N=16
    const int B = 1, L = 100, H = 4, G = 2, P = 64, N = 16, Q = 64, NC = (L + Q - 1) / Q;
    auto x = rnd(B * L * H * P, -1, 1), dt = rnd(B * L * H, -2, 1), Al = rnd(H, -1, 1), Bm = rnd(B * L * G * N, -1, 1), Cm = rnd(B * L * G * N, -1, 1);
    auto Ds = rnd(H, -1, 1), db = rnd(H, -1, 1);
    std::vector<float> y1(B * L * H * P, NAN), s1(B * H * P * N, NAN), y2 = y1, s2 = s1;
    std::vector<float> scores(B * G * NC * Q * Q, NAN), cs(B * H * NC * P * N, NAN), cd(B * H * NC, NAN), carry(B * H * NC * P * N, NAN);
    int32_t sB = B, sL = L, sH = H, sG = G, sP = P, sN = N;
    cpu_launch({B * H * P, 1, 1}, {64, 1, 1}, [&] { ssd_naive(x.data(), dt.data(), Al.data(), Bm.data(), Cm.data(), Ds.data(), db.data(), &sB, &sL, &sH, &sG, &sP, &sN, y1.data(), s1.data()); });
    cpu_launch({256u * NC, B * G, 1}, {256, 1, 1}, [&] { chunk_scores(Bm.data(), Cm.data(), &sL, &sG, &sN, scores.data()); });
    cpu_launch({256u * NC, B * H, 1}, {256, 1, 1}, [&] { chunk_state(x.data(), dt.data(), Al.data(), Bm.data(), db.data(), &sL, &sH, &sG, &sP, &sN, cs.data(), cd.data()); });
    cpu_launch({B * H * P * N, 1, 1}, {256, 1, 1}, [&] { state_pass(cs.data(), cd.data(), &sB, &sH, &sP, &sN, &sL, carry.data(), s2.data()); });
    cpu_launch({256u * NC, B * H, 1}, {256, 1, 1}, [&] { chunk_out(x.data(), dt.data(), Al.data(), Cm.data(), Ds.data(), db.data(), scores.data(), carry.data(), &sL, &sH, &sG, &sP, &sN, y2.data()); });
    bad += compare("ssd y", y2, y1) + compare("ssd state", s2, s1);
  }
  printf(bad ? "FAILED\n" : "naive and expert back-translations agree\n");
  return bad != 0;
}
