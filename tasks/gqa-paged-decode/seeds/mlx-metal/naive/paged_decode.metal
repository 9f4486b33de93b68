// gqa-paged-decode, naive: one simdgroup per output row (b, h). The row walks its sequence's pages
// t = kv_indptr[b] .. kv_indptr[b + 1] - 1 in order (page kv_indices[t] holds the key and value rows of
// one token for every KV head) with an online softmax: m = running max of the scaled scores, l = running
// sum of exp(s - m), acc = running sum of exp(s - m) * v; a new maximum rescales l and acc by
// exp(m_old - m_new). o = acc / l, lse = log2(sum exp(s)) = (m + ln l) / ln 2.
//   s_t = (q[b, h] . k_cache[kv_indices[t], 0, g]) / sqrt(D),  g = h / (Hq / Hkv)               (GQA)
// Lane `lane` owns the elements d = lane + 32 c (c < D / 32 <= 4) of q, of the accumulator and of o; the
// dot product is a simd_sum, so every lane holds every score. The grid is a multiple of 32 threads and TG
// a multiple of 32, so every simdgroup is complete (simd_sum needs all 32 lanes). Each page row is read by
// the Hq / Hkv rows of its KV head group separately, one dependent gather per key: simple, and far from
// the memory roofline.
//
// Layouts (row-major): q, o (B, Hq, D) and k_cache, v_cache (P, 1, Hkv, D) in T (half or bfloat16_t);
// lse (B, Hq) float; kv_indptr (B + 1), kv_indices (N) int32. Arithmetic in float.
// Scalars: B, Hq, Hkv, D.
const int nHq = Hq, nHkv = Hkv, nD = D;
const uint row = thread_position_in_grid.x / 32;  // b * Hq + h
const uint lane = thread_position_in_grid.x % 32;
if (row >= uint(B * nHq)) return;  // never taken: the grid holds exactly one simdgroup per row

const int h = int(row % uint(nHq));
const uint b = row / uint(nHq);
const int g = h / (nHq / nHkv);
const device T* qr = q + row * uint(nD);
const int first = kv_indptr[b], last = kv_indptr[b + 1];

const float scale = 1.0f / metal::sqrt(float(nD));
float qv[4], acc[4];
for (int c = 0; c < 4; ++c) {
  const int d = int(lane) + 32 * c;
  qv[c] = d < nD ? static_cast<float>(qr[d]) * scale : 0.0f;
  acc[c] = 0.0f;
}
float m = -3.0e38f;  // finite stand-in for -inf: exp(m - s) underflows to 0 at the first key
float l = 0.0f;
for (int t = first; t < last; ++t) {
  const ulong at = (ulong(kv_indices[t]) * ulong(nHkv) + ulong(g)) * ulong(nD);  // page stride Hkv * D
  const device T* kr = k_cache + at;
  float part = 0.0f;
  for (int c = 0; c < 4; ++c) {
    const int d = int(lane) + 32 * c;
    if (d < nD) part = metal::fma(qv[c], static_cast<float>(kr[d]), part);
  }
  const float s = metal::simd_sum(part);
  const float mnew = metal::max(m, s);
  const float corr = metal::precise::exp(m - mnew);
  const float p = metal::precise::exp(s - mnew);
  l = metal::fma(l, corr, p);
  const device T* vr = v_cache + at;
  for (int c = 0; c < 4; ++c) {
    const int d = int(lane) + 32 * c;
    if (d < nD) acc[c] = metal::fma(acc[c], corr, p * static_cast<float>(vr[d]));
  }
  m = mnew;
}
device T* orow = o + row * uint(nD);
const float inv = 1.0f / l;  // l >= 1 for a sequence of at least one page: its maximum contributes exp(0)
for (int c = 0; c < 4; ++c) {
  const int d = int(lane) + 32 * c;
  if (d < nD) orow[d] = static_cast<T>(acc[c] * inv);
}
if (lane == 0) lse[row] = (m + metal::precise::log(l)) * 1.4426950408889634f;  // log2(e)
