// gqa-paged-decode, naive: one warp per output row (b, h). The row walks its sequence's pages
// t = kv_indptr[b] .. kv_indptr[b + 1] - 1 in order (page kv_indices[t] holds the key and value rows of
// one token for every KV head) with an online softmax: m = running max of the scaled scores, l = running
// sum of exp(s - m), acc = running sum of exp(s - m) * v; a new maximum rescales l and acc by
// exp(m_old - m_new). o = acc / l, lse = log2(sum exp(s)) = (m + ln l) / ln 2.
//   s_t = (q[b, h] . k_cache[kv_indices[t], 0, g]) / sqrt(D),  g = h / (Hq / Hkv)               (GQA)
// Lane `lane` owns the elements d = lane + 32 c (c < D / 32 <= 4) of q, of the accumulator and of o; the
// dot product is a warp all-reduce (__shfl_xor_sync), so every lane holds every score. Each page row is
// read by the Hq / Hkv rows of its KV head group separately (through L2), one dependent gather per key:
// simple, and far from the memory roofline.
//
// Layouts (row-major): q, o (B, Hq, D) and k_cache, v_cache (P, 1, Hkv, D) in T (__half or
// __nv_bfloat16); lse (B, Hq) float; kv_indptr (B + 1), kv_indices (N) int32. Arithmetic in float.
// The same kernel as the mlx-cuda naive seed, written as a whole CUDA function (the cuda target).
template <typename T>
__global__ void paged_decode_naive(const T* q, const T* k_cache, const T* v_cache, const int* kv_indptr,
                                   const int* kv_indices, T* o, float* lse, int B, int Hq, int Hkv, int D) {
  const int nHq = Hq, nHkv = Hkv, nD = D;
  const long long rows = (long long)B * nHq;
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;  // b * Hq + h
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together: blockDim.x is a multiple of 32

  const int h = (int)(row % nHq);
  const long long b = row / nHq;
  const int g = h / (nHq / nHkv);
  const T* qr = q + row * nD;
  const int first = kv_indptr[b], last = kv_indptr[b + 1];

  const float scale = 1.0f / sqrtf((float)nD);
  float qv[4], acc[4];
  for (int c = 0; c < 4; ++c) {
    const int d = lane + 32 * c;
    qv[c] = d < nD ? static_cast<float>(qr[d]) * scale : 0.0f;
    acc[c] = 0.0f;
  }
  float m = -3.0e38f;  // finite stand-in for -inf: exp(m - s) underflows to 0 at the first key
  float l = 0.0f;
  for (int t = first; t < last; ++t) {
    const long long at = ((long long)kv_indices[t] * nHkv + g) * nD;  // page stride Hkv * D (page size 1)
    const T* kr = k_cache + at;
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
    const T* vr = v_cache + at;
    for (int c = 0; c < 4; ++c) {
      const int d = lane + 32 * c;
      if (d < nD) acc[c] = fmaf(acc[c], corr, p * static_cast<float>(vr[d]));
    }
    m = mnew;
  }
  T* orow = o + row * nD;
  const float inv = 1.0f / l;  // l >= 1 for a sequence of at least one page: its maximum contributes exp(0)
  for (int c = 0; c < 4; ++c) {
    const int d = lane + 32 * c;
    if (d < nD) orow[d] = static_cast<T>(acc[c] * inv);
  }
  if (lane == 0) lse[row] = (m + logf(l)) * 1.4426950408889634f;  // log2(e)
}
