// attention, expert (MLX CUDA): the prefill launch's device code (the decode has its own header, decode.cuh).
//
// Conventions. q (B, Hq, Tq, D), k and v (B, Hkv, Tk, D), o (B, Hq, Tq, D), row-major, in T (__half,
// __nv_bfloat16 or float). Query head h reads key/value head h / (Hq / Hkv). Causal: query row i sees keys
// j <= i + (Tk - Tq). Scores are kept in raw units; the softmax uses exp2 with log2(e) / sqrt(D) folded into
// one multiply-add: p = 2^(s * c - m * c), so no exp and no separate scaling pass.
namespace ksattn {

#define KSATTN_LOG2E 1.4426950408889634f
__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// The PTX-level primitives the float32 path runs on (2^x, TF32 rounding, the TF32 MMA) come from the including
// file instead where it defines KSATTN_HOST_PRIMITIVES: the CPU emulation of this code (tests/cuda_seeds_cpu).
#ifndef KSATTN_HOST_PRIMITIVES
// 2^x with the hardware approximation (relative error ~2^-22; 2^-inf = +0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#endif

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Two floats as one 32-bit register of two 16-bit T (the low half is the first).
__device__ __forceinline__ unsigned pack2(float a, float b, __half) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ unsigned pack2(float a, float b, __nv_bfloat16) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}

// ---------------------------------------------------------------------------------------------------------
// Tensor-core primitives (sm_80+): one m16n8k16 MMA with fp32 accumulators, ldmatrix, cp.async.
template <typename T> struct Mma;
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// 16 bytes global -> shared, asynchronously; with ok == false the 16 bytes are zero-filled (nothing is read).
__device__ __forceinline__ void cp16(unsigned dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Shared tiles of rows of D 16-bit elements (DC = D / 8 chunks of 16 bytes). Chunk c of row r is stored at
// chunk c ^ (r & 7): the 8 rows one ldmatrix reads (same logical chunk) fall in 8 different bank groups.
template <int D> __device__ __forceinline__ int swz(int r, int c) { return r * D + ((c ^ (r & 7)) << 3); }

// ---------------------------------------------------------------------------------------------------------
// Prefill, fp16 / bf16: FlashAttention-2 style on mma.sync.
// Block = NW warps = BQ = 16 * WM * NW query rows of one (b, h); warp w owns rows [16 WM w, 16 WM (w + 1)).
// Key tiles of BK rows of K and V are double-buffered in shared memory (cp.async, prefetch of tile j + 1
// while tile j is used). Per tile: S = Q K^T (A = Q via ldmatrix, B = K via ldmatrix), online softmax on the
// accumulators in registers (a row lives in the 4 lanes of a quad), P re-packed in registers as the A
// operand of O += P V (B = V via ldmatrix.trans). Causal: tiles past the block's last visible key are never
// loaded; only tiles that cross the diagonal (or the end of Tk) are masked.
// Shared memory: (BQ + 4 BK) * D * 2 bytes (Q, then K[2], V[2]); the Q tile is reused to stage O.
template <typename T, int D, int NW, int WM, int BK>
__device__ __forceinline__ void prefill_mma(const T* __restrict__ q, const T* __restrict__ k,
                                            const T* __restrict__ v, T* __restrict__ o, int Hq, int Hkv,
                                            int Tq, int Tk, int causal, unsigned char* smem) {
  constexpr int BQ = 16 * WM * NW;
  constexpr int NT = 32 * NW;
  constexpr int DC = D / 8;   // 16-byte chunks per row
  constexpr int KD = D / 16;  // k-steps of S = Q K^T
  constexpr int NS = BK / 8;  // n8 tiles of S
  constexpr int ND = D / 8;   // n8 tiles of O
  static_assert(BK % 16 == 0 && D % 16 == 0, "tile shapes");
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + BQ * D;
  T* sV = sK + 2 * BK * D;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int bh = blockIdx.x;
  const int b = bh / Hq, h = bh % Hq, kvh = h / (Hq / Hkv);
  const int qt = gridDim.y - 1 - blockIdx.y;  // heaviest (causal) tiles first
  const int q0 = qt * BQ;
  const int off = Tk - Tq;
  const T* qg = q + ((size_t)bh * Tq + q0) * D;
  const T* kg = k + (size_t)(b * Hkv + kvh) * Tk * D;
  const T* vg = v + (size_t)(b * Hkv + kvh) * Tk * D;
  T* og = o + ((size_t)bh * Tq + q0) * D;

  const int kend = causal ? min(Tk, q0 + BQ + off) : Tk;  // keys past kend are seen by no row of the block
  const int ntiles = (kend + BK - 1) / BK;
  const float c = rsqrtf((float)D) * KSATTN_LOG2E;

  // Q tile (rows past Tq are zero).
  for (int i = tid; i < BQ * DC; i += NT) {
    const int r = i / DC, ch = i % DC;
    const bool ok = q0 + r < Tq;
    cp16(smem_u32(sQ + swz<D>(r, ch)), ok ? (const void*)(qg + (size_t)r * D + ch * 8) : (const void*)qg, ok);
  }
  auto load_kv = [&](int j, int st) {
    const int n0 = j * BK;
    T* dk = sK + st * BK * D;
    T* dv = sV + st * BK * D;
    for (int i = tid; i < BK * DC; i += NT) {
      const int r = i / DC, ch = i % DC;
      const bool ok = n0 + r < Tk;
      const size_t go = ok ? (size_t)(n0 + r) * D + ch * 8 : 0;
      cp16(smem_u32(dk + swz<D>(r, ch)), kg + go, ok);
      cp16(smem_u32(dv + swz<D>(r, ch)), vg + go, ok);
    }
  };
  if (ntiles > 0) load_kv(0, 0);
  cp_commit();

  const int wr0 = warp * 16 * WM;  // the warp's first row in the tile
  float acc[WM][ND][4];
  float mrow[WM][2], lrow[WM][2];
#pragma unroll
  for (int wm = 0; wm < WM; ++wm) {
#pragma unroll
    for (int n = 0; n < ND; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[wm][n][e] = 0.0f;
    mrow[wm][0] = mrow[wm][1] = neg_inf();
    lrow[wm][0] = lrow[wm][1] = 0.0f;
  }

  // ldmatrix addresses. Every row an ldmatrix lane addresses has (row & 7) == (lane & 7), so with the swizzle the
  // byte offset of logical chunk 2 i + c0 within a row is ((i << 5) ^ (x << 4)) with x = c0 ^ (lane & 7): one
  // per-lane constant per operand, the rest immediates.
  const unsigned xa = (((lane >> 4) ^ (lane & 7)) << 4);        // Q (A operand) and V (.trans): c0 = lane >> 4
  const unsigned xk = ((((lane >> 3) & 1) ^ (lane & 7)) << 4);  // K: c0 = (lane >> 3) & 1
  const unsigned qbase = smem_u32(sQ) + (wr0 + (lane & 15)) * (D * 2);
  const unsigned kbase0 = smem_u32(sK) + ((lane & 7) + ((lane >> 4) << 3)) * (D * 2);
  const unsigned vbase0 = smem_u32(sV) + ((lane & 7) + (((lane >> 3) & 1) << 3)) * (D * 2);

#pragma unroll 1
  for (int j = 0; j < ntiles; ++j) {
    cp_wait<0>();     // tile j (and, at j = 0, Q) has landed for this thread
    __syncthreads();  // ... for every thread, and every warp is done with tile j - 1, whose buffers are refilled now
    if (j + 1 < ntiles) load_kv(j + 1, (j + 1) & 1);
    cp_commit();
    const unsigned kbase = kbase0 + (j & 1) * (BK * D * 2);
    const unsigned vbase = vbase0 + (j & 1) * (BK * D * 2);
    const int n0 = j * BK;

    // S = Q K^T
    float s[WM][NS][4];
#pragma unroll
    for (int wm = 0; wm < WM; ++wm)
#pragma unroll
      for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[wm][n][e] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      unsigned a[WM][4];
      const unsigned qo = qbase + (((unsigned)kd << 5) ^ xa);
#pragma unroll
      for (int wm = 0; wm < WM; ++wm) ldsm_x4(a[wm], qo + wm * 16 * (D * 2));
      const unsigned ko = kbase + (((unsigned)kd << 5) ^ xk);
#pragma unroll
      for (int np = 0; np < NS / 2; ++np) {
        unsigned bb[4];
        ldsm_x4(bb, ko + np * 16 * (D * 2));
#pragma unroll
        for (int wm = 0; wm < WM; ++wm) {
          Mma<T>::run(s[wm][2 * np], a[wm], bb[0], bb[1]);
          Mma<T>::run(s[wm][2 * np + 1], a[wm], bb[2], bb[3]);
        }
      }
    }

    // Mask (only tiles that cross the end of Tk or, causal, the warp's diagonal).
    const bool need_mask = (n0 + BK > Tk) || (causal && n0 + BK - 1 > q0 + wr0 + off);
    if (need_mask) {
#pragma unroll
      for (int wm = 0; wm < WM; ++wm)
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + n * 8 + 2 * t4 + (e & 1);
            const int row = q0 + wr0 + wm * 16 + g + ((e >> 1) << 3);
            if (key >= Tk || (causal && key > row + off)) s[wm][n][e] = neg_inf();
          }
    }

    // Online softmax: rows g (e = 0, 1) and g + 8 (e = 2, 3) of each m16 tile.
    float alpha[WM][2];
#pragma unroll
    for (int wm = 0; wm < WM; ++wm) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = mrow[wm][hr];
#pragma unroll
        for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[wm][n][2 * hr], s[wm][n][2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float ms = (mx == neg_inf()) ? 0.0f : mx * c;
        alpha[wm][hr] = ex2(mrow[wm][hr] * c - ms);
        mrow[wm][hr] = mx;
        float ls = 0.0f;
#pragma unroll
        for (int n = 0; n < NS; ++n) {
          const float p0 = ex2(fmaf(s[wm][n][2 * hr], c, -ms));
          const float p1 = ex2(fmaf(s[wm][n][2 * hr + 1], c, -ms));
          s[wm][n][2 * hr] = p0;
          s[wm][n][2 * hr + 1] = p1;
          ls += p0 + p1;
        }
        lrow[wm][hr] = lrow[wm][hr] * alpha[wm][hr] + ls;
      }
    }
    // Rescale O only when some row of the warp raised its max (later tiles rarely do).
    bool moved = false;
#pragma unroll
    for (int wm = 0; wm < WM; ++wm) moved |= (alpha[wm][0] != 1.0f) | (alpha[wm][1] != 1.0f);
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int wm = 0; wm < WM; ++wm)
#pragma unroll
        for (int n = 0; n < ND; ++n) {
          acc[wm][n][0] *= alpha[wm][0];
          acc[wm][n][1] *= alpha[wm][0];
          acc[wm][n][2] *= alpha[wm][1];
          acc[wm][n][3] *= alpha[wm][1];
        }
    }

    // O += P V
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned pa[WM][4];
#pragma unroll
      for (int wm = 0; wm < WM; ++wm) {
        pa[wm][0] = pack2(s[wm][2 * kk][0], s[wm][2 * kk][1], T());
        pa[wm][1] = pack2(s[wm][2 * kk][2], s[wm][2 * kk][3], T());
        pa[wm][2] = pack2(s[wm][2 * kk + 1][0], s[wm][2 * kk + 1][1], T());
        pa[wm][3] = pack2(s[wm][2 * kk + 1][2], s[wm][2 * kk + 1][3], T());
      }
#pragma unroll
      for (int dp = 0; dp < ND / 2; ++dp) {
        unsigned bb[4];
        ldsm_x4_t(bb, vbase + kk * 16 * (D * 2) + (((unsigned)dp << 5) ^ xa));
#pragma unroll
        for (int wm = 0; wm < WM; ++wm) {
          Mma<T>::run(acc[wm][2 * dp], pa[wm], bb[0], bb[1]);
          Mma<T>::run(acc[wm][2 * dp + 1], pa[wm], bb[2], bb[3]);
        }
      }
    }
  }
  cp_wait<0>();

  // Epilogue: O / l in T, staged in the warp's own rows of the Q tile, then 16-byte coalesced stores.
#pragma unroll
  for (int wm = 0; wm < WM; ++wm) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = lrow[wm][hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int r = wr0 + wm * 16 + g + 8 * hr;
#pragma unroll
      for (int n = 0; n < ND; ++n) {
        const unsigned w = pack2(acc[wm][n][2 * hr] * inv, acc[wm][n][2 * hr + 1] * inv, T());
        *reinterpret_cast<unsigned*>(sQ + swz<D>(r, n) + 2 * t4) = w;
      }
    }
  }
  __syncwarp();
  for (int i = lane; i < 16 * WM * DC; i += 32) {
    const int r = wr0 + i / DC, ch = i % DC;
    if (q0 + r < Tq)
      *reinterpret_cast<uint4*>(og + (size_t)r * D + ch * 8) = *reinterpret_cast<const uint4*>(sQ + swz<D>(r, ch));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Prefill, float32: the fp16 path's FlashAttention-2 on TF32 tensor cores with error compensation (3xTF32).
// Each float x is split into hi = tf32(x) and lo = tf32(x - hi), and a product a b is taken as
// lo(a) hi(b) + hi(a) lo(b) + hi(a) hi(b): the dropped lo lo term is below float32's own rounding, so scores and
// P V keep float32 precision (the task's float32 tolerance refuses plain TF32) at tensor-core rates. The code
// unrolled per tile is a few hundred MMAs, so NVRTC compiles it in a second or two (the FMA path it replaced,
// 32 scores and 64 accumulators unrolled over every key, took 8-13 s per module on the H200 host).
//
// mma.m16n8k8 (tf32) fragments, lane = 4 g + t: A (16 x 8, row) a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
// a3 (g + 8, t + 4); B (8 x 8, col) b0 (t, g), b1 (t + 4, g); C (16 x 8) c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8,
// 2t), c3 (g + 8, 2t + 1). The reduction index of both products is permuted within each group of 8, k = t
// taking element 2t and k = t + 4 element 2t + 1 (a sum does not care): then a lane's Q and K operands are
// adjacent floats (one 8-byte load each), and the score accumulators c0..c3 are the P operand as they stand
// (a0 = c0, a1 = c2, a2 = c1, a3 = c3), with V read at the keys 2t and 2t + 1 they name.
//
// Block = NW warps over BQ = 16 WM NW query rows of one (b, h), walked in WM passes of 16 NW rows, each warp
// 16 rows of a pass (Q, S and O of 16 rows fit in registers; of 32 they would spill). Key tiles of KB keys
// are staged in shared memory already split (K hi, K lo, V hi, V lo; rows padded to SD = D + 4 floats, so a
// warp's 32-bit V reads hit 32 different banks; its 64-bit K reads, served by half-warp, meet 2-way conflicts
// at this stride, which D + 8 for K alone would remove: not measured yet), KB the largest of BK, 32, 16 that the
// launch's dynamic shared memory, (BQ + 4 BK) D 2 bytes, holds.
#ifndef KSATTN_HOST_PRIMITIVES
__device__ __forceinline__ unsigned tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
// c += a b on TF32 operands, float32 accumulators.
__device__ __forceinline__ void mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
  hi = tf32(x);
  lo = tf32(x - __uint_as_float(hi));
}
// c += a b in 3xTF32, the small terms first.
__device__ __forceinline__ void mma_3xtf32(float* c, const unsigned* ah, const unsigned* al, unsigned bh0,
                                           unsigned bh1, unsigned bl0, unsigned bl1) {
  mma_tf32(c, al, bh0, bh1);
  mma_tf32(c, ah, bl0, bl1);
  mma_tf32(c, ah, bh0, bh1);
}

template <int D, int NW, int WM, int BK>
__device__ __forceinline__ void prefill_f32(const float* __restrict__ q, const float* __restrict__ k,
                                            const float* __restrict__ v, float* __restrict__ o, int Hq, int Hkv,
                                            int Tq, int Tk, int causal, unsigned char* smem) {
  constexpr int BQ = 16 * WM * NW;
  constexpr int NT = 32 * NW;
  constexpr int SD = D + 4;
  constexpr int SMEM = (BQ + 4 * BK) * D * 2;  // the launch's dynamic shared memory (plan.toml)
  constexpr int KB = (BK <= 64 && 16 * BK * SD <= SMEM) ? BK : (16 * 32 * SD <= SMEM ? 32 : 16);
  constexpr int KD = D / 8;   // k-steps of S = Q K^T
  constexpr int NS = KB / 8;  // n8 tiles of S (and k-steps of P V)
  constexpr int ND = D / 8;   // n8 tiles of O
  static_assert(D % 8 == 0 && 16 * KB * SD <= SMEM && KB % 8 == 0, "float32 prefill tiles");
  float* sKh = reinterpret_cast<float*>(smem);
  float* sKl = sKh + KB * SD;
  float* sVh = sKl + KB * SD;
  float* sVl = sVh + KB * SD;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int bh = blockIdx.x;
  const int b = bh / Hq, h = bh % Hq, kvh = h / (Hq / Hkv);
  const int qt = gridDim.y - 1 - blockIdx.y;  // heaviest (causal) tiles first
  const int q0 = qt * BQ;
  const int off = Tk - Tq;
  const float* kg = k + (size_t)(b * Hkv + kvh) * Tk * D;
  const float* vg = v + (size_t)(b * Hkv + kvh) * Tk * D;
  const float c = rsqrtf((float)D) * KSATTN_LOG2E;

#pragma unroll 1
  for (int pass = 0; pass < WM; ++pass) {
    const int p0 = q0 + pass * 16 * NW;  // the pass's first row
    if (p0 >= Tq) break;                 // the same for every thread of the block
    const int w0 = p0 + 16 * warp;       // the warp's first row
    const int kend = causal ? min(Tk, min(p0 + 16 * NW, Tq) + off) : Tk;  // keys the pass sees
    const int wend = w0 >= Tq ? 0 : causal ? min(Tk, min(w0 + 16, Tq) + off) : Tk;  // ... the warp's rows see

    // The warp's Q rows g and g + 8 as A fragments (element 2t and 2t + 1 of each group of 8; rows past Tq 0).
    float qf[KD][4];
    {
      const float* r0 = q + ((size_t)bh * Tq + w0 + g) * D + 2 * t4;
      const bool ok0 = w0 + g < Tq, ok1 = w0 + g + 8 < Tq;
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
        const float2 x0 = ok0 ? *reinterpret_cast<const float2*>(r0 + 8 * kd) : make_float2(0.f, 0.f);
        const float2 x1 = ok1 ? *reinterpret_cast<const float2*>(r0 + 8 * D + 8 * kd) : make_float2(0.f, 0.f);
        qf[kd][0] = x0.x;
        qf[kd][1] = x1.x;
        qf[kd][2] = x0.y;
        qf[kd][3] = x1.y;
      }
    }
    float acc[ND][4];
#pragma unroll
    for (int n = 0; n < ND; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
    float mrow[2] = {neg_inf(), neg_inf()}, lrow[2] = {0.0f, 0.0f};

#pragma unroll 1
    for (int n0 = 0; n0 < kend; n0 += KB) {
      __syncthreads();  // every warp is done with the last tile
      for (int i = tid; i < KB * D / 4; i += NT) {
        const int r = i / (D / 4), c4 = 4 * (i % (D / 4));
        float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
        if (n0 + r < Tk) {
          kx = *reinterpret_cast<const float4*>(kg + (size_t)(n0 + r) * D + c4);
          vx = *reinterpret_cast<const float4*>(vg + (size_t)(n0 + r) * D + c4);
        }
        uint4 kh, kl, vh, vl;
        split_tf32(kx.x, kh.x, kl.x);
        split_tf32(kx.y, kh.y, kl.y);
        split_tf32(kx.z, kh.z, kl.z);
        split_tf32(kx.w, kh.w, kl.w);
        split_tf32(vx.x, vh.x, vl.x);
        split_tf32(vx.y, vh.y, vl.y);
        split_tf32(vx.z, vh.z, vl.z);
        split_tf32(vx.w, vh.w, vl.w);
        *reinterpret_cast<uint4*>(sKh + r * SD + c4) = kh;
        *reinterpret_cast<uint4*>(sKl + r * SD + c4) = kl;
        *reinterpret_cast<uint4*>(sVh + r * SD + c4) = vh;
        *reinterpret_cast<uint4*>(sVl + r * SD + c4) = vl;
      }
      __syncthreads();
      if (n0 >= wend) continue;  // no row of this warp sees a key of the tile (the same for the whole warp)

      // S = Q K^T
      float s[NS][4];
#pragma unroll
      for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
        unsigned ah[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split_tf32(qf[kd][e], ah[e], al[e]);
#pragma unroll
        for (int n = 0; n < NS; ++n) {
          const int o2 = (8 * n + g) * SD + 8 * kd + 2 * t4;
          const uint2 bh2 = *reinterpret_cast<const uint2*>(sKh + o2);
          const uint2 bl2 = *reinterpret_cast<const uint2*>(sKl + o2);
          mma_3xtf32(s[n], ah, al, bh2.x, bh2.y, bl2.x, bl2.y);
        }
      }

      // Mask (only tiles that cross the end of Tk or, causal, the warp's diagonal).
      if (n0 + KB > Tk || (causal && n0 + KB - 1 > w0 + off)) {
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + 8 * n + 2 * t4 + (e & 1);
            const int row = w0 + g + ((e >> 1) << 3);
            if (key >= Tk || (causal && key > row + off)) s[n][e] = neg_inf();
          }
      }

      // Online softmax: rows g (e = 0, 1) and g + 8 (e = 2, 3), each spread over the 4 lanes of a quad.
      float alpha[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = mrow[hr];
#pragma unroll
        for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * hr], s[n][2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float ms = (mx == neg_inf()) ? 0.0f : mx * c;
        alpha[hr] = ex2(mrow[hr] * c - ms);
        mrow[hr] = mx;
        float ls = 0.0f;
#pragma unroll
        for (int n = 0; n < NS; ++n) {
          const float p0 = ex2(fmaf(s[n][2 * hr], c, -ms));
          const float p1 = ex2(fmaf(s[n][2 * hr + 1], c, -ms));
          s[n][2 * hr] = p0;
          s[n][2 * hr + 1] = p1;
          ls += p0 + p1;
        }
        lrow[hr] = lrow[hr] * alpha[hr] + ls;
      }
      if (__any_sync(0xffffffffu, (alpha[0] != 1.0f) | (alpha[1] != 1.0f))) {
#pragma unroll
        for (int n = 0; n < ND; ++n) {
          acc[n][0] *= alpha[0];
          acc[n][1] *= alpha[0];
          acc[n][2] *= alpha[1];
          acc[n][3] *= alpha[1];
        }
      }

      // O += P V: the k-step of keys 8 kk.. is S's n8 tile kk, its lanes' keys 2t and 2t + 1.
#pragma unroll
      for (int kk = 0; kk < NS; ++kk) {
        unsigned ah[4], al[4];
        split_tf32(s[kk][0], ah[0], al[0]);
        split_tf32(s[kk][2], ah[1], al[1]);
        split_tf32(s[kk][1], ah[2], al[2]);
        split_tf32(s[kk][3], ah[3], al[3]);
        const int o0 = (8 * kk + 2 * t4) * SD + g;
#pragma unroll
        for (int n = 0; n < ND; ++n) {
          const unsigned* vh = reinterpret_cast<const unsigned*>(sVh) + o0 + 8 * n;
          const unsigned* vl = reinterpret_cast<const unsigned*>(sVl) + o0 + 8 * n;
          mma_3xtf32(acc[n], ah, al, vh[0], vh[SD], vl[0], vl[SD]);
        }
      }
    }

    // Epilogue: O / l, rows g and g + 8, two adjacent floats per lane and n8 tile.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = lrow[hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int row = w0 + g + 8 * hr;
      if (row < Tq) {
        float* orow = o + ((size_t)bh * Tq + row) * D + 2 * t4;
#pragma unroll
        for (int n = 0; n < ND; ++n)
          *reinterpret_cast<float2*>(orow + 8 * n) = make_float2(acc[n][2 * hr] * inv, acc[n][2 * hr + 1] * inv);
      }
    }
  }
}

// The prefill entry: the element type picks the path at compile time (fp16 / bf16: m16n8k16; fp32: 3xTF32).
template <int D, int NW, int WM, int BK>
__device__ __forceinline__ void prefill(const __half* q, const __half* k, const __half* v, __half* o, int Hq,
                                        int Hkv, int Tq, int Tk, int causal, unsigned char* smem) {
  prefill_mma<__half, D, NW, WM, BK>(q, k, v, o, Hq, Hkv, Tq, Tk, causal, smem);
}
template <int D, int NW, int WM, int BK>
__device__ __forceinline__ void prefill(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                        __nv_bfloat16* o, int Hq, int Hkv, int Tq, int Tk, int causal,
                                        unsigned char* smem) {
  prefill_mma<__nv_bfloat16, D, NW, WM, BK>(q, k, v, o, Hq, Hkv, Tq, Tk, causal, smem);
}
template <int D, int NW, int WM, int BK>
__device__ __forceinline__ void prefill(const float* q, const float* k, const float* v, float* o, int Hq, int Hkv,
                                        int Tq, int Tk, int causal, unsigned char* smem) {
  prefill_f32<D, NW, WM, BK>(q, k, v, o, Hq, Hkv, Tq, Tk, causal, smem);
}

}  // namespace ksattn
