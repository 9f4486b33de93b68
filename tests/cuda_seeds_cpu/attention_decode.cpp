// The shipped CUDA expert decode of attention (tasks/attention/seeds/mlx-cuda/expert: decode.cuh, launched as
// decode.cu in clusters of NC blocks, for NC = 0 as decode_last.cu in one launch, or as decode_split.cu then
// decode_combine.cu with decode_combine.cuh) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h
// (each CUDA thread a fiber, switched at barriers): it must match softmax(q k^T / sqrt(D)) v computed here in double. The
// blocks of a cluster run at once, and so do all the split blocks of a one-launch decode (their signatures
// are std::atomic_ref accesses between seq_cst fences, so several blocks may see every signature, merge and
// wipe); other launches run block after block. The cluster primitives (rank, size, barrier, distributed
// shared memory) and per-block shared arrays come from the emulation; what it cannot show: a missing second
// cluster barrier (a block's arena outlives its threads here), `.aligned` barriers reached divergently, the
// trap outside a cluster, orderings weaker than x86's that a GPU allows. float32 runs the FMA path; fp16 and bf16 run the
// tensor-core path, whose three PTX primitives (mma.sync m16n8k16, the pair packing, ex2) are emulated below
// with mma.sync's fragment layout. Shapes reach every path: GQA factors 1 to 8, a head group with an empty
// slot, GH above G and below it, a last split shorter than CH, a chunk and a warp with no keys, one split,
// D 64 and 128, 1 to 8 warps, the seed's default tunables. The launches' grids are the plan's
// (tests/testsuite/cuda_seeds_cpu.rs).
#include "cuda_cpu.h"
#include <cstdio>
#include <array>
#include <atomic>
#include <random>
// The few CUDA names the decode uses that cuda_cpu.h leaves out.
#define __forceinline__ inline
#define __align__(n) __attribute__((aligned(n)))
inline int min(int a, int b) { return a < b ? a : b; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldcg(const T* p) { return *p; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline float __shfl_xor_sync(unsigned m, float v, int lane_mask) {
  int r = __shfl_sync(m, __float_as_int(v), (int)(cpu_lin() % 32) ^ lane_mask);
  return __int_as_float(r);
}
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline float2 __half22float2(__half2) { return {0, 0}; }              // 16-bit paths: compiled, not run here
inline float2 __bfloat1622float2(__nv_bfloat162) { return {0, 0}; }
inline __half __float2half_rn(float f) { return __half(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline void __trap() { std::abort(); }

// Clusters, shared arrays and the one-launch merge's signatures, from the emulation (each block of a running
// cluster has its own arena).
#define KSDEC_EMULATED
#define KSDEC_SHARED(type, name, n) type* name = static_cast<type*>(cpu_block_shared(sizeof(type) * (n)))
namespace ksdec {
inline unsigned cluster_size() { return cpu_cluster_size(); }
inline unsigned cluster_rank() { return cpu_cluster_rank(); }
inline void cluster_sync() { cpu_cluster_sync(); }
inline const float* in_block(const float* p, unsigned rank) { return cpu_in_block(p, rank); }
inline unsigned long long sig_load(const unsigned long long* p) {
  return std::atomic_ref<const unsigned long long>(*p).load(std::memory_order_relaxed);
}
inline void sig_store(unsigned long long* p, unsigned long long v) {
  std::atomic_ref<unsigned long long>(*p).store(v, std::memory_order_relaxed);
}
}  // namespace ksdec


// The tensor-core path (16-bit T) runs here too: the seed leaves its three PTX primitives to us.
#define KSDEC_EMULATED_MMA
constexpr unsigned MAX_AT_ONCE = 64;  // blocks running at once (a cluster, or a one-launch decode's splits)
static std::vector<std::array<unsigned, 6>> g_frag(MAX_AT_ONCE * 1024);  // each thread's MMA fragments, as posted
namespace ksdec {
template <typename T> struct Mma16 {
  // c += a (16x16, row-major) * b (16x8, col-major), warp-wide, with mma.sync's fragment layout: lane (g, t4)
  // holds a0 (row g, k 2t4, 2t4+1), a1 (row g+8), a2 (row g, k +8), a3 (row g+8, k +8), b0 (k 2t4, 2t4+1,
  // n g), b1 (k +8) and c (rows g, g+8, n 2t4, 2t4+1). Every lane posts its fragments, then computes its own c.
  static void run(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    const unsigned l = cpu_lin(), w = l / 32, g = (l % 32) / 4, t4 = l % 4;
    std::array<unsigned, 6>* frag = &g_frag[1024 * cpu_cluster_rank()];  // this block's (blocks of a cluster run at once)
    frag[l] = {a0, a1, a2, a3, b0, b1};
    __syncwarp();
    auto half = [&](int lane, int reg, int hi) {
      T x;
      x.b = (unsigned short)(frag[w * 32 + lane][reg] >> (16 * hi));
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
template <typename T> unsigned pack2_bits(float a, float b) { T x(a), y(b); return x.b | (unsigned)y.b << 16; }
inline unsigned pack2(float a, float b, __half) { return pack2_bits<__half>(a, b); }
inline unsigned pack2(float a, float b, __nv_bfloat16) { return pack2_bits<__nv_bfloat16>(a, b); }
inline float ex2(float x) { return exp2f(x); }
}  // namespace ksdec

#include "decode.cuh"
#include "decode_combine.cuh"

namespace mlx { namespace core { namespace cu {
// As MLX generates it: template values as constexpr locals, then the body.
template <typename T_, int D_, int NTD_, int NC_, int IL_, int GH_, int U_, int UC_, int PF_, int Hq_, int Hkv_, int Tk_>
void attn_decode(const T_* q, const T_* k, const T_* v, T_* o) {
  using T = T_;
  constexpr int D = D_, NTD = NTD_, NC = NC_, IL = IL_, GH = GH_, U = U_, UC = UC_, PF = PF_, Hq = Hq_, Hkv = Hkv_, Tk = Tk_;
#include "decode.cu"
}
template <typename T_, int D_, int NTD_, int CH_, int GH_, int U_, int UC_, int PF_, int Hq_, int Hkv_, int Tk_>
void attn_decode_split(const T_* q, const T_* k, const T_* v, float* part) {
  using T = T_;
  constexpr int D = D_, NTD = NTD_, CH = CH_, GH = GH_, U = U_, UC = UC_, PF = PF_, Hq = Hq_, Hkv = Hkv_, Tk = Tk_;
#include "decode_split.cu"
}
template <typename T_, int D_, int NTD_, int CH_, int GH_, int U_, int UC_, int PF_, int Hq_, int Hkv_, int Tk_>
void attn_decode_last(const T_* q, const T_* k, const T_* v, T_* o, float* part) {
  using T = T_;
  constexpr int D = D_, NTD = NTD_, CH = CH_, GH = GH_, U = U_, UC = UC_, PF = PF_, Hq = Hq_, Hkv = Hkv_, Tk = Tk_;
#include "decode_last.cu"
}
template <typename T_, int D_, int CH_, int Tk_>
void attn_decode_combine(const float* part, T_* o) {
  using T = T_;
  constexpr int D = D_, CH = CH_, Tk = Tk_;
#include "decode_combine.cu"
}
} } }

static std::mt19937 rng(7);

// One shape and setting: T the element type (float: the FMA path; __half, __nv_bfloat16: tensor cores), with
// the task's tolerance for T against a double softmax of the same (rounded) inputs.
// NC > 0: one launch in clusters of NC blocks (CH unused), IL interleaving their keys; NC = 0: splits of CH
// keys, in two launches, or with LM in one whose blocks sign their partials, the blocks that see every signature
// of their head group merging.
template <typename T, int D, int NTD, int NC, int IL, int LM, int CH, int GH, int U, int UC, int PF, int B, int Hq, int Hkv, int Tk>
int check(const char* what) {
  constexpr int G = Hq / Hkv, NSPLIT = NC > 0 ? NC : (Tk + CH - 1) / CH, NGROUPS = (G + GH - 1) / GH;
  const double atol = sizeof(T) == 4 ? 1e-4 : std::is_same_v<T, __half> ? 2e-3 : 1e-2;
  const double rtol = sizeof(T) == 4 ? 1e-3 : std::is_same_v<T, __half> ? 1e-2 : 2e-2;
  std::normal_distribution<float> nd(0, 1);
  auto rnd = [&](size_t n) { std::vector<float> x(n); for (auto& e : x) e = float(T(2 * nd(rng))); return x; };
  auto as_t = [](const std::vector<float>& x) { return std::vector<T>(x.begin(), x.end()); };
  auto k = rnd((size_t)B * Hkv * Tk * D), v = rnd((size_t)B * Hkv * Tk * D);
  const auto kt = as_t(k), vt = as_t(v);
  int bad = 0;
  {
    auto q = rnd((size_t)B * Hq * D);
    const auto qt = as_t(q);
    std::vector<T> o((size_t)B * Hq * D, T(NAN));
    if constexpr (NC > 0) {
      cpu_launch({(unsigned)(NTD * NC), (unsigned)(B * Hkv * NGROUPS), 1}, {NTD, 1, 1}, [&] {
        mlx::core::cu::attn_decode<T, D, NTD, NC, IL, GH, U, UC, PF, Hq, Hkv, Tk>(qt.data(), kt.data(), vt.data(), o.data());
      }, NC);
    } else if constexpr (LM) {
      // Two calls on one `part` buffer, as MLX's allocator hands a freed buffer to the next call: first on other
      // queries, then on q, whose early blocks meet the first call's partials. The first call's signatures were
      // wiped by its merge: the second call, run without its last split, must merge nothing.
      std::vector<float> part((size_t)B * Hq * NSPLIT * (D + 4), NAN);
      const auto other = as_t(rnd((size_t)B * Hq * D));
      std::vector<T> o_other((size_t)B * Hq * D, T(NAN));
      static_assert(NSPLIT <= MAX_AT_ONCE, "the emulation runs every split block at once");
      auto call = [&](const std::vector<T>& qs, std::vector<T>& out, int splits) {  // a head group's splits at once
        cpu_launch({(unsigned)(NTD * splits), (unsigned)(B * Hkv * NGROUPS), 1}, {NTD, 1, 1}, [&] {
          mlx::core::cu::attn_decode_last<T, D, NTD, CH, GH, U, UC, PF, Hq, Hkv, Tk>(qs.data(), kt.data(), vt.data(),
                                                                              out.data(), part.data());
        }, (unsigned)splits);
      };
      call(other, o_other, NSPLIT);
      if (NSPLIT > 1) {
        call(qt, o, NSPLIT - 1);
        for (const T& x : o)
          if (!std::isnan(float(x))) ++bad;
      }
      call(qt, o, NSPLIT);
    } else {
      std::vector<float> part((size_t)B * Hq * NSPLIT * (D + 4), NAN);
      cpu_launch({(unsigned)(NTD * NSPLIT), (unsigned)(B * Hkv * NGROUPS), 1}, {NTD, 1, 1}, [&] {
        mlx::core::cu::attn_decode_split<T, D, NTD, CH, GH, U, UC, PF, Hq, Hkv, Tk>(qt.data(), kt.data(), vt.data(),
                                                                               part.data());
      });
      cpu_launch({(unsigned)(256 * B * Hq), 1, 1}, {256, 1, 1}, [&] {
        mlx::core::cu::attn_decode_combine<T, D, CH, Tk>(part.data(), o.data());
      });
    }
    double worst = 0;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hq; ++h) {
        const float* qh = &q[((size_t)b * Hq + h) * D];
        const size_t kv = (size_t)b * Hkv + h / G;
        std::vector<double> s(Tk);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < Tk; ++j) {
          double d = 0;
          for (int e = 0; e < D; ++e) d += (double)qh[e] * k[(kv * Tk + j) * D + e];
          s[j] = d / std::sqrt((double)D);
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j < Tk; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int e = 0; e < D; ++e) {
          double ref = 0;
          for (int j = 0; j < Tk; ++j) ref += s[j] * v[(kv * Tk + j) * D + e];
          ref /= sum;
          const double got = float(o[((size_t)b * Hq + h) * D + e]);
          const double err = std::fabs(got - ref) / (atol + rtol * std::fabs(ref));
          if (!(err <= 1)) ++bad;
          worst = std::max(worst, std::isnan(err) ? INFINITY : err);
        }
      }
    printf("%-44s %d splits%s, worst error %.3g of tolerance\n", what, NSPLIT,
           NC > 0 ? (IL ? " (a cluster, interleaved)" : " (a cluster)") : LM ? " (one launch, signed)" : "", worst);
  }
  return bad;
}

int main() {
  int bad = 0;
  // Two launches (NC = 0).
  //                D    NTD  NC IL LM CH   GH U  UC B  Hq Hkv Tk
  bad += check<float, 128, 128, 0, 0, 0, 64, 2, 2, 1, 0, 2, 6, 2, 300>("GQA 3, half-empty head group");
  bad += check<float, 128, 128, 0, 0, 0, 128, 4, 4, 1, 0, 1, 4, 1, 257>("GQA 4, one head group");
  bad += check<float, 128, 128, 0, 0, 0, 64, 8, 2, 1, 0, 1, 8, 1, 150>("GQA 8, GH 8");
  bad += check<float, 64, 256, 0, 0, 0, 32, 1, 8, 1, 0, 1, 2, 2, 100>("MHA, D 64, 256 threads");
  bad += check<float, 128, 128, 0, 0, 0, 512, 4, 2, 1, 0, 1, 4, 1, 77>("one split");
  bad += check<float, 128, 64, 0, 0, 0, 256, 4, 8, 1, 0, 1, 8, 2, 1100>("64 threads, U 8, short last split");
  bad += check<float, 128, 128, 0, 0, 0, 256, 4, 4, 2, 0, 1, 8, 2, 1100>("NTD 128, CH 256");
  bad += check<float, 64, 128, 0, 0, 0, 64, 4, 2, 1, 0, 2, 4, 2, 130>("GH 4 > G 2");
  bad += check<__half, 128, 128, 0, 0, 0, 256, 4, 4, 2, 0, 1, 8, 2, 520>("fp16, two launches, CH 256, UC 2");
  bad += check<__nv_bfloat16, 128, 64, 0, 0, 0, 64, 4, 4, 2, 0, 1, 8, 2, 140>("bf16, 2 warps, an empty chunk and warp");
  bad += check<__half, 64, 128, 0, 0, 0, 128, 2, 4, 1, 0, 2, 6, 2, 300>("fp16 D 64, GQA 3 in heads of 2");
  bad += check<__nv_bfloat16, 64, 64, 0, 0, 0, 32, 8, 4, 2, 0, 1, 8, 1, 100>("bf16 D 64, GH 8, one step per split");
  bad += check<__half, 128, 256, 0, 0, 0, 512, 1, 4, 1, 0, 1, 2, 2, 700>("fp16 MHA, GH 1, 8 warps");
  // One launch whose last block per head group merges (LM 1): slots of D / 4 lanes per head, rounds of them.
  bad += check<__half, 128, 64, 0, 1, 1, 512, 4, 4, 1, 1, 1, 8, 2, 1100>("fp16 one launch, defaults");
  bad += check<float, 128, 128, 0, 1, 1, 64, 2, 2, 1, 0, 2, 6, 2, 300>("float32 one launch, half-empty group");
  bad += check<__nv_bfloat16, 64, 64, 0, 1, 1, 32, 8, 4, 2, 0, 1, 8, 1, 140>("bf16 D 64 one launch, GH 8, 2 rounds");
  bad += check<__half, 128, 128, 0, 1, 1, 512, 4, 4, 2, 0, 1, 8, 2, 77>("fp16 one launch, one split");
  bad += check<float, 64, 128, 0, 1, 1, 64, 4, 2, 1, 0, 2, 4, 2, 130>("float32 D 64 one launch, GH 4 > G 2");
  bad += check<__half, 128, 256, 0, 1, 1, 128, 1, 4, 1, 0, 1, 2, 2, 700>("fp16 MHA one launch, GH 1, 8 warps");
  bad += check<__nv_bfloat16, 128, 64, 0, 1, 1, 64, 4, 4, 1, 0, 1, 8, 2, 2100>("bf16 one launch, 33 splits");
  // PF: each warp's next step's loads issued before it computes the current one (tensor-core path).
  bad += check<__half, 128, 128, 0, 1, 1, 512, 4, 4, 1, 0, 1, 8, 2, 1100>("fp16 one launch, no PF, short last split");
  bad += check<__nv_bfloat16, 128, 64, 0, 1, 1, 64, 4, 4, 1, 1, 1, 8, 2, 2100>("bf16 one launch, PF, 33 splits");
  bad += check<__half, 128, 128, 0, 1, 1, 192, 4, 4, 1, 1, 1, 8, 2, 1000>("fp16 one launch, PF, 3 steps per warp");
  bad += check<__half, 64, 128, 0, 1, 0, 128, 2, 4, 1, 1, 1, 6, 2, 300>("fp16 D 64 two launches, PF, GQA 3");
  bad += check<__half, 128, 128, 4, 1, 0, 0, 4, 4, 1, 1, 1, 8, 2, 1000>("fp16 cluster of 4, interleaved, PF");
  // One launch in clusters (NC > 0; CH unused), keys interleaved (IL 1) or in consecutive ranges.
  bad += check<__half, 128, 128, 8, 1, 0, 0, 4, 4, 2, 0, 1, 8, 2, 1000>("fp16 cluster of 8, interleaved");
  bad += check<__half, 128, 128, 8, 0, 0, 0, 4, 4, 2, 0, 1, 8, 2, 1000>("fp16 cluster, consecutive keys");
  bad += check<__half, 128, 128, 4, 1, 0, 0, 4, 4, 2, 0, 1, 8, 2, 1000>("fp16 cluster of 4, interleaved (H200's best)");
  bad += check<__nv_bfloat16, 64, 64, 4, 0, 0, 0, 2, 4, 1, 0, 2, 6, 2, 203>("bf16 cluster of 4, GQA 3 in heads of 2");
  bad += check<__half, 128, 64, 8, 0, 0, 0, 8, 4, 2, 0, 1, 8, 1, 40>("fp16 cluster, blocks without keys");
  bad += check<float, 128, 128, 2, 0, 0, 0, 4, 4, 1, 0, 1, 8, 2, 300>("float32 cluster of 2");
  bad += check<float, 64, 64, 8, 0, 0, 0, 1, 2, 1, 0, 2, 2, 2, 77>("float32 cluster, MHA, empty blocks");
  bad += check<float, 128, 64, 4, 1, 0, 0, 4, 4, 1, 0, 1, 8, 2, 700>("float32 cluster of 4, interleaved");
  bad += check<__nv_bfloat16, 64, 64, 8, 1, 0, 0, 4, 4, 1, 0, 2, 4, 2, 300>("bf16 cluster, interleaved, B 2, GH 4 > G 2");
  bad += check<__half, 128, 64, 8, 1, 0, 0, 4, 4, 2, 0, 1, 8, 2, 40>("fp16 cluster, interleaved, splits without keys");
  printf(bad ? "decode FAILED: %d bad\n" : "decode agrees with the reference\n", bad);
  return bad != 0;
}
