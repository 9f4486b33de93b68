// The shipped CUDA experts of gqa-paged-decode (tasks/gqa-paged-decode/seeds/mlx-cuda/expert: paged.cuh, its
// split launch then its merge launch, as split.cu and merge.cu call them; with KSEARCH_CUDA_TARGET, the cuda
// seed's __global__ functions, paged_decode_cuda.cpp; with KSEARCH_METAL_ROUND_TRIP, that seed carried to Metal
// and back, paged_decode_metal.cpp; the mlx-metal seeds back-translated, paged_decode_metal_seed*.cpp) on the CPU
// emulation of
// tests/back_translate_cpu/cuda_cpu.h (each CUDA thread a fiber, blocks in turn): o and the base-2 lse must
// match attention over each sequence's pages computed here in double. The page lists are scattered over the
// cache with sequences of one page, of fewer pages than a warp's tile, of exactly a chunk, of several chunks
// with a short last one, of more chunks than a merge block has threads; batches of more than 32 sequences (the prefix sum's second round); GQA factors 8,
// 4 and 2 (lanes per head 4, 8, 16); bf16 and fp16; 1 to 8 warps, tiles of 1, 2 and 4 keys. The launches'
// grids are the plan's (tests/testsuite/cuda_seeds_cpu.rs checks them).
#include "cuda_cpu.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#define __forceinline__ inline
inline int min(int a, int b) { return a < b ? a : b; }
inline float __shfl_xor_sync(unsigned m, float v, int lane_mask) {
  int r = __shfl_sync(m, __float_as_int(v), (int)(cpu_lin() % 32) ^ lane_mask);
  return __int_as_float(r);
}
inline int __shfl_up_sync(unsigned m, int v, int delta) {
  const int lane = (int)(cpu_lin() % 32);
  return __shfl_sync(m, v, lane >= delta ? lane - delta : lane);
}

#if defined(KSEARCH_METAL_NAIVE)
// The mlx-metal naive seed back-translated (paged_decode_metal_seed_naive.cpp): its body as MLX wraps one, the
// scalars by pointer; launched as the cuda naive seed is (one simdgroup per row, blocks of TG = 32 NW threads).
#define KSEARCH_CUDA_NAIVE
#include "metal_prelude.cuh"
template <typename T>
void paged_decode_naive(const T* q, const T* k_cache, const T* v_cache, const int* kv_indptr, const int* kv_indices,
                        T* o, float* lse, int b_, int hq_, int hkv_, int d_) {
  const int32_t *B = &b_, *Hq = &hq_, *Hkv = &hkv_, *D = &d_;
#include "paged_decode_naive.cu"
}
#elif defined(KSEARCH_CUDA_NAIVE)
// The cuda target's naive seed (tasks/gqa-paged-decode/seeds/cuda/naive/paged_decode.cu), blocks of 32 NW threads.
#include "paged_decode.cu"
#elif defined(KSEARCH_CUDA_TARGET)
// The cuda target's seed (tasks/gqa-paged-decode/seeds/cuda/expert): its own __global__ functions, with the
// template arguments the worker instantiates them with (the plan's template values, then T).
#define __launch_bounds__(...)
#include "split.cu"
#include "merge.cu"
#define SPLIT paged_decode_split<D, Hq, Hkv, CH, NW, KT, T>
#define MERGE paged_decode_merge<D, Hq, CH, T>
#elif defined(KSEARCH_METAL_SEED)
// The mlx-metal expert seed back-translated (paged_decode_metal_seed.cpp): its two bodies as MLX wraps them.
#include "metal_prelude.cuh"
template <typename T, int D, int Hq, int Hkv, int CH, int NW, int KT>
void metal_split(const T* q, const T* k_cache, const T* v_cache, const int* kv_indptr, const int* kv_indices,
                 float* part, int b_) {
  const int32_t* B = &b_;
#include "paged_decode_split.cu"
}
template <typename T, int D, int Hq, int CH>
void metal_merge(const float* part, const int* kv_indptr, T* o, float* lse, int b_) {
  const int32_t* B = &b_;
#include "paged_decode_merge.cu"
}
#define SPLIT metal_split<T, D, Hq, Hkv, CH, NW, KT>
#define MERGE metal_merge<T, D, Hq, CH>
#elif defined(KSEARCH_METAL_ROUND_TRIP)
// The cuda seed translated to mlx-metal and that Metal back-translated to mlx-cuda (paged_decode_metal.cpp):
// each body run as MLX wraps one (the scalar B by pointer, template values as the function's parameters),
// its header in a namespace of its own (round_trip.cuh; the two define the same constants).
#include "round_trip.cuh"
template <typename T, int D, int Hq, int Hkv, int CH, int NW, int KT>
void round_trip_split(const T* q, const T* k_cache, const T* v_cache, const int* kv_indptr, const int* kv_indices,
                      float* part, int nB) {
  const int32_t* B = &nB;
  using namespace bt_split;
#include "paged_decode_split.cu"
}
template <typename T, int D, int Hq, int CH>
void round_trip_merge(const float* part, const int* kv_indptr, T* o, float* lse, int nB) {
  const int32_t* B = &nB;
  using namespace bt_merge;
#include "paged_decode_merge.cu"
}
#define SPLIT round_trip_split<T, D, Hq, Hkv, CH, NW, KT>
#define MERGE round_trip_merge<T, D, Hq, CH>
#else
#include "paged.cuh"
#define SPLIT kspaged::split<T, D, Hq, Hkv, CH, NW, KT>
#define MERGE kspaged::merge<T, D, Hq, CH>
#endif

static std::mt19937 rng(5);

template <typename T, int D, int Hq, int Hkv, int CH, int NW, int KT>
int check(const char* what, const std::vector<int>& lens, int P) {
  const int B = (int)lens.size(), N = std::accumulate(lens.begin(), lens.end(), 0), G = Hq / Hkv;
  std::normal_distribution<float> nd(0, 1);
  auto rnd = [&](size_t n) { std::vector<T> x(n); for (auto& e : x) e = T(nd(rng)); return x; };
  const auto q = rnd((size_t)B * Hq * D), k = rnd((size_t)P * Hkv * D), v = rnd((size_t)P * Hkv * D);
  std::vector<int> indptr(B + 1, 0), pages(P);
  for (int b = 0; b < B; ++b) indptr[b + 1] = indptr[b] + lens[b];
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int> indices(pages.begin(), pages.begin() + N);
  const int items = (N + CH - 1) / CH + B;
  std::vector<float> part((size_t)items * Hq * (D + 2), NAN), lse((size_t)B * Hq, NAN);
  std::vector<T> o((size_t)B * Hq * D, T(NAN));
#ifdef KSEARCH_CUDA_NAIVE
  // The naive plan's launch: one warp per (sequence, query head), blocks of 32 NW threads (TG).
  cpu_launch({(unsigned)(32 * B * Hq), 1, 1}, {32 * NW, 1, 1}, [&] {
    paged_decode_naive<T>(q.data(), k.data(), v.data(), indptr.data(), indices.data(), o.data(), lse.data(), B, Hq,
                          Hkv, D);
  });
#else
  // The plan's launches: grid x 32 NW ((N + CH - 1) / CH + B) threads, y Hkv; then D B Hq threads in blocks of D.
  cpu_launch({(unsigned)(32 * NW * items), (unsigned)Hkv, 1}, {32 * NW, 1, 1}, [&] {
    SPLIT(q.data(), k.data(), v.data(), indptr.data(), indices.data(), part.data(), B);
  });
  cpu_launch({(unsigned)(D * B * Hq), 1, 1}, {D, 1, 1}, [&] {
    MERGE(part.data(), indptr.data(), o.data(), lse.data(), B);
  });
#endif
  double worst = 0, worst_lse = 0;
  int bad = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h) {
      const int g = h / G;
      std::vector<double> s;
      for (int t = indptr[b]; t < indptr[b + 1]; ++t) {
        double d = 0;
        for (int i = 0; i < D; ++i)
          d += (double)(float)q[((size_t)b * Hq + h) * D + i] * (double)(float)k[((size_t)indices[t] * Hkv + g) * D + i];
        s.push_back(d / std::sqrt((double)D));
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double x : s) sum += std::exp(x - mx);
      const double want_lse = (mx + std::log(sum)) / std::log(2.0);
      const double e_lse = std::fabs(lse[(size_t)b * Hq + h] - want_lse);
      worst_lse = std::max(worst_lse, e_lse);
      if (!(e_lse <= 1e-3 + 1e-4 * std::fabs(want_lse))) ++bad;
      for (int i = 0; i < D; ++i) {
        double want = 0;
        for (size_t j = 0; j < s.size(); ++j)
          want += std::exp(s[j] - mx) / sum * (double)(float)v[((size_t)indices[indptr[b] + j] * Hkv + g) * D + i];
        const double got = (float)o[((size_t)b * Hq + h) * D + i];
        const double e = std::fabs(got - want);
        worst = std::max(worst, e);
        if (!(e <= 1e-2 + 2e-2 * std::fabs(want))) ++bad;  // the task's bfloat16 tolerance
      }
    }
  std::printf("%-44s worst error o %.2e lse %.2e%s\n", what, worst, worst_lse, bad ? "  FAILED" : "");
  return bad;
}

int main() {
  using bf = __nv_bfloat16;
  int bad = 0;
  bad += check<bf, 128, 32, 4, 256, 4, 2>("defaults: mixed lengths", {1, 3, 256, 700, 41}, 1200);
  bad += check<bf, 128, 32, 4, 64, 4, 2>("chunks of 64, 40 sequences", std::vector<int>(40, 70), 3000);
  bad += check<bf, 128, 32, 4, 64, 4, 2>("141 chunks (more than a merge block)", {9000, 5}, 9100);
  bad += check<bf, 128, 32, 4, 64, 2, 4>("tiles of 4, 2 warps", {5, 130, 64, 1}, 400);
  bad += check<bf, 128, 32, 4, 128, 8, 1>("tiles of 1, 8 warps", {129, 2, 300}, 600);
  bad += check<__half, 128, 32, 4, 256, 4, 2>("fp16", {17, 513}, 600);
  bad += check<bf, 64, 16, 4, 64, 4, 2>("G 4, D 64", {33, 100, 7}, 200);
  bad += check<bf, 128, 8, 4, 64, 4, 2>("G 2 (16 lanes per head)", {65, 3}, 100);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("paged decode agrees with the reference\n");
  return 0;
}
