// attention, expert (MLX CUDA): decode (Tq == 1), pass 2 of 2: the splits' partials merged into o. Pass 1 and
// the layout of the partials are in decode.cuh (this header is kept apart and small: MLX copies and hashes
// a kernel's whole source at every launch).
namespace ksdecm {

// A split's partial: D unnormalised outputs, its max m (log2 units) and sum l, padded to D + 4 floats.
template <int D> __host__ __device__ constexpr int part_width() { return D + 4; }
__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }
// 2^(x - to), with 2^-inf = 0.
__device__ __forceinline__ float rescale(float x, float to) { return x == neg_inf() ? 0.0f : exp2f(x - to); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Block b * Hq + h merges the NSPLIT partials of that head into o. Each warp first finds the head's
// max M over the splits (lanes read a split's max each, then a warp reduction); then D / 4 float4 lanes times
// SG = NTC / (D / 4) split groups sum their splits weighted by 2^(m - M): independent terms, every load in
// flight at once (the loop is unrolled), no running rescale; the groups meet in shared memory. The combine
// is latency-bound (one block per head), so rounds of loads are what it costs.
template <typename T, int D, int NTC, int NSPLIT>
__device__ __forceinline__ void decode_combine(const float* __restrict__ part, T* __restrict__ o) {
  constexpr int L4 = D / 4, SG = NTC / L4, PW = part_width<D>();
  static_assert(NTC % L4 == 0, "whole split groups");
  __shared__ float gl[SG];
  __shared__ __align__(16) float ga[SG][D];
  const int tid = threadIdx.x, sg = tid / L4, d4 = tid % L4;
  const size_t head = blockIdx.x;
  const float* hp = part + head * NSPLIT * PW;
  constexpr int PER = (NSPLIT + SG - 1) / SG;  // splits per group
  float M = neg_inf();
  for (int s = threadIdx.x & 31; s < NSPLIT; s += 32) M = fmaxf(M, hp[s * PW + D]);
#pragma unroll
  for (int sh = 16; sh > 0; sh >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, sh));
  float l = 0.0f;
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int s = sg + i * SG;
    if (s < NSPLIT) {
      const float w = rescale(hp[s * PW + D], M);
      const float4 x = reinterpret_cast<const float4*>(hp + s * PW)[d4];
      l = fmaf(w, hp[s * PW + D + 1], l);
      a = make_float4(fmaf(w, x.x, a.x), fmaf(w, x.y, a.y), fmaf(w, x.z, a.z), fmaf(w, x.w, a.w));
    }
  }
  if (d4 == 0) gl[sg] = l;
  *reinterpret_cast<float4*>(&ga[sg][4 * d4]) = a;
  __syncthreads();
  for (int d = tid; d < D; d += NTC) {
    float L = 0.0f, x = 0.0f;
#pragma unroll
    for (int i = 0; i < SG; ++i) {
      L += gl[i];
      x += ga[i][d];
    }
    o[head * D + d] = from_f<T>(L > 0.0f ? x / L : 0.0f);
  }
}

}  // namespace ksdecm
