// attention, expert (MLX CUDA): decode (Tq == 1), split-K in two launches; plan.toml says why and how.
// Its own small header, apart from the prefill's attn.cuh: MLX hashes a kernel's whole source at every launch.
namespace ksdec {

constexpr float LOG2E = 1.4426950408889634f;
// A split's partial is one row of the `part` buffer: D unnormalised outputs, then the max m and the sum l
// (one buffer, not three: every MLX output costs an allocation and bookkeeping at each call); 4 floats of
// room keep rows 16-byte aligned.
template <int D> constexpr int part_width() { return D + 4; }

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }
// 2^(x - to), with 2^-inf = 0 (and no NaN when both are -inf).
__device__ __forceinline__ float rescale(float x, float to) { return x == neg_inf() ? 0.0f : exp2f(x - to); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// A lane's 8 consecutive elements as loaded (one 16-byte word of 16-bit T, two of float), to floats.
__device__ __forceinline__ void lane8(const uint4* w, float* f, __half) {
  const __half2* h = reinterpret_cast<const __half2*>(w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __half22float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
__device__ __forceinline__ void lane8(const uint4* w, float* f, __nv_bfloat16) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
__device__ __forceinline__ void lane8(const uint4* w, float* f, float) {
  const float* x = reinterpret_cast<const float*>(w);
#pragma unroll
  for (int e = 0; e < 8; ++e) f[e] = x[e];
}
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

// Pass 1. Block (split, b * Hkv + kvh, head group): keys [split CH, split CH + CH) of one KV head for up to GH
// of the query heads sharing it; key groups of LK = D / 8 lanes (16-byte loads) with their own online softmax,
// U keys per step, merged in shared memory into the split's partial (m, l, unnormalised acc) per head.
template <typename T, int D, int NTD, int CH, int GH, int U, int Hq, int Hkv, int Tk>
__device__ __forceinline__ void decode_split(const T* __restrict__ q, const T* __restrict__ k,
                                             const T* __restrict__ v, float* __restrict__ part) {
  constexpr int LK = D / 8;             // lanes per key
  constexpr int KG = NTD / LK;          // key groups
  constexpr int VEC = 16 / sizeof(T);   // elements per 16 bytes (8 for 16-bit T, 4 for float)
  constexpr int LW = 8 / VEC;           // 16-byte words per lane
  constexpr int G = Hq / Hkv;
  constexpr int NGROUPS = (G + GH - 1) / GH;
  constexpr int NSPLIT = (Tk + CH - 1) / CH;
  constexpr int PW = part_width<D>();
  static_assert(NTD % 32 == 0 && LK <= 32 && 32 % LK == 0, "whole warps; a key's lanes sit in one warp");
  static_assert(KG * GH * (D + 2) * 4 <= 48 * 1024, "static shared memory: NTD * GH too large");
  __shared__ float red_m[KG][GH], red_l[KG][GH];
  __shared__ __align__(16) float red_a[KG][GH][D];

  const int tid = threadIdx.x, lane = tid % LK, kgi = tid / LK;
  const int split = blockIdx.x;
  const int bk = blockIdx.y / NGROUPS, gi = blockIdx.y % NGROUPS;  // bk = b * Hkv + kvh
  const int b = bk / Hkv, kvh = bk % Hkv;
  const float c = rsqrtf((float)D) * LOG2E;

  float qf[GH][8];
#pragma unroll
  for (int gg = 0; gg < GH; ++gg) {
    const int hg = gi * GH + gg;
    const bool ok = hg < G;
    const T* qp = q + ((size_t)b * Hq + kvh * G + (ok ? hg : 0)) * D + lane * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) qf[gg][e] = ok ? to_f(qp[e]) * c : 0.0f;
  }
  const T* kb = k + (size_t)bk * Tk * D + lane * 8;
  const T* vb = v + (size_t)bk * Tk * D + lane * 8;
  const int key0 = split * CH, key1 = min(Tk, key0 + CH);

  float m[GH], l[GH], acc[GH][8];
#pragma unroll
  for (int gg = 0; gg < GH; ++gg) {
    m[gg] = neg_inf();
    l[gg] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[gg][e] = 0.0f;
  }
#pragma unroll 1
  for (int b0 = key0; b0 < key1; b0 += KG * U) {  // same trip count in every lane (shuffles below)
    const int base = b0 + kgi;
    uint4 kr[U][LW], vr[U][LW];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool ok = base + u * KG < key1;
#pragma unroll
      for (int w = 0; w < LW; ++w)
        kr[u][w] = ok ? __ldg(reinterpret_cast<const uint4*>(kb + (size_t)(base + u * KG) * D) + w)
                      : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool ok = base + u * KG < key1;
#pragma unroll
      for (int w = 0; w < LW; ++w)
        vr[u][w] = ok ? __ldg(reinterpret_cast<const uint4*>(vb + (size_t)(base + u * KG) * D) + w)
                      : make_uint4(0, 0, 0, 0);
    }
    float s[U][GH];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      lane8(kr[u], kf, T());
#pragma unroll
      for (int gg = 0; gg < GH; ++gg) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(qf[gg][e], kf[e], d);
#pragma unroll
        for (int sh = LK / 2; sh > 0; sh >>= 1) d += __shfl_xor_sync(0xffffffffu, d, sh);
        s[u][gg] = (base + u * KG < key1) ? d : neg_inf();
      }
    }
#pragma unroll
    for (int gg = 0; gg < GH; ++gg) {
      float mx = m[gg];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[u][gg]);
      const float ms = (mx == neg_inf()) ? 0.0f : mx;
      const float alpha = rescale(m[gg], ms);
      m[gg] = mx;
      l[gg] *= alpha;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[gg][e] *= alpha;
#pragma unroll
      for (int u = 0; u < U; ++u) s[u][gg] = rescale(s[u][gg], ms);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      lane8(vr[u], vf, T());
#pragma unroll
      for (int gg = 0; gg < GH; ++gg) {
        l[gg] += s[u][gg];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[gg][e] = fmaf(s[u][gg], vf[e], acc[gg][e]);
      }
    }
  }

  // Merge the key groups into this split's partial.
  if (lane == 0) {
#pragma unroll
    for (int gg = 0; gg < GH; ++gg) {
      red_m[kgi][gg] = m[gg];
      red_l[kgi][gg] = l[gg];
    }
  }
  __syncthreads();
#pragma unroll
  for (int gg = 0; gg < GH; ++gg) {
    float M = neg_inf();
    for (int i = 0; i < KG; ++i) M = fmaxf(M, red_m[i][gg]);
    const float f = rescale(m[gg], M);
    float4* dst = reinterpret_cast<float4*>(&red_a[kgi][gg][lane * 8]);
    dst[0] = make_float4(acc[gg][0] * f, acc[gg][1] * f, acc[gg][2] * f, acc[gg][3] * f);
    dst[1] = make_float4(acc[gg][4] * f, acc[gg][5] * f, acc[gg][6] * f, acc[gg][7] * f);
  }
  __syncthreads();
  for (int i = tid; i < GH * D; i += NTD) {
    const int gg = i / D, d = i % D, hg = gi * GH + gg;
    if (hg >= G) continue;
    float M = neg_inf();
    for (int r = 0; r < KG; ++r) M = fmaxf(M, red_m[r][gg]);
    float a = 0.0f;
    for (int r = 0; r < KG; ++r) a += red_a[r][gg][d];
    const size_t row = ((size_t)b * Hq + kvh * G + hg) * NSPLIT + split;
    part[row * PW + d] = a;
    if (d == 0) {
      float L = 0.0f;
      for (int r = 0; r < KG; ++r) L += red_l[r][gg] * rescale(red_m[r][gg], M);
      part[row * PW + D] = M;
      part[row * PW + D + 1] = L;
    }
  }
}

// Pass 2. Block b * Hq + h merges the NSPLIT partials of that head into o: D / 4 float4 lanes times
// SG = NTC / (D / 4) split groups, each taking every SG-th split, then the groups meet in shared memory.
template <typename T, int D, int NTC, int NSPLIT>
__device__ __forceinline__ void decode_combine(const float* __restrict__ part, T* __restrict__ o) {
  constexpr int L4 = D / 4, SG = NTC / L4, PW = part_width<D>();
  static_assert(NTC % L4 == 0, "whole split groups");
  __shared__ float gm[SG], gl[SG];
  __shared__ __align__(16) float ga[SG][D];
  const int tid = threadIdx.x, sg = tid / L4, d4 = tid % L4;
  const size_t head = blockIdx.x;
  float m = neg_inf(), l = 0.0f;
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int s = sg; s < NSPLIT; s += SG) {
    const size_t row = head * NSPLIT + s;
    const float ms = part[row * PW + D], ls = part[row * PW + D + 1];
    const float4 x = reinterpret_cast<const float4*>(part + row * PW)[d4];
    const float mn = fmaxf(m, ms), f0 = rescale(m, mn), f1 = rescale(ms, mn);
    m = mn;
    l = l * f0 + ls * f1;
    a = make_float4(a.x * f0 + x.x * f1, a.y * f0 + x.y * f1, a.z * f0 + x.z * f1, a.w * f0 + x.w * f1);
  }
  if (d4 == 0) {
    gm[sg] = m;
    gl[sg] = l;
  }
  *reinterpret_cast<float4*>(&ga[sg][4 * d4]) = a;
  __syncthreads();
  for (int d = tid; d < D; d += NTC) {
    float M = neg_inf();
#pragma unroll
    for (int i = 0; i < SG; ++i) M = fmaxf(M, gm[i]);
    float L = 0.0f, x = 0.0f;
#pragma unroll
    for (int i = 0; i < SG; ++i) {
      const float f = rescale(gm[i], M);
      L += gl[i] * f;
      x += ga[i][d] * f;
    }
    o[head * D + d] = from_f<T>(L > 0.0f ? x / L : 0.0f);
  }
}

}  // namespace ksdec
