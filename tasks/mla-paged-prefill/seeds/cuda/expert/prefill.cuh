// mla-paged-prefill, expert (the decode expert's primitives and tiles, mla.cuh): a block of 8 warps per tile of
// QT = 4 query tokens of one sequence, every page row read once for the block's 4 tokens x 16 heads, both
// products on the tensor cores.
//
// Blocks: sequence b's query tokens cut into tiles of QT, tile c of sequence b is block start(b) + c, found by
// mla.cuh's `locate` over qo_indptr. Token i of a sequence with Lq tokens and Lkv pages sees its first
// Lkv - Lq + i + 1 pages (causal: the last token sees them all); the block walks the pages its last token sees,
// KT = 16 rows a tile through two cp.async stages, and each warp masks what its own token does not see.
// Warps 2 j and 2 j + 1 serve token j: they split the logits' 36 k-steps between them (their partial S meet in
// shared memory; both then hold S), run the same online softmax in exp2, and each accumulates P V for half the
// 512 output dims (32 fragments of 8: 128 floats a lane). No merge: a token's whole row ends in one block, and
// output and the base-2 lse are written at the end.
//
// A step where every sequence brings one query (Q == B, decode) runs the decode expert's split and merge
// instead (the plan dispatches with `when`): one token per sequence would leave 3 of a block's 4 tokens idle.
#pragma once
#include "mla.cuh"

namespace ksmla {

constexpr int QT = 4;         // query tokens per prefill block
constexpr int PW = 2 * QT;    // warps: two per token
constexpr int POW = DC / 2;   // output dims per warp (256)
constexpr int kPrefillSharedBytes = (QT * H + 2 * KT) * RS * 2 + PW * H * KT * 4;

template <typename T>
__device__ __forceinline__ void prefill(const T* q_nope, const T* q_pe, const T* ckv_cache, const T* kpe_cache,
                                        const int* qo_indptr, const int* kv_indptr, const int* kv_indices, T* output,
                                        float* lse, int nB) {
  __shared__ int s_b, s_c;
  locate<QT>(qo_indptr, nB, blockIdx.x, &s_b, &s_c);
  const int b = s_b;
  if (b < 0) return;
  KSMLA_DYNAMIC_SHARED(smem);
  T* sq = reinterpret_cast<T*>(smem);                      // [QT * H][RS]
  T* sk = sq + QT * H * RS;                                 // [2][KT][RS]
  float* sp = reinterpret_cast<float*>(sk + 2 * KT * RS);  // [PW][H][KT]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tok = warp / 2, half = warp % 2;
  const int lq = qo_indptr[b + 1] - qo_indptr[b], lkv = kv_indptr[b + 1] - kv_indptr[b];
  const int i0 = s_c * QT, i = i0 + tok;
  const bool valid = i < lq;
  const int limit = valid ? lkv - lq + i + 1 : 0;                // pages this warp's token sees
  const int reach = lkv - lq + min(i0 + QT, lq);                 // pages the block's last token sees
  const int first = kv_indptr[b];
  const int tiles = (reach + KT - 1) / KT;

  // The block's tokens (16 heads x (q_nope, q_pe) each; zeros past the sequence), then the first tile.
  for (int e = threadIdx.x; e < QT * H * (DQ / 8); e += 32 * PW) {
    const int r = e / (DQ / 8), piece = e % (DQ / 8);
    const bool ok = i0 + r / H < lq;
    const long long row = ok ? (long long)(qo_indptr[b] + i0 + r / H) * H + r % H : 0;
    const T* src = piece < DC / 8 ? q_nope + row * DC + piece * 8 : q_pe + row * DP + (piece - DC / 8) * 8;
    cp16(sq + r * RS + piece * 8, src, ok);
  }
  load_tile<T, 32 * PW>(sk, ckv_cache, kpe_cache, kv_indices + first, reach);
  cp_commit();

  const T* q = sq + tok * H * RS;
  float acc[POW / 8][4];
#pragma unroll
  for (int n = 0; n < POW / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float m_lo = kNone, m_hi = kNone, l_lo = 0.0f, l_hi = 0.0f;  // heads g and g + 8

  for (int it = 0; it < tiles; ++it) {
    if (it + 1 < tiles)
      load_tile<T, 32 * PW>(sk + ((it + 1) % 2) * KT * RS, ckv_cache, kpe_cache, kv_indices + first + (it + 1) * KT,
                            reach - (it + 1) * KT);
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    const T* kt = sk + (it % 2) * KT * RS;

    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int ks = half; ks < KS; ks += 2) {
      const int k0 = ks * 16 + 2 * t;
      const unsigned a[4] = {word(q + g * RS + k0), word(q + (g + 8) * RS + k0), word(q + g * RS + k0 + 8),
                             word(q + (g + 8) * RS + k0 + 8)};
#pragma unroll
      for (int j = 0; j < 2; ++j)
        Mma<T>::run(s[j], a, word(kt + (8 * j + g) * RS + k0), word(kt + (8 * j + g) * RS + k0 + 8));
    }
    float* mine = sp + warp * H * KT;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      mine[g * KT + 8 * j + 2 * t] = s[j][0];
      mine[g * KT + 8 * j + 2 * t + 1] = s[j][1];
      mine[(g + 8) * KT + 8 * j + 2 * t] = s[j][2];
      mine[(g + 8) * KT + 8 * j + 2 * t + 1] = s[j][3];
    }
    __syncthreads();
    // Both partial logit tiles of this token's pair of warps, its pages past `limit` -inf; the softmax step.
    // An idle warp (no token) computes nothing it writes.
    softmax_pv<T, POW / 8>(sp + (2 * tok) * H * KT, 2, limit - it * KT, kt, half * POW, acc, m_lo, m_hi, l_lo, l_hi);
    __syncthreads();  // the stage and the partial S are written again next tile
  }
  if (!valid) return;
  const long long row = (long long)(qo_indptr[b] + i) * H;
  const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
#pragma unroll
  for (int n = 0; n < POW / 8; ++n) {
    const int d = half * POW + 8 * n + 2 * t;
    output[(row + g) * DC + d] = static_cast<T>(acc[n][0] * inv_lo);
    output[(row + g) * DC + d + 1] = static_cast<T>(acc[n][1] * inv_lo);
    output[(row + g + 8) * DC + d] = static_cast<T>(acc[n][2] * inv_hi);
    output[(row + g + 8) * DC + d + 1] = static_cast<T>(acc[n][3] * inv_hi);
  }
  if (half == 0 && t == 0) {
    lse[row + g] = m_lo + log2f(l_lo);
    lse[row + g + 8] = m_hi + log2f(l_hi);
  }
}

}  // namespace ksmla
