// attention, naive: one warp per output row (b, h, i). The row walks its visible keys j in order with an
// online softmax: m = running max of the scores, l = running sum of exp(s - m), acc = running sum of
// exp(s - m) * v[j]; a new maximum rescales l and acc by exp(m_old - m_new). o = acc / l.
//   s_j = (q[b, h, i] . k[b, g, j]) / sqrt(D),  g = h / (Hq / Hkv)                         (GQA)
//   visible: every j < Tk, or with CAUSAL = 1 only j <= i + (Tk - Tq)          (bottom-right causal)
// Lane `lane` owns the elements d = lane + 32 c (c < D / 32 <= 4) of q, of the accumulator and of o;
// the dot product is a warp all-reduce (__shfl_xor_sync), so every lane holds every score and the
// softmax state is identical in all 32 lanes. Every K and V row is re-read by each of the Hq / Hkv * Tq
// rows that use it (through L2): simple, and far from the memory roofline.
//
// Layouts (row-major): q, o (B, Hq, Tq, D); k, v (B, Hkv, Tk, D), all in T (float, __half or
// __nv_bfloat16); arithmetic in float. Scalars: B[0], Hq[0], Hkv[0], Tq[0], Tk[0], D[0], CAUSAL[0].
const int nHq = Hq[0], nHkv = Hkv[0], nTq = Tq[0], nTk = Tk[0], nD = D[0];
const bool causal = CAUSAL[0] != 0;
const long long rows = (long long)B[0] * nHq * nTq;
const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;  // (b * Hq + h) * Tq + i
const int lane = threadIdx.x % 32;
if (row >= rows) return;  // whole warps leave together: blockDim.x is a multiple of 32

const int i = (int)(row % nTq);
const long long bh = row / nTq;
const int h = (int)(bh % nHq);
const long long b = bh / nHq;
const int g = h / (nHq / nHkv);
const T* qr = q + row * nD;
const T* kh = k + (b * nHkv + g) * (long long)nTk * nD;
const T* vh = v + (b * nHkv + g) * (long long)nTk * nD;

const float scale = 1.0f / sqrtf((float)nD);
float qv[4], acc[4];
for (int c = 0; c < 4; ++c) {
  const int d = lane + 32 * c;
  qv[c] = d < nD ? static_cast<float>(qr[d]) * scale : 0.0f;
  acc[c] = 0.0f;
}
// Keys this row sees: all of them, or the first i + (Tk - Tq) + 1 with the causal mask.
const int jend = causal ? min(nTk, i + (nTk - nTq) + 1) : nTk;
float m = -3.0e38f;  // finite stand-in for -inf: exp(m - s) underflows to 0 at the first key
float l = 0.0f;
for (int j = 0; j < jend; ++j) {
  const T* kr = kh + (long long)j * nD;
  float s = 0.0f;
  for (int c = 0; c < 4; ++c) {
    const int d = lane + 32 * c;
    if (d < nD) s = fmaf(qv[c], static_cast<float>(kr[d]), s);
  }
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  const float mnew = fmaxf(m, s);
  const float corr = expf(m - mnew);
  const float p = expf(s - mnew);
  l = fmaf(l, corr, p);
  const T* vr = vh + (long long)j * nD;
  for (int c = 0; c < 4; ++c) {
    const int d = lane + 32 * c;
    if (d < nD) acc[c] = fmaf(acc[c], corr, p * static_cast<float>(vr[d]));
  }
  m = mnew;
}
T* orow = o + row * nD;
const float inv = 1.0f / l;  // l >= 1: the row's maximum contributes exp(0)
for (int c = 0; c < 4; ++c) {
  const int d = lane + 32 * c;
  if (d < nD) orow[d] = static_cast<T>(acc[c] * inv);
}
