// mla-paged-decode, expert: split-K over each sequence's pages, every page row read once for all 16 heads (they
// share one latent head), both products on the tensor cores (mma.sync m16n8k16: the 16 heads are exactly one
// fragment's rows), then a merge.
//
// Work items: sequence b's pages cut into chunks of CH, chunk c of sequence b is item start(b) + c
// (start(b) = sum over b' < b of ceil(len(b') / CH)); at most ceil(N / CH) + B items, blocks past the last
// return at once. `locate` finds a block's (b, c) with one warp's prefix sum over the sequences.
//
// split<T, CH>: one block of NW = 4 warps per item. The query (16 heads x 576: q_nope then q_pe) sits in shared
// memory; the chunk's pages come in tiles of KT = 16 rows (compressed 512 then rope 64), gathered by cp.async into
// one of two stages while the other is used. Per tile:
//   - logits S (16 heads x 16 keys) = Q K^T over 576 = 36 k-steps, the warps taking every 4th k-step; their
//     partial S meet in shared memory and every warp sums them (each then holds the whole S in its fragments);
//   - scores carry log2(e) / sqrt(192) (exp2 throughout), keys past the chunk are -inf; an online softmax per
//     head row (a fragment row's max and sum over its 4 lanes by shuffles), the accumulator rescaled;
//   - O += P V, P (16 x 16, the S fragments repacked as an A operand in T) times the tile's compressed rows:
//     warp w owns output dims [128 w, 128 w + 128), 16 fragments of 8.
// The item's unnormalised output, its max (log2 units) and its sum per head go to `part` (D + 2 floats a head).
//
// merge<T, CH>: one block of 512 threads per (b, head): the sequence's items weighted against their largest max,
// output = sum_i 2^(m_i - M) acc_i / sum_i 2^(m_i - M) l_i, lse = M + log2(sum ...) (base 2).
#pragma once

namespace ksmla {

constexpr int H = 16, DC = 512, DP = 64, DQ = DC + DP;  // heads; compressed, rope and logit widths
constexpr int KT = 16;                                    // keys per tile
constexpr int NW = 4;                                     // warps per split block
constexpr int KS = DQ / 16;                               // k-steps of the logits (36)
constexpr int OW = DC / NW;                               // output dims per warp (128)
constexpr int RS = DQ + 8;                                // a shared row, in elements (+8: no bank conflicts)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNone = -3.0e38f;  // finite stand-in for -inf: exp2(kNone - m) is 0
constexpr float kScale = 0.07216878364870323f * kLog2e;  // 1 / sqrt(128 + 64), in log2 units

// Dynamic shared memory of a split block, in bytes: the query, two stages of KT rows, the warps' partial S.
constexpr int kSharedBytes = (H + 2 * KT) * RS * 2 + NW * H * KT * 4;

// The PTX primitives. The CPU emulation of this code (tests/cuda_seeds_cpu) defines KSMLA_HOST_PRIMITIVES and
// gives its own.
#ifndef KSMLA_HOST_PRIMITIVES
template <typename T> struct Mma;
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
// 16 bytes global -> shared, asynchronously; zeros where !ok (nothing is read then).
__device__ __forceinline__ void cp16(void* dst, const void* src, bool ok) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
#define KSMLA_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// Two values of T in one 32-bit register, the first in the low half (a fragment pair).
template <typename T> __device__ __forceinline__ unsigned pack(T lo, T hi) {
  return static_cast<unsigned>(*reinterpret_cast<const unsigned short*>(&lo)) |
         static_cast<unsigned>(*reinterpret_cast<const unsigned short*>(&hi)) << 16;
}
template <typename T> __device__ __forceinline__ unsigned word(const T* p) {  // two adjacent elements
  return *reinterpret_cast<const unsigned*>(p);
}

// The block's item -> (sequence, chunk), or sequence -1 past the last item. Warp 0 scans; every thread of the
// block reads the answer after the barrier.
template <int CH>
__device__ __forceinline__ void locate(const int* kv_indptr, int nB, int item, int* s_b, int* s_c) {
  const int lane = threadIdx.x % 32;
  if (threadIdx.x < 32) {
    if (lane == 0) *s_b = -1;
    __syncwarp();
    int base = 0;
    for (int b0 = 0; b0 < nB; b0 += 32) {
      const int b = b0 + lane;
      const int cnt = b < nB ? (kv_indptr[b + 1] - kv_indptr[b] + CH - 1) / CH : 0;
      int inc = cnt;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, inc, off);
        if (lane >= off) inc += y;
      }
      const int start = base + inc - cnt;
      if (b < nB && item >= start && item < start + cnt) {
        *s_b = b;
        *s_c = item - start;
      }
      base += __shfl_sync(0xffffffffu, inc, 31);
    }
  }
  __syncthreads();
}

// KT page rows (compressed then rope) into a stage, 16 bytes per copy, by THREADS threads; rows past `count`
// are zeros.
template <typename T, int THREADS = 32 * NW>
__device__ __forceinline__ void load_tile(T* stage, const T* ckv_cache, const T* kpe_cache, const int* pages,
                                          int count) {
  constexpr int PER_ROW = DQ / 8;  // 16-byte pieces of a row: 64 compressed, 8 rope
  for (int e = threadIdx.x; e < KT * PER_ROW; e += THREADS) {
    const int r = e / PER_ROW, piece = e % PER_ROW;
    const bool ok = r < count;
    const long long p = ok ? pages[r] : 0;
    const T* src = piece < DC / 8 ? ckv_cache + p * DC + piece * 8 : kpe_cache + p * DP + (piece - DC / 8) * 8;
    cp16(stage + r * RS + piece * 8, src, ok);
  }
}

// One tile's online-softmax step and P V for a warp's fragment rows g and g + 8 (heads): the logits are the sum
// of `parts` partial tiles ([parts][H][KT], from the warps that split the k-steps), scaled, keys at or past
// `limit` -inf; the row max and sum over the 4 lanes of a row by shuffles, the accumulator rescaled, P repacked
// from the S fragments as the A operand in T, times the tile's compressed rows for the NT output fragments from
// dim d0.
template <typename T, int NT>
__device__ __forceinline__ void softmax_pv(const float* partial, int parts, int limit, const T* kt, int d0,
                                           float (*acc)[4], float& m_lo, float& m_hi, float& l_lo, float& l_hi) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float s[2][4];
  float mx_lo = kNone, mx_hi = kNone;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1), key = 8 * j + 2 * t + (e & 1);
      float v = 0.0f;
      for (int w = 0; w < parts; ++w) v += partial[w * H * KT + row * KT + key];
      s[j][e] = key < limit ? v * kScale : kNone;
      if (e < 2) mx_lo = fmaxf(mx_lo, s[j][e]); else mx_hi = fmaxf(mx_hi, s[j][e]);
    }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
    mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
  }
  // A tile past a row's last key leaves it as it was: every score -inf, and after its first tile m is finite.
  const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
  const float c_lo = exp2f(m_lo - mn_lo), c_hi = exp2f(m_hi - mn_hi);
  float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    s[j][0] = exp2f(s[j][0] - mn_lo), s[j][1] = exp2f(s[j][1] - mn_lo);
    s[j][2] = exp2f(s[j][2] - mn_hi), s[j][3] = exp2f(s[j][3] - mn_hi);
    sum_lo += s[j][0] + s[j][1];
    sum_hi += s[j][2] + s[j][3];
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, off);
    sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, off);
  }
  l_lo = l_lo * c_lo + sum_lo, l_hi = l_hi * c_hi + sum_hi;
  m_lo = mn_lo, m_hi = mn_hi;
  const unsigned pa[4] = {pack(static_cast<T>(s[0][0]), static_cast<T>(s[0][1])),
                          pack(static_cast<T>(s[0][2]), static_cast<T>(s[0][3])),
                          pack(static_cast<T>(s[1][0]), static_cast<T>(s[1][1])),
                          pack(static_cast<T>(s[1][2]), static_cast<T>(s[1][3]))};
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    acc[n][0] *= c_lo, acc[n][1] *= c_lo, acc[n][2] *= c_hi, acc[n][3] *= c_hi;
    const int d = d0 + 8 * n + g;  // the B fragment's column: an output dim
    const unsigned b0 = pack(kt[(2 * t) * RS + d], kt[(2 * t + 1) * RS + d]);
    const unsigned b1 = pack(kt[(2 * t + 8) * RS + d], kt[(2 * t + 9) * RS + d]);
    Mma<T>::run(acc[n], pa, b0, b1);
  }
}

template <typename T, int CH>
__device__ __forceinline__ void split(const T* q_nope, const T* q_pe, const T* ckv_cache, const T* kpe_cache,
                                      const int* kv_indptr, const int* kv_indices, float* part, int nB) {
  __shared__ int s_b, s_c;
  locate<CH>(kv_indptr, nB, blockIdx.x, &s_b, &s_c);
  const int b = s_b;
  if (b < 0) return;
  KSMLA_DYNAMIC_SHARED(smem);
  T* sq = reinterpret_cast<T*>(smem);                 // [H][RS]
  T* sk = sq + H * RS;                                 // [2][KT][RS]
  float* sp = reinterpret_cast<float*>(sk + 2 * KT * RS);  // [NW][H][KT]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int first = kv_indptr[b] + s_c * CH;
  const int count = min(CH, kv_indptr[b + 1] - first);
  const int tiles = (count + KT - 1) / KT;

  // The query: 16 heads x (q_nope, q_pe), then the first tile.
  for (int e = threadIdx.x; e < H * (DQ / 8); e += 32 * NW) {
    const int h = e / (DQ / 8), piece = e % (DQ / 8);
    const T* src = piece < DC / 8 ? q_nope + ((long long)b * H + h) * DC + piece * 8
                                  : q_pe + ((long long)b * H + h) * DP + (piece - DC / 8) * 8;
    cp16(sq + h * RS + piece * 8, src, true);
  }
  load_tile(sk, ckv_cache, kpe_cache, kv_indices + first, count);
  cp_commit();

  float acc[OW / 8][4];
#pragma unroll
  for (int n = 0; n < OW / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float m_lo = kNone, m_hi = kNone, l_lo = 0.0f, l_hi = 0.0f;  // rows g and g + 8

  for (int i = 0; i < tiles; ++i) {
    if (i + 1 < tiles)  // the next tile into the other stage while this one is used
      load_tile(sk + ((i + 1) % 2) * KT * RS, ckv_cache, kpe_cache, kv_indices + first + (i + 1) * KT,
                count - (i + 1) * KT);
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    const T* kt = sk + (i % 2) * KT * RS;

    // This warp's share of the logits: k-steps warp, warp + NW, ...
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int ks = warp; ks < KS; ks += NW) {
      const int k0 = ks * 16 + 2 * t;
      const unsigned a[4] = {word(sq + g * RS + k0), word(sq + (g + 8) * RS + k0), word(sq + g * RS + k0 + 8),
                             word(sq + (g + 8) * RS + k0 + 8)};
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
    // The whole S in this warp's fragments, keys past the chunk -inf; the softmax step and P V.
    softmax_pv<T, OW / 8>(sp, NW, count - i * KT, kt, warp * OW, acc, m_lo, m_hi, l_lo, l_hi);
    __syncthreads();  // the stage and the partial S are written again next tile
  }

  float* out = part + (long long)blockIdx.x * H * (DC + 2);
#pragma unroll
  for (int n = 0; n < OW / 8; ++n) {
    const int d = warp * OW + 8 * n + 2 * t;
    out[g * (DC + 2) + d] = acc[n][0];
    out[g * (DC + 2) + d + 1] = acc[n][1];
    out[(g + 8) * (DC + 2) + d] = acc[n][2];
    out[(g + 8) * (DC + 2) + d + 1] = acc[n][3];
  }
  if (warp == 0 && t == 0) {
    out[g * (DC + 2) + DC] = m_lo, out[g * (DC + 2) + DC + 1] = l_lo;
    out[(g + 8) * (DC + 2) + DC] = m_hi, out[(g + 8) * (DC + 2) + DC + 1] = l_hi;
  }
}

template <typename T, int CH>
__device__ __forceinline__ void merge(const float* part, const int* kv_indptr, T* output, float* lse, int nB) {
  __shared__ int s_start;
  __shared__ float s_max[DC / 32];
  const int b = blockIdx.x / H, h = blockIdx.x % H, d = threadIdx.x;
  // The sequence's first item: the chunks of the sequences before it, summed by warp 0.
  if (threadIdx.x < 32) {
    int base = 0;
    for (int b0 = 0; b0 < b; b0 += 32) {
      const int bb = b0 + threadIdx.x;
      int cnt = bb < b ? (kv_indptr[bb + 1] - kv_indptr[bb] + CH - 1) / CH : 0;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) cnt += __shfl_xor_sync(0xffffffffu, cnt, off);
      base += cnt;
    }
    if (threadIdx.x == 0) s_start = base;
  }
  __syncthreads();
  const int items = (kv_indptr[b + 1] - kv_indptr[b] + CH - 1) / CH;
  const float* r = part + ((long long)s_start * H + h) * (DC + 2);
  const long long stride = (long long)H * (DC + 2);
  float mm = kNone;
  for (int i = d; i < items; i += DC) mm = fmaxf(mm, r[i * stride + DC]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, off));
  if (d % 32 == 0) s_max[d / 32] = mm;
  __syncthreads();
  mm = s_max[0];
#pragma unroll
  for (int w = 1; w < DC / 32; ++w) mm = fmaxf(mm, s_max[w]);
  float acc = 0.0f, ll = 0.0f;
#pragma unroll 4
  for (int i = 0; i < items; ++i) {
    const float f = exp2f(r[i * stride + DC] - mm);
    acc = fmaf(f, r[i * stride + d], acc);
    ll = fmaf(f, r[i * stride + DC + 1], ll);
  }
  output[((long long)b * H + h) * DC + d] = static_cast<T>(acc / ll);
  if (d == 0) lse[(long long)b * H + h] = mm + log2f(ll);
}

}  // namespace ksmla
