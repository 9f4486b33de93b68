// gqa-paged-decode, expert, pass 1 (split-K over pages): one threadgroup per (work item, KV head g), where
// work item start(b) + c is chunk c (CH pages) of sequence b, start(b) = sum over b' < b of ceil(len(b') / CH).
// Simdgroup 0 finds the threadgroup's (b, c) with simd prefix sums over the page lists, 32 sequences at a
// time; past the last item the threadgroup does nothing. The chunk's key and value rows of head g are read once
// for the G = Hq / Hkv query heads sharing it: a simdgroup's 32 lanes are G heads x QP = 32 / G dim slices,
// lane (h, p) holding dims [p DL, (p + 1) DL) (DL = D / QP) of head g G + h's query (pre-scaled by
// log2(e) / sqrt(D), so exponentials are exp2) and accumulator; a score is a sum over the QP lanes of a head
// (simd_shuffle_xor). Simdgroup sg takes keys sg KT .. sg KT + KT - 1 of every NW KT keys of the chunk: KT rows
// loaded, then one online-softmax rescale per tile. The NW simdgroups' (max, sum, accumulator) merge through
// threadgroup memory into part: per (item, query head) D unnormalised outputs, the max, the sum.
//
// Layouts (row-major): q (B, Hq, D), k_cache, v_cache (P, 1, Hkv, D) in T; kv_indptr (B + 1), kv_indices (N)
// int32; part (items, Hq, D + 2) float32. Scalar: B. Template ints: D, Hq, Hkv, CH, NW, KT. Grid
// (32 NW items, Hkv, 1), threadgroups of 32 NW.
constexpr int G = Hq / Hkv;
constexpr int QP = 32 / G;
constexpr int DL = D / QP;
threadgroup int tg_b[2];
threadgroup float tg_m[NW * G];
threadgroup float tg_l[NW * G];
threadgroup float tg_o[NW * G * D];

const int item = int(threadgroup_position_in_grid.x);
const uint g = threadgroup_position_in_grid.y;
const uint tid = thread_index_in_threadgroup;
const uint sg = simdgroup_index_in_threadgroup;
const uint lane = thread_index_in_simdgroup;
const int nB = B;
if (sg == 0) {
  if (lane == 0) tg_b[0] = -1;
  simdgroup_barrier(mem_flags::mem_threadgroup);
  int base = 0;
  for (int b0 = 0; b0 < nB; b0 += 32) {
    const int bb = b0 + int(lane);
    const int cnt = bb < nB ? (kv_indptr[bb + 1] - kv_indptr[bb] + CH - 1) / CH : 0;
    const int start = base + metal::simd_prefix_exclusive_sum(cnt);
    if (bb < nB && item >= start && item < start + cnt) {
      tg_b[0] = bb;
      tg_b[1] = item - start;
    }
    base += metal::simd_sum(cnt);
  }
}
threadgroup_barrier(mem_flags::mem_threadgroup);
// Past the last work item there is nothing to read or write; no early return, since a barrier follows.
const bool work = tg_b[0] >= 0;
const int b = work ? tg_b[0] : 0;
const int first = work ? kv_indptr[b] + tg_b[1] * CH : 0;
const int last = work ? metal::min(first + CH, kv_indptr[b + 1]) : 0;
const uint h = lane / uint(QP), p = lane % uint(QP);

const float scale = 1.4426950408889634f / metal::sqrt(float(D));  // log2(e) / sqrt(D)
float qv[DL], acc[DL];
const device T* qr = q + (ulong(b) * ulong(Hq) + ulong(g) * ulong(G) + ulong(h)) * ulong(D) + ulong(p) * ulong(DL);
for (int i = 0; i < DL; ++i) {
  qv[i] = static_cast<float>(qr[i]) * scale;
  acc[i] = 0.0f;
}
float m = -3.0e38f;  // finite stand-in for -inf: exp2(m - x) is 0
float l = 0.0f;
for (int t0 = first + int(sg) * KT; t0 < last; t0 += NW * KT) {
  float kv[KT][DL];
  ulong row[KT];
  for (int j = 0; j < KT; ++j) {
    const int t = t0 + j;
    row[j] = t < last ? (ulong(kv_indices[t]) * ulong(Hkv) + ulong(g)) * ulong(D) + ulong(p) * ulong(DL) : 0;
    for (int i = 0; i < DL; ++i) kv[j][i] = t < last ? static_cast<float>(k_cache[row[j] + ulong(i)]) : 0.0f;
  }
  float s[KT];
  float tmax = -3.0e38f;
  for (int j = 0; j < KT; ++j) {
    float d = 0.0f;
    for (int i = 0; i < DL; ++i) d = metal::fma(qv[i], kv[j][i], d);
    for (ushort off = ushort(QP / 2); off > 0; off >>= 1) d += metal::simd_shuffle_xor(d, off);
    s[j] = t0 + j < last ? d : -3.0e38f;
    tmax = metal::max(tmax, s[j]);
  }
  const float mnew = metal::max(m, tmax);
  const float corr = metal::exp2(m - mnew);
  l *= corr;
  for (int i = 0; i < DL; ++i) acc[i] *= corr;
  for (int j = 0; j < KT; ++j) {
    const bool in = t0 + j < last;
    for (int i = 0; i < DL; ++i) kv[j][i] = in ? static_cast<float>(v_cache[row[j] + ulong(i)]) : 0.0f;
    const float pj = metal::exp2(s[j] - mnew);  // 0 for a key past the chunk
    l += pj;
    for (int i = 0; i < DL; ++i) acc[i] = metal::fma(pj, kv[j][i], acc[i]);
  }
  m = mnew;
}

// The simdgroups' partials through threadgroup memory; one with no key left m = -3e38, l = 0, acc = 0.
if (p == 0) {
  tg_m[sg * uint(G) + h] = m;
  tg_l[sg * uint(G) + h] = l;
}
for (int i = 0; i < DL; ++i) tg_o[(sg * uint(G) + h) * uint(D) + p * uint(DL) + uint(i)] = acc[i];
threadgroup_barrier(mem_flags::mem_threadgroup);
device float* out = part + (ulong(item) * ulong(Hq) + ulong(g) * ulong(G)) * ulong(D + 2);
for (uint e = tid; work && e < uint(G * D); e += uint(32 * NW)) {
  const uint hh = e / uint(D), d = e % uint(D);
  float mm = -3.0e38f;
  for (int w = 0; w < NW; ++w) mm = metal::max(mm, tg_m[uint(w) * uint(G) + hh]);
  float o = 0.0f, ll = 0.0f;
  for (int w = 0; w < NW; ++w) {
    const float f = metal::exp2(tg_m[uint(w) * uint(G) + hh] - mm);
    o = metal::fma(f, tg_o[(uint(w) * uint(G) + hh) * uint(D) + d], o);
    ll = metal::fma(f, tg_l[uint(w) * uint(G) + hh], ll);
  }
  out[ulong(hh) * ulong(D + 2) + ulong(d)] = o;
  if (d == 0) {
    out[ulong(hh) * ulong(D + 2) + ulong(D)] = mm;
    out[ulong(hh) * ulong(D + 2) + ulong(D) + 1] = ll;
  }
}
