// mla-paged-decode, naive: one warp per output row (b, h). The row walks its sequence's pages
// t = kv_indptr[b] .. kv_indptr[b + 1] - 1 in order (page p = kv_indices[t] holds one token's compressed row
// ckv_cache[p] and rope row kpe_cache[p]) with an online softmax over
//   s_t = (q_nope[b, h] . ckv_cache[p] + q_pe[b, h] . kpe_cache[p]) / sqrt(128 + 64)
// (the absorbed form: the compressed row is both key and value): m = running max, l = running sum of
// exp(s - m), acc = running sum of exp(s - m) * ckv_cache[p]; output = acc / l, lse = log2(sum exp(s)).
// Lane `lane` owns the elements lane + 32 c of the compressed width (c < Dckv / 32 <= 16) and of the rope
// width (c < Dkpe / 32 <= 2); a score is a warp all-reduce. Every one of the H heads reads the same rows
// again (through L2), one dependent gather per key: simple, far from the memory roofline.
// Layouts (row-major): q_nope, output (B, H, Dckv); q_pe (B, H, Dkpe); ckv_cache (P, 1, Dckv); kpe_cache
// (P, 1, Dkpe) in T (__half or __nv_bfloat16); lse (B, H) float; kv_indptr (B + 1), kv_indices (N) int32.
template <typename T>
__global__ void mla_decode_naive(const T* q_nope, const T* q_pe, const T* ckv_cache, const T* kpe_cache,
                                 const int* kv_indptr, const int* kv_indices, T* output, float* lse, int B, int H,
                                 int Dckv, int Dkpe) {
  constexpr int CK = 16, CP = 2;  // Dckv <= 32 CK, Dkpe <= 32 CP (the plan's constraints)
  const long long rows = (long long)B * H;
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;  // b * H + h
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together: blockDim.x is a multiple of 32

  const long long b = row / H;
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
  for (int t = kv_indptr[b]; t < kv_indptr[b + 1]; ++t) {
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
  const float inv = 1.0f / l;  // l >= 1 for a sequence of at least one page: its maximum contributes exp(0)
  for (int c = 0; c < CK; ++c) {
    const int d = lane + 32 * c;
    if (d < Dckv) output[row * Dckv + d] = static_cast<T>(acc[c] * inv);
  }
  if (lane == 0) lse[row] = (m + logf(l)) * 1.4426950408889634f;  // log2(e)
}
