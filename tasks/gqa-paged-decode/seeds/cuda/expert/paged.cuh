// gqa-paged-decode, expert: split-K over each sequence's pages, every KV head's pages read once for the
// G = Hq / Hkv query heads that share it (GQA), then a merge.
//
// Work items. Sequence b's pages are cut into chunks of CH pages; chunk c of sequence b is item
// start(b) + c, where start(b) = sum over b' < b of ceil(len(b') / CH). There are at most
// ceil(N / CH) + B items (the grid's x), blocks past the last one return at once. `locate` finds a block's
// (b, c) with one warp's prefix sum over the sequences, 32 at a time, so a batch of any size needs no
// host-side table.
//
// split<...>: one block per (item, KV head g), NW warps. Lane layout: the warp's 32 lanes are G heads x QP
// lanes (QP = 32 / G), lane (h, p) owning the DL = D / QP dims [p DL, (p + 1) DL) of head g G + h: its query
// slice and accumulator live in registers, a key row is read by the QP lanes of one dim slice each (the G
// lanes of a slice read the same 16-byte words: one transaction), and a score is a sum over QP lanes
// (log2(QP) shuffles). Warp w takes keys w KT .. w KT + KT - 1 of every NW KT keys of the chunk, KT at a time:
// all KT rows are loaded before any is used, then one online-softmax step per tile (one rescale of the
// accumulator per KT keys). Scores carry log2(e) / sqrt(D), so exponentials are exp2. The NW warps' partial
// (max, sum, accumulator) are merged through shared memory and written to `part` as an item's row per
// query head: D unnormalised outputs, then the max and the sum.
//
// merge<...>: one block of D threads per (b, query head): the sequence's items (their largest max found by
// the whole block), weighted against that max: o = sum_i 2^(m_i - M) acc_i / sum_i 2^(m_i - M) l_i, lse = M + log2(sum ...) (base 2:
// log2(sum_j exp(s_j)) with s the unscaled scores, as the task defines it).
#pragma once

namespace kspaged {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNone = -3.0e38f;  // finite stand-in for -inf: exp2(kNone - m) is 0

// 8 elements of T from 16 bytes, as floats.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float* out) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = static_cast<float>(e[i]);
}

// The block's item -> (sequence, chunk), or sequence -1 past the last item. Warp 0 scans; every thread
// of the block reads the answer after the barrier.
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

template <typename T, int D, int Hq, int Hkv, int CH, int NW, int KT>
__device__ __forceinline__ void split(const T* q, const T* k_cache, const T* v_cache, const int* kv_indptr,
                                      const int* kv_indices, float* part, int nB) {
  constexpr int G = Hq / Hkv, QP = 32 / G, DL = D / QP;
  static_assert(Hq % Hkv == 0 && 32 % G == 0 && DL % 8 == 0, "G heads x QP lanes, 16-byte slices");
  __shared__ int s_b, s_c;
  __shared__ float s_m[NW][G], s_l[NW][G];
  __shared__ float s_o[NW][G][D];
  const int item = blockIdx.x, g = blockIdx.y;
  locate<CH>(kv_indptr, nB, item, &s_b, &s_c);
  const int b = s_b;
  if (b < 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = lane / QP, p = lane % QP;
  const int first = kv_indptr[b] + s_c * CH;
  const int last = min(first + CH, kv_indptr[b + 1]);

  // This lane's query slice, scaled so that scores are in log2 units.
  const float scale = kLog2e / sqrtf((float)D);
  float qv[DL], acc[DL];
  const T* qr = q + ((size_t)b * Hq + g * G + h) * D + p * DL;
#pragma unroll
  for (int i = 0; i < DL; i += 8) {
    load8(qr + i, qv + i);
#pragma unroll
    for (int j = 0; j < 8; ++j) qv[i + j] *= scale, acc[i + j] = 0.0f;
  }
  float m = kNone, l = 0.0f;
  for (int t0 = first + warp * KT; t0 < last; t0 += NW * KT) {
    float kv[KT][DL];
    size_t row[KT];
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      const int t = t0 + j;
      row[j] = t < last ? ((size_t)kv_indices[t] * Hkv + g) * D + p * DL : 0;
      if (t < last) {
#pragma unroll
        for (int i = 0; i < DL; i += 8) load8(k_cache + row[j] + i, kv[j] + i);
      } else {
        // A key past the chunk weighs 0, but 0 * (a register's leftover NaN) is NaN: its row is zeros.
#pragma unroll
        for (int i = 0; i < DL; ++i) kv[j][i] = 0.0f;
      }
    }
    float s[KT], tmax = kNone;
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      float d = 0.0f;
#pragma unroll
      for (int i = 0; i < DL; ++i) d = fmaf(qv[i], kv[j][i], d);
#pragma unroll
      for (int off = QP / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
      s[j] = t0 + j < last ? d : kNone;
      tmax = fmaxf(tmax, s[j]);
    }
    const float mnew = fmaxf(m, tmax);
    const float corr = exp2f(m - mnew);
    l *= corr;
#pragma unroll
    for (int i = 0; i < DL; ++i) acc[i] *= corr;
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      if (t0 + j < last) {
#pragma unroll
        for (int i = 0; i < DL; i += 8) load8(v_cache + row[j] + i, kv[j] + i);
      }
    }
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      const float pj = exp2f(s[j] - mnew);  // 0 for a key past the chunk
      l += pj;
#pragma unroll
      for (int i = 0; i < DL; ++i) acc[i] = fmaf(pj, kv[j][i], acc[i]);
    }
    m = mnew;
  }

  // The warps' partials through shared memory; a warp with no key left m = kNone, l = 0, acc = 0.
  if (p == 0) s_m[warp][h] = m, s_l[warp][h] = l;
#pragma unroll
  for (int i = 0; i < DL; ++i) s_o[warp][h][p * DL + i] = acc[i];
  __syncthreads();
  float* out = part + ((size_t)item * Hq + g * G) * (D + 2);
  for (int e = threadIdx.x; e < G * D; e += 32 * NW) {
    const int hh = e / D, d = e % D;
    float mm = kNone;
#pragma unroll
    for (int w = 0; w < NW; ++w) mm = fmaxf(mm, s_m[w][hh]);
    float o = 0.0f, ll = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float f = exp2f(s_m[w][hh] - mm);
      o = fmaf(f, s_o[w][hh][d], o);
      ll = fmaf(f, s_l[w][hh], ll);
    }
    out[(size_t)hh * (D + 2) + d] = o;
    if (d == 0) out[(size_t)hh * (D + 2) + D] = mm, out[(size_t)hh * (D + 2) + D + 1] = ll;
  }
}

template <typename T, int D, int Hq, int CH>
__device__ __forceinline__ void merge(const float* part, const int* kv_indptr, T* o, float* lse, int nB) {
  __shared__ int s_start;
  const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, d = threadIdx.x;
  // The sequence's first item: the chunks of the sequences before it, summed by warp 0.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int base = 0;
    for (int b0 = 0; b0 < b; b0 += 32) {
      const int bb = b0 + lane;
      int cnt = bb < b ? (kv_indptr[bb + 1] - kv_indptr[bb] + CH - 1) / CH : 0;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) cnt += __shfl_xor_sync(0xffffffffu, cnt, off);
      base += cnt;
    }
    if (lane == 0) s_start = base;
  }
  __syncthreads();
  const int items = (kv_indptr[b + 1] - kv_indptr[b] + CH - 1) / CH;
  const float* r = part + ((size_t)s_start * Hq + h) * (D + 2);
  const size_t stride = (size_t)Hq * (D + 2);
  // The largest max: the block's threads take the items in turn, then a warp and a block reduction (a
  // sequence of thousands of pages has hundreds of items: one thread walking them all would wait on each).
  __shared__ float s_max[D / 32];
  float mm = kNone;
  for (int i = d; i < items; i += D) mm = fmaxf(mm, r[i * stride + D]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, off));
  if (d % 32 == 0) s_max[d / 32] = mm;
  __syncthreads();
  mm = s_max[0];
#pragma unroll
  for (int w = 1; w < D / 32; ++w) mm = fmaxf(mm, s_max[w]);
  // Each thread its dim over the items, four loads in flight.
  float acc = 0.0f, ll = 0.0f;
#pragma unroll 4
  for (int i = 0; i < items; ++i) {
    const float f = exp2f(r[i * stride + D] - mm);
    acc = fmaf(f, r[i * stride + d], acc);
    ll = fmaf(f, r[i * stride + D + 1], ll);
  }
  o[((size_t)b * Hq + h) * D + d] = static_cast<T>(acc / ll);
  if (d == 0) lse[(size_t)b * Hq + h] = mm + log2f(ll);
}

}  // namespace kspaged
