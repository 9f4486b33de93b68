// attention, naive: one simdgroup per output row (b, h, i). The row walks its visible keys j in order
// with an online softmax: m = running max of the scores, l = running sum of exp(s - m), acc = running
// sum of exp(s - m) * v[j]; a new maximum rescales l and acc by exp(m_old - m_new). o = acc / l.
//   s_j = (q[b, h, i] . k[b, g, j]) / sqrt(D),  g = h / (Hq / Hkv)                         (GQA)
//   visible: every j < Tk, or with CAUSAL = 1 only j <= i + (Tk - Tq)          (bottom-right causal)
// Lane `lane` owns the elements d = lane + 32 c (c < D / 32 <= 4) of q, of the accumulator and of o;
// the dot product is a simd_sum, so every lane holds every score and the softmax state is identical in
// all 32 lanes. The grid is a multiple of 32 threads and TG a multiple of 32, so every simdgroup is
// complete (simd_sum needs all 32 lanes). Every K and V row is re-read by each of the Hq / Hkv * Tq rows
// that use it: simple, and far from the memory roofline.
//
// Layouts (row-major): q, o (B, Hq, Tq, D); k, v (B, Hkv, Tk, D), all in T (float, half or
// bfloat16_t); arithmetic in float. Scalars: B, Hq, Hkv, Tq, Tk, D, CAUSAL.
const int nHq = Hq, nHkv = Hkv, nTq = Tq, nTk = Tk, nD = D;
const bool causal = CAUSAL != 0;
const uint row = thread_position_in_grid.x / 32;  // (b * Hq + h) * Tq + i
const uint lane = thread_position_in_grid.x % 32;
if (row >= uint(B * nHq * nTq)) return;  // never taken: the grid holds exactly one simdgroup per row

const int i = int(row % uint(nTq));
const uint bh = row / uint(nTq);
const int h = int(bh % uint(nHq));
const uint b = bh / uint(nHq);
const int g = h / (nHq / nHkv);
const device T* qr = q + row * uint(nD);
const device T* kh = k + (b * uint(nHkv) + uint(g)) * uint(nTk) * uint(nD);
const device T* vh = v + (b * uint(nHkv) + uint(g)) * uint(nTk) * uint(nD);

const float scale = 1.0f / metal::sqrt(float(nD));
float qv[4], acc[4];
for (int c = 0; c < 4; ++c) {
  const int d = int(lane) + 32 * c;
  qv[c] = d < nD ? static_cast<float>(qr[d]) * scale : 0.0f;
  acc[c] = 0.0f;
}
// Keys this row sees: all of them, or the first i + (Tk - Tq) + 1 with the causal mask.
const int jend = causal ? metal::min(nTk, i + (nTk - nTq) + 1) : nTk;
float m = -3.0e38f;  // finite stand-in for -inf: exp(m - s) underflows to 0 at the first key
float l = 0.0f;
for (int j = 0; j < jend; ++j) {
  const device T* kr = kh + uint(j) * uint(nD);
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
  const device T* vr = vh + uint(j) * uint(nD);
  for (int c = 0; c < 4; ++c) {
    const int d = int(lane) + 32 * c;
    if (d < nD) acc[c] = metal::fma(acc[c], corr, p * static_cast<float>(vr[d]));
  }
  m = mnew;
}
device T* orow = o + row * uint(nD);
const float inv = 1.0f / l;  // l >= 1: the row's maximum contributes exp(0)
for (int c = 0; c < 4; ++c) {
  const int d = int(lane) + 32 * c;
  if (d < nD) orow[d] = static_cast<T>(acc[c] * inv);
}
