// attention, expert (MLX CUDA): decode (Tq == 1), split-K; plan.toml says why and how. Three ways to merge
// the splits: in two launches, each split writes its partial to the `part` buffer and a second launch merges
// them (decode_split here, then decode_combine.cuh); in one launch, a split block that sees every split of its
// KV head signed merges them (decode_last), or the splits of a KV head are the blocks of one thread-block
// cluster and meet in distributed shared memory (decode_cluster). A header apart from the prefill's attn.cuh,
// so that a decode kernel's NVRTC compile reads only decode code.
namespace ksdec {

constexpr float LOG2E = 1.4426950408889634f;
// A split's signature in the one-launch merge (decode_last): two NaNs with payloads no arithmetic produces.
constexpr unsigned long long TAG = 0x7ff1a5c37fb2d4e6ull;
// A split's partial: D unnormalised outputs, then the max m and the sum l (one row of the `part` buffer in
// two launches, a row of the block's shared memory in a cluster); 4 floats of room keep rows 16-byte aligned.
template <int D> __host__ __device__ constexpr int part_width() { return D + 4; }

#if !defined(KSDEC_EMULATED)  // tests/cuda_seeds_cpu runs blocks at once on CPU threads and brings its own
// Shared arrays of the block (a macro so that the CPU emulation can give each block its own).
#define KSDEC_SHARED(type, name, n) __shared__ __align__(16) type name[n]
// The cluster this block belongs to (compile-time dims, see decode_cluster): its size, this block's rank, a
// barrier with release/acquire ordering of shared memory, and the address of `p` in block `rank`'s shared
// memory (generic, so plain loads read it).
__device__ __forceinline__ unsigned cluster_size() {
  unsigned n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ const float* in_block(const float* p, unsigned rank) {
  const float* r;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(p), "r"(rank));
  return r;
}
// A signature of the one-launch merge (decode_last), read and written by several blocks: relaxed, device-wide
// accesses (ordered by the fences around them), which other blocks see without tearing.
__device__ __forceinline__ unsigned long long sig_load(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void sig_store(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
#endif

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }
// 2^(x - to), with 2^-inf = 0 (and no NaN when both are -inf).
__device__ __forceinline__ float rescale(float x, float to) { return x == neg_inf() ? 0.0f : exp2f(x - to); }


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
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// One step's keys for a key group: U keys KG apart from `base`, each lane's 16-byte words of K and of V; keys
// at or past `end` read as zeros (no load issued).
template <typename T, int D, int U, int KG, int LW>
__device__ __forceinline__ void load_step(const T* kb, const T* vb, int base, int end, uint4 (&kr)[U][LW],
                                          uint4 (&vr)[U][LW]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const bool ok = base + u * KG < end;
#pragma unroll
    for (int w = 0; w < LW; ++w) {
      kr[u][w] = ok ? __ldg(reinterpret_cast<const uint4*>(kb + (size_t)(base + u * KG) * D) + w) : make_uint4(0, 0, 0, 0);
      vr[u][w] = ok ? __ldg(reinterpret_cast<const uint4*>(vb + (size_t)(base + u * KG) * D) + w) : make_uint4(0, 0, 0, 0);
    }
  }
}

// A split. Block (split, b * Hkv + kvh, head group) reduces keys of one KV head in [key0, key1) for up to GH of
// the query heads sharing it: steps of STEP keys (the block's width), step i of the range being this split's
// when i % SPREAD == phase (SPREAD = 1: all of them; SPREAD > 1: splits interleaved step by step). Key groups
// of LK = D / 8 lanes (16-byte loads) keep their own online softmax, U keys per step, merged in shared memory
// into the split's partial (m, l, unnormalised acc) of each head, written to row(head, r) (head: the query
// head's index in b * Hq + h; r: its slot in the group).
// This is the float32 path (FMAs on every lane, 4-step shuffle reductions per key and head): on 16-bit T the
// same work runs on tensor cores (decode_split_mma below), whose per-key cost is a fraction of this one's.
template <typename T, int D, int NTD, int GH, int U, int SPREAD, int Hq, int Hkv, int Tk, class Row>
__device__ __forceinline__ void decode_split_fma(const T* __restrict__ q, const T* __restrict__ k,
                                                 const T* __restrict__ v, int key0, int key1, int phase, Row row) {
  constexpr int LK = D / 8;             // lanes per key
  constexpr int KG = NTD / LK;          // key groups
  constexpr int VEC = 16 / sizeof(T);   // elements per 16 bytes (8 for 16-bit T, 4 for float)
  constexpr int LW = 8 / VEC;           // 16-byte words per lane
  constexpr int G = Hq / Hkv;
  constexpr int NGROUPS = (G + GH - 1) / GH;
  static_assert(NTD % 32 == 0 && LK <= 32 && 32 % LK == 0, "whole warps; a key's lanes sit in one warp");
  static_assert(KG * GH * (D + 2) * 4 <= 48 * 1024, "static shared memory: NTD * GH too large");
  KSDEC_SHARED(float, red_m, KG * GH);  // [key group][head]
  KSDEC_SHARED(float, red_l, KG * GH);
  KSDEC_SHARED(float, red_a, KG * GH * D);  // [key group][head][d]

  const int tid = threadIdx.x, lane = tid % LK, kgi = tid / LK;
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

  float m[GH], l[GH], acc[GH][8];
#pragma unroll
  for (int gg = 0; gg < GH; ++gg) {
    m[gg] = neg_inf();
    l[gg] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[gg][e] = 0.0f;
  }
  constexpr int STEP = KG * U;
#pragma unroll 1
  for (int b0 = key0 + phase * STEP; b0 < key1; b0 += STEP * SPREAD) {  // same trip count in every lane (shuffles)
    const int base = b0 + kgi;
    uint4 kr[U][LW], vr[U][LW];
    load_step<T, D, U, KG, LW>(kb, vb, base, key1, kr, vr);
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
      red_m[kgi * GH + gg] = m[gg];
      red_l[kgi * GH + gg] = l[gg];
    }
  }
  __syncthreads();
#pragma unroll
  for (int gg = 0; gg < GH; ++gg) {
    float M = neg_inf();
    for (int i = 0; i < KG; ++i) M = fmaxf(M, red_m[i * GH + gg]);
    const float f = rescale(m[gg], M);
    float4* dst = reinterpret_cast<float4*>(&red_a[(kgi * GH + gg) * D + lane * 8]);
    dst[0] = make_float4(acc[gg][0] * f, acc[gg][1] * f, acc[gg][2] * f, acc[gg][3] * f);
    dst[1] = make_float4(acc[gg][4] * f, acc[gg][5] * f, acc[gg][6] * f, acc[gg][7] * f);
  }
  __syncthreads();
  for (int i = tid; i < GH * D; i += NTD) {
    const int gg = i / D, d = i % D, hg = gi * GH + gg;
    if (hg >= G) continue;
    float M = neg_inf();
    for (int r = 0; r < KG; ++r) M = fmaxf(M, red_m[r * GH + gg]);
    float a = 0.0f;
    for (int r = 0; r < KG; ++r) a += red_a[(r * GH + gg) * D + d];
    float* dst = row(b * Hq + kvh * G + hg, gg);
    dst[d] = a;
    if (d == 0) {
      float L = 0.0f;
      for (int r = 0; r < KG; ++r) L += red_l[r * GH + gg] * rescale(red_m[r * GH + gg], M);
      dst[D] = M;
      dst[D + 1] = L;
    }
  }
}

#if defined(__CUDACC__) || defined(KSDEC_EMULATED_MMA)  // tensor-core code
#if !defined(KSDEC_EMULATED_MMA)  // the CPU emulation (tests/cuda_seeds_cpu) brings its own Mma16, pack2, ex2
// One mma.sync m16n8k16 with fp32 accumulators: c += a (16x16, row) * b (16x8, col).
template <typename T> struct Mma16;
template <> struct Mma16<__half> {
  static __device__ __forceinline__ void run(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                             unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};
template <> struct Mma16<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                             unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};
// Two floats as one register of two 16-bit T (the first in the low half, as the MMA operands want it).
__device__ __forceinline__ unsigned pack2(float a, float b, __half) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ unsigned pack2(float a, float b, __nv_bfloat16) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ float ex2(float x) {  // 2^x, hardware approximation; 2^-inf = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#endif
__device__ __forceinline__ unsigned word(const uint4* w, int i) {  // 32-bit word i of a run of uint4
  const uint4 x = w[i >> 2];
  return (i & 3) == 0 ? x.x : (i & 3) == 1 ? x.y : (i & 3) == 2 ? x.z : x.w;
}

// A split for 16-bit T, on tensor cores. Block and key range as in the float32 path (steps of 16 UC NW keys);
// its NTD / 32 warps each stream their own UC chunks of 16 keys of every step
// with no shared memory and no barrier in the loop; every load of a step is issued before its first use (a
// decode is bound by the bytes in flight: UC = 2 doubles them per warp at the cost of occupancy; PF = 1 issues
// the next step's loads into a second set of registers before computing this one, which took the kernel from
// 26.3 to 20.1 µs under ncu at the 8k decode on the H200, 226 registers and no spills with UC = 1). The GH
// query heads of the group are the rows of one m16 tile (rows past them are zero), so S = Q K^T and
// O += P V are m16n8k16 MMAs straight from registers:
// - The head dimension is permuted (the same way for Q and K, which leaves q . k unchanged) so that lane
//   (g, t4) needs, of every key, only the contiguous D / 4 elements from t4 * D / 4: K arrives as whole 16-byte
//   loads already in B-fragment order, and Q's A fragments are loaded once.
// - For P V, output dim n * ND + j sits in column n of n8 tile j (ND = D / 8 tiles), so lane g needs the
//   contiguous ND elements from g * ND of four keys' V rows; byte permutes pair them into B fragments.
// Online softmax on the S accumulators (a row lives in the 4 lanes of a quad), exp2 with log2(e) / sqrt(D)
// folded in; at the end the warps merge through shared memory into the split's partial (m, l, acc) of each
// head, written to row(head, r) as in the float32 path.
template <typename T, int D, int NTD, int GH, int UC, int PF, int SPREAD, int Hq, int Hkv, int Tk, class Row>
__device__ __forceinline__ void decode_split_mma(const T* __restrict__ q, const T* __restrict__ k,
                                                 const T* __restrict__ v, int key0, int key1, int phase, Row row) {
  constexpr int NW = NTD / 32, G = Hq / Hkv, NGROUPS = (G + GH - 1) / GH;
  constexpr int KD = D / 16;  // k-steps of S
  constexpr int ND = D / 8;   // n8 tiles of O
  constexpr int QW = D / 8;   // 32-bit words of a lane's share of a Q or K row (D / 4 elements)
  constexpr int VU = D / 64;  // 16-byte loads of a lane's share of a V row (ND elements)
  constexpr int SD = D + 1;   // row stride of the merge buffer (fewer bank conflicts)
  static_assert(NTD % 32 == 0 && GH <= 16 && D % 64 == 0, "whole warps, one m16 tile of heads, D of 64 or 128");
  KSDEC_SHARED(float, wm, NW * 16);  // [warp][row]
  KSDEC_SHARED(float, wl, NW * 16);
  KSDEC_SHARED(float, sa, GH * SD);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int bk = blockIdx.y / NGROUPS, gi = blockIdx.y % NGROUPS;  // bk = b * Hkv + kvh
  const int b = bk / Hkv, kvh = bk % Hkv;
  const float c = rsqrtf((float)D) * LOG2E;

  // Q rows g and g + 8 (heads gi * GH + row of this KV head; zero past GH or G): words t4 * QW + 2 kd (+1).
  unsigned qa[KD][4];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = g + 8 * hr, hg = gi * GH + r;
    const bool ok = r < GH && hg < G;
    const uint4* qp = reinterpret_cast<const uint4*>(q + ((size_t)b * Hq + kvh * G + (ok ? hg : 0)) * D) + t4 * (QW / 4);
    uint4 w[QW / 4];
#pragma unroll
    for (int i = 0; i < QW / 4; ++i) w[i] = ok ? qp[i] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      qa[kd][hr] = word(w, 2 * kd);
      qa[kd][2 + hr] = word(w, 2 * kd + 1);
    }
  }
  const T* kb = k + (size_t)bk * Tk * D;
  const T* vb = v + (size_t)bk * Tk * D;

  float acc[ND][4], mrow[2] = {neg_inf(), neg_inf()}, lrow[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < ND; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;

  // A warp's step: UC chunks of 16 keys from n00. `load` issues every load of a step (keys at or past key1 read
  // as zeros, no load issued); `step` consumes them. K: keys n0 + g and n0 + 8 + g, the lane's QW words;
  // V: keys n0 + 2 t4 + {0, 1, 8, 9}, ND elements from g ND.
  using KW = uint4[UC][2][QW / 4];
  using VW = uint4[UC][4][VU];
  auto load = [&](int n00, KW& kw, VW& vw) {
#pragma unroll
    for (int uc = 0; uc < UC; ++uc) {
      const int n0 = n00 + 16 * uc;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int key = n0 + 8 * nt + g;
        const uint4* kp = reinterpret_cast<const uint4*>(kb + (size_t)key * D) + t4 * (QW / 4);
#pragma unroll
        for (int i = 0; i < QW / 4; ++i) kw[uc][nt][i] = key < key1 ? __ldg(kp + i) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int kr = 0; kr < 4; ++kr) {
        const int key = n0 + 2 * t4 + (kr & 1) + 8 * (kr >> 1);
        const uint4* vp = reinterpret_cast<const uint4*>(vb + (size_t)key * D + g * ND);
#pragma unroll
        for (int i = 0; i < VU; ++i) vw[uc][kr][i] = key < key1 ? __ldg(vp + i) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto step = [&](int n00, const KW& kw, const VW& vw) {
#pragma unroll
    for (int uc = 0; uc < UC; ++uc) {
      const int n0 = n00 + 16 * uc;
      // S = Q K^T for the 16 keys (two n8 tiles).
      float s[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
        for (int kd = 0; kd < KD; ++kd)
          Mma16<T>::run(s[nt], qa[kd][0], qa[kd][1], qa[kd][2], qa[kd][3], word(kw[uc][nt], 2 * kd),
                        word(kw[uc][nt], 2 * kd + 1));
      }
      if (n0 + 16 > key1) {  // the split's last, partial (or empty) chunk
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (n0 + 8 * nt + 2 * t4 + (e & 1) >= key1) s[nt][e] = neg_inf();
      }
      // Online softmax, rows g (e = 0, 1) and g + 8 (e = 2, 3).
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = fmaxf(mrow[hr], fmaxf(fmaxf(s[0][2 * hr], s[0][2 * hr + 1]), fmaxf(s[1][2 * hr], s[1][2 * hr + 1])));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float ms = (mx == neg_inf()) ? 0.0f : mx * c;
        const float alpha = ex2(mrow[hr] * c - ms);
        mrow[hr] = mx;
        float ls = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
            s[nt][e] = ex2(fmaf(s[nt][e], c, -ms));
            ls += s[nt][e];
          }
        lrow[hr] = lrow[hr] * alpha + ls;
#pragma unroll
        for (int j = 0; j < ND; ++j) {
          acc[j][2 * hr] *= alpha;
          acc[j][2 * hr + 1] *= alpha;
        }
      }
      // O += P V: P (rows x 16 keys) as the A operand, V pairs of keys (2 t4, 2 t4 + 1) and (+8, +9) per column.
      const unsigned p0 = pack2(s[0][0], s[0][1], T()), p1 = pack2(s[0][2], s[0][3], T());
      const unsigned p2 = pack2(s[1][0], s[1][1], T()), p3 = pack2(s[1][2], s[1][3], T());
#pragma unroll
      for (int j = 0; j < ND; ++j) {
        const unsigned sel = (j & 1) ? 0x7632u : 0x5410u;  // the high or the low halves of two words
        const unsigned b0 = __byte_perm(word(vw[uc][0], j >> 1), word(vw[uc][1], j >> 1), sel);
        const unsigned b1 = __byte_perm(word(vw[uc][2], j >> 1), word(vw[uc][3], j >> 1), sel);
        Mma16<T>::run(acc[j], p0, p1, p2, p3, b0, b1);
      }
    }
  };
  constexpr int STRIDE = 16 * UC * NW * SPREAD;  // keys from one of a warp's steps to its next
  const int first = key0 + 16 * UC * (warp + NW * phase);
  if constexpr (PF == 0) {
#pragma unroll 1
    for (int n00 = first; n00 < key1; n00 += STRIDE) {
      KW kw;
      VW vw;
      load(n00, kw, vw);
      step(n00, kw, vw);
    }
  } else {  // two sets of registers: a step's loads are in flight while the step before computes
    KW kA, kB;
    VW vA, vB;
    load(first, kA, vA);
#pragma unroll 1
    for (int n00 = first; n00 < key1; n00 += 2 * STRIDE) {
      load(n00 + STRIDE, kB, vB);
      step(n00, kA, vA);
      if (n00 + STRIDE >= key1) break;
      load(n00 + 2 * STRIDE, kA, vA);
      step(n00 + STRIDE, kB, vB);
    }
  }

  // Merge the warps: the row max over warps, then each warp in turn adds its rescaled accumulator.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    lrow[hr] += __shfl_xor_sync(0xffffffffu, lrow[hr], 1);
    lrow[hr] += __shfl_xor_sync(0xffffffffu, lrow[hr], 2);
    if (t4 == 0) {
      wm[warp * 16 + g + 8 * hr] = mrow[hr] * c;  // scaled units, as the partials keep them (-inf stays -inf)
      wl[warp * 16 + g + 8 * hr] = lrow[hr];
    }
  }
  __syncthreads();
  float f[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float M = neg_inf();
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, wm[w * 16 + g + 8 * hr]);
    f[hr] = rescale(wm[warp * 16 + g + 8 * hr], M);
  }
#pragma unroll 1
  for (int w = 0; w < NW; ++w) {
    if (warp == w) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = g + 8 * hr;
        if (r >= GH) continue;
#pragma unroll
        for (int j = 0; j < ND; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& dst = sa[r * SD + (2 * t4 + e) * ND + j];
            dst = (w == 0 ? 0.0f : dst) + acc[j][2 * hr + e] * f[hr];
          }
      }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < GH * D; i += NTD) {
    const int r = i / D, d = i % D, hg = gi * GH + r;
    if (hg >= G) continue;
    float* dst = row(b * Hq + kvh * G + hg, r);
    dst[d] = sa[r * SD + d];
    if (d == 0) {
      float M = neg_inf(), L = 0.0f;
      for (int w = 0; w < NW; ++w) M = fmaxf(M, wm[w * 16 + r]);
      for (int w = 0; w < NW; ++w) L += wl[w * 16 + r] * rescale(wm[w * 16 + r], M);
      dst[D] = M;
      dst[D + 1] = L;
    }
  }
}
#endif

// A split, on tensor cores for 16-bit T, on FMAs for float32.
template <typename T, int D, int NTD, int GH, int U, int UC, int PF, int SPREAD, int Hq, int Hkv, int Tk, class Row>
__device__ __forceinline__ void split_pass(const T* __restrict__ q, const T* __restrict__ k,
                                           const T* __restrict__ v, int key0, int key1, int phase, Row row) {
#if defined(__CUDACC__) || defined(KSDEC_EMULATED_MMA)
  if constexpr (sizeof(T) == 2)
    decode_split_mma<T, D, NTD, GH, UC, PF, SPREAD, Hq, Hkv, Tk>(q, k, v, key0, key1, phase, row);
  else
#endif
    decode_split_fma<T, D, NTD, GH, U, SPREAD, Hq, Hkv, Tk>(q, k, v, key0, key1, phase, row);
}

// Two launches, pass 1: grid (NTD * NSPLIT, B * Hkv * head groups); split s of query head h is row
// h * NSPLIT + s of `part` (pass 2: decode_combine.cuh).
template <typename T, int D, int NTD, int CH, int GH, int U, int UC, int PF, int Hq, int Hkv, int Tk>
__device__ __forceinline__ void decode_split(const T* __restrict__ q, const T* __restrict__ k,
                                             const T* __restrict__ v, float* __restrict__ part) {
  constexpr int NSPLIT = (Tk + CH - 1) / CH, PW = part_width<D>();
  const int split = blockIdx.x;
  split_pass<T, D, NTD, GH, U, UC, PF, 1, Hq, Hkv, Tk>(q, k, v, split * CH, min(Tk, split * CH + CH), 0,
                                                   [&](int head, int) { return part + ((size_t)head * NSPLIT + split) * PW; });
}

// One launch without clusters (LM = 1): the split pass above, then each block signs its partial (TAG, in the
// padding of its first head's row, after the partials) and reads the other splits' signatures; a block that
// sees all NSPLIT of its (KV head, head group) wipes them and merges the partials into o. No counters: MLX runs
// independent calls at once, so counters in module globals were shared between calls and lost outputs, and
// counters in an output need zeroing, which MLX's init_value does for every output of the launch with a kernel
// each (measured slower than a second launch). (A per-call random tag from the host was tried: MLX keeps
// host-made arrays in managed memory, and reading one added about 14 µs to the kernel under ncu.)
// Order: the block's threads write their partials; a barrier; lane 0 fences (fence.sc: a release of what the
// barrier showed it), signs, fences again; warp 0 reads the signatures, and a block that saw them all fences
// (acquire) before its threads read the partials, through L2 (__ldcg; L1 is not coherent between blocks). Of
// any two blocks the one whose second fence comes later sees the other's signature, so the last to sign sees
// them all; a block that read a wiped signature missed it only because another block saw them all and merges.
// Blocks that both merge write the same bits (the same partials in the same order).
// What the signature assumes: that a call runs all its splits (a kernel that stops midway ends the process's
// CUDA context with it), and that no other data holds exactly TAG where a split's signature lies: two NaN
// payloads that no arithmetic produces, so only data written with that bit pattern on purpose (or random bits,
// at odds of 2^-64 per signature) could.
template <typename T, int D, int NTD, int CH, int GH, int U, int UC, int PF, int Hq, int Hkv, int Tk>
__device__ __forceinline__ void decode_last(const T* __restrict__ q, const T* __restrict__ k,
                                            const T* __restrict__ v, T* __restrict__ o,
                                            float* __restrict__ part) {
  constexpr int NSPLIT = (Tk + CH - 1) / CH, PW = part_width<D>();
  constexpr int G = Hq / Hkv, NGROUPS = (G + GH - 1) / GH;
  constexpr int L4 = D / 4, SLOTS = NTD / L4;  // lanes per head, heads merged at once
  static_assert(NTD % L4 == 0 && L4 <= 32 && 32 % L4 == 0, "whole heads per warp");
  decode_split<T, D, NTD, CH, GH, U, UC, PF, Hq, Hkv, Tk>(q, k, v, part);
  KSDEC_SHARED(unsigned, all, 1);
  const int bk = blockIdx.y / NGROUPS, gi = blockIdx.y % NGROUPS;
  const int b = bk / Hkv, kvh = bk % Hkv;
  // The signature of split s sits at D + 2 of row (first head of the group, s): 8-byte aligned (rows are 16).
  unsigned long long* tags = reinterpret_cast<unsigned long long*>(
      part + ((size_t)b * Hq + kvh * G + gi * GH) * NSPLIT * PW + D + 2);
  __syncthreads();
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) {
      __threadfence();
      sig_store(tags + (size_t)blockIdx.x * (PW / 2), TAG);
      __threadfence();
    }
    __syncwarp();  // lane 0's store and fences come before any lane's reads
    bool seen = true;
    for (int s = threadIdx.x; s < NSPLIT; s += 32) seen &= sig_load(tags + (size_t)s * (PW / 2)) == TAG;
    seen = __all_sync(0xffffffffu, seen);
    if (seen) {  // every split has signed: wipe the signatures, so that no later user of the memory meets them
      for (int s = threadIdx.x; s < NSPLIT; s += 32) sig_store(tags + (size_t)s * (PW / 2), 0ull);
      __threadfence();
    }
    if (threadIdx.x == 0) all[0] = seen;
  }
  __syncthreads();
  if (!all[0]) return;
  const int slot = threadIdx.x / L4, d4 = threadIdx.x % L4;
  for (int r0 = 0; r0 < GH; r0 += SLOTS) {  // the same trip count in every lane (shuffles below)
    const int r = r0 + slot, hg = gi * GH + r;
    const bool active = r < GH && hg < G;
    const float* hp = part + ((size_t)b * Hq + kvh * G + (active ? hg : 0)) * NSPLIT * PW;
    float M = neg_inf();
    if (active)
      for (int s = d4; s < NSPLIT; s += L4) M = fmaxf(M, __ldcg(hp + s * PW + D));
#pragma unroll
    for (int sh = L4 / 2; sh > 0; sh >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, sh));
    if (!active) continue;
    float l = 0.0f;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
    for (int s = 0; s < NSPLIT; ++s) {
      const float w = rescale(__ldcg(hp + s * PW + D), M);
      const float4 x = __ldcg(reinterpret_cast<const float4*>(hp + s * PW) + d4);
      l = fmaf(w, __ldcg(hp + s * PW + D + 1), l);
      a = make_float4(fmaf(w, x.x, a.x), fmaf(w, x.y, a.y), fmaf(w, x.z, a.z), fmaf(w, x.w, a.w));
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* dst = o + ((size_t)b * Hq + kvh * G + hg) * D + 4 * d4;
    dst[0] = from_f<T>(a.x * inv);
    dst[1] = from_f<T>(a.y * inv);
    dst[2] = from_f<T>(a.z * inv);
    dst[3] = from_f<T>(a.w * inv);
  }
}

// One launch: grid (NTD * NC, B * Hkv * head groups) in clusters of (NC, 1, 1) blocks, so the NC splits of
// a (KV head, head group) share a cluster; each split takes CH = ceil(Tk / NC) consecutive keys (rounded up to
// 16), or with IL every NC-th step of the block's width (the cluster then streams one region of K and V
// together rather than NC regions far apart), and keeps its partials in its own shared memory. After a cluster barrier, the cluster's GH * D outputs are
// spread over its NC * NTD threads: each reads the NC maxima, sums and values of its element from the
// blocks' shared memory (distributed shared memory), weighs them against the largest max and writes o; a
// second barrier keeps every block's shared memory alive until the others have read it. No buffer, no
// counter and no second launch: MLX charges every launch and output (see plan.toml). The cluster dims
// are compile-time (`__cluster_dims__`, declared by the plan's `cluster` field): a launch that is not in
// clusters of NC blocks traps rather than merge the wrong blocks.
template <typename T, int D, int NTD, int NC, int IL, int GH, int U, int UC, int PF, int Hq, int Hkv, int Tk>
__device__ __forceinline__ void decode_cluster(const T* __restrict__ q, const T* __restrict__ k,
                                               const T* __restrict__ v, T* __restrict__ o) {
  constexpr int CH = ((Tk + NC - 1) / NC + 15) / 16 * 16, PW = part_width<D>();
  constexpr int G = Hq / Hkv, NGROUPS = (G + GH - 1) / GH;
  static_assert(NC >= 1 && NC <= 8, "a portable cluster has at most 8 blocks");
  KSDEC_SHARED(float, cp, GH * PW);  // this split's partial of each head of the group
  if (cluster_size() != NC) __trap();
  const int split = blockIdx.x;
  auto mine = [&](int, int r) { return cp + r * PW; };
  if constexpr (IL)
    split_pass<T, D, NTD, GH, U, UC, PF, NC, Hq, Hkv, Tk>(q, k, v, 0, Tk, split, mine);
  else
    split_pass<T, D, NTD, GH, U, UC, PF, 1, Hq, Hkv, Tk>(q, k, v, split * CH, min(Tk, split * CH + CH), 0, mine);
  cluster_sync();
  const int bk = blockIdx.y / NGROUPS, gi = blockIdx.y % NGROUPS;
  const int b = bk / Hkv, kvh = bk % Hkv;
  for (int i = cluster_rank() * NTD + threadIdx.x; i < GH * D; i += NC * NTD) {
    const int r = i / D, d = i % D, hg = gi * GH + r;
    if (hg >= G) continue;
    float m[NC], M = neg_inf();
#pragma unroll
    for (int s = 0; s < NC; ++s) {
      m[s] = in_block(cp + r * PW, s)[D];
      M = fmaxf(M, m[s]);
    }
    float L = 0.0f, a = 0.0f;
#pragma unroll
    for (int s = 0; s < NC; ++s) {
      const float* p = in_block(cp + r * PW, s);
      const float w = rescale(m[s], M);
      L = fmaf(w, p[D + 1], L);
      a = fmaf(w, p[d], a);
    }
    o[((size_t)b * Hq + kvh * G + hg) * D + d] = from_f<T>(L > 0.0f ? a / L : 0.0f);
  }
  cluster_sync();
}

}  // namespace ksdec
