// mla-paged-prefill, naive: one warp per output row (token q, head h). The token belongs to the sequence b with
// qo_indptr[b] <= q < qo_indptr[b + 1] (a binary search; every sequence has a token), as its query i = q -
// qo_indptr[b] of Lq; the sequence reads Lkv pages kv_indices[kv_indptr[b] ...], and query i sees the first
// Lkv - Lq + i + 1 of them (causal, the last query seeing all). Over those pages (page p holds one token's
// compressed row ckv_cache[p] and rope row kpe_cache[p]) an online softmax of
//   s_t = (q_nope[q, h] . ckv_cache[p] + q_pe[q, h] . kpe_cache[p]) / sqrt(128 + 64)
// gives output[q, h] = sum_t softmax(s)_t ckv_cache[p_t] and lse = log2(sum exp(s)). Lane `lane` owns the
// elements lane + 32 c of each width; a score is a warp all-reduce. Every head and every query token reads
// its rows again (through L2): simple, far from the roofline.
// Layouts (row-major): q_nope, output (Q, H, Dckv); q_pe (Q, H, Dkpe); ckv_cache (P, 1, Dckv); kpe_cache
// (P, 1, Dkpe) in T (__half or __nv_bfloat16); lse (Q, H) float; qo_indptr, kv_indptr (B + 1), kv_indices
// (N) int32.
template <typename T>
__global__ void mla_prefill_naive(const T* q_nope, const T* q_pe, const T* ckv_cache, const T* kpe_cache,
                                  const int* qo_indptr, const int* kv_indptr, const int* kv_indices, T* output,
                                  float* lse, int B, int Q, int H, int Dckv, int Dkpe) {
  constexpr int CK = 16, CP = 2;  // Dckv <= 32 CK, Dkpe <= 32 CP (the plan's constraints)
  const long long rows = (long long)Q * H;
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;  // q * H + h
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together: blockDim.x is a multiple of 32

  const int q = (int)(row / H);
  int lo = 0, hi = B - 1;  // the last b with qo_indptr[b] <= q
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (qo_indptr[mid] <= q) lo = mid; else hi = mid - 1;
  }
  const int b = lo;
  const int lq = qo_indptr[b + 1] - qo_indptr[b], lkv = kv_indptr[b + 1] - kv_indptr[b];
  const int first = kv_indptr[b], last = first + lkv - lq + (q - qo_indptr[b]) + 1;

  const float scale = 0.07216878364870323f;  // 1 / sqrt(128 + 64), as the definition fixes it
  float qn[CK], qp[CP], acc[CK];
  for (int c = 0; c < CK; ++c) {
    const int d = lane + 32 * c;
    qn[c] = d < Dckv ? static_cast<float>(q_nope[row * Dckv + d]) * scale : 0.0f;
    acc[c] = 0.0f;
  }
  for (int c = 0; c < CP; ++c) {
    const int d = lane + 32 * c;
    qp[c] = d < Dkpe ? static_cast<float>(q_pe[row * Dkpe + d]) * scale : 0.0f;
  }
  float m = -3.0e38f;  // finite stand-in for -inf: exp(m - s) underflows to 0 at the first key
  float l = 0.0f;
  for (int t = first; t < last; ++t) {
    const long long p = kv_indices[t];
    const T* kr = ckv_cache + p * Dckv;
    const T* pr = kpe_cache + p * Dkpe;
    float s = 0.0f;
    for (int c = 0; c < CK; ++c) {
      const int d = lane + 32 * c;
      if (d < Dckv) s = fmaf(qn[c], static_cast<float>(kr[d]), s);
    }
    for (int c = 0; c < CP; ++c) {
      const int d = lane + 32 * c;
      if (d < Dkpe) s = fmaf(qp[c], static_cast<float>(pr[d]), s);
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    const float mnew = fmaxf(m, s);
    const float corr = expf(m - mnew);
    const float e = expf(s - mnew);
    l = fmaf(l, corr, e);
    for (int c = 0; c < CK; ++c) {
      const int d = lane + 32 * c;
      if (d < Dckv) acc[c] = fmaf(acc[c], corr, e * static_cast<float>(kr[d]));
    }
    m = mnew;
  }
  const float inv = 1.0f / l;  // every query sees at least one page (Lkv >= Lq): l >= 1
  for (int c = 0; c < CK; ++c) {
    const int d = lane + 32 * c;
    if (d < Dckv) output[row * Dckv + d] = static_cast<T>(acc[c] * inv);
  }
  if (lane == 0) lse[row] = (m + logf(l)) * 1.4426950408889634f;  // log2(e)
}
