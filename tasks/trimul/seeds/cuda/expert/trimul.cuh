// trimul, expert: GPU MODE's outgoing triangle multiplicative update with its three matrix products on the tensor
// cores (mma.sync m16n8k16, fp16 operands, fp32 accumulation: the task's 2e-2 tolerance allows mixed precision,
// and fp16 keeps 11 bits where bf16 keeps 8), LayerNorms and gates in fp32. Each product is one shape, "rows of
// A times rows of B" (warp_mma), with both operands in shared memory:
//   project:  a block of 8 warps per 128 pair rows (b, i, k): x normalised over D into z (fp16, shared), then
//             z times each projection's rows (staged 64 output channels of a projection and the same 64 of its
//             gate at a time), left and right = mask * proj * sigmoid(gate) and the out gate, stored fp16 and
//             channel-major ([b, c, i, k]) for the next product.
//   triangle: tri[b, c] = left[b, c] right[b, c]^T (S x S by S), a 128 x 128 tile per block of 8 warps (each
//             32 x 64), K in steps of 32 through two cp.async stages; fp32 out, channel-major.
//   output:   a block of 8 warps per 128 pairs (b, i, j): their H channels gathered (contiguous per channel),
//             normalised over H, scaled by the gate (fp16, shared), then times to_out's rows (fp16, shared) into
//             out (B, S, S, D).
#pragma once

namespace kstri {

constexpr float kEps = 1e-5f;
constexpr int ROWS = 128;  // pair rows of a project or output block (8 warps x 16)
constexpr int TT = 128;    // the triangle's output tile (TT x TT)
constexpr int TK = 32;     // the triangle's K step
constexpr int TS = TK + 8; // a staged row of the triangle, in halves (+8: no bank conflicts)

#ifndef KSTRI_HOST_PRIMITIVES
__device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// `bytes` (0 to 16) global -> shared, asynchronously, the rest of the 16 zeros.
__device__ __forceinline__ void cp16(void* dst, const void* src, int bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
#define KSTRI_DYNAMIC_SHARED(name, bytes) extern __shared__ __align__(16) unsigned char name[]
#endif

__device__ __forceinline__ float sigmoidf(float u) { return 1.0f / (1.0f + expf(-u)); }

__device__ __forceinline__ unsigned word(const __half* p) { return *reinterpret_cast<const unsigned*>(p); }

// acc[n] += A (16 rows, stride sa) times B^T, B being 8 NT rows (stride sb), over K (a multiple of 16): the
// warp's 16 x 8 NT tile of A B^T, fragments read from shared memory (lane (g, t): rows g and g + 8 of A, row g of
// each 8 of B, k pairs 2t and 2t + 8).
template <int NT>
__device__ __forceinline__ void warp_mma(float (*acc)[4], const __half* a, int sa, const __half* b, int sb, int K) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int k0 = 0; k0 < K; k0 += 16) {
    const int k = k0 + 2 * t;
    const unsigned af[4] = {word(a + g * sa + k), word(a + (g + 8) * sa + k), word(a + g * sa + k + 8),
                            word(a + (g + 8) * sa + k + 8)};
#pragma unroll
    for (int n = 0; n < NT; ++n) mma(acc[n], af, word(b + (8 * n + g) * sb + k), word(b + (8 * n + g) * sb + k + 8));
  }
}

// One warp's LayerNorm of `count` rows of n floats (src, stride n) into dst (fp16, stride sd) with weight w and
// bias c; rows past `count` become zeros.
__device__ __forceinline__ void warp_layer_norm(const float* src, long long stride, int rows, int count, int n,
                                                const float* w, const float* c, __half* dst, int sd) {
  const int lane = threadIdx.x % 32;
  for (int r = 0; r < rows; ++r) {
    if (r >= count) {
      for (int d = lane; d < n; d += 32) dst[r * sd + d] = __float2half(0.0f);
      continue;
    }
    const float* x = src + r * stride;
    float s = 0.0f;
    for (int d = lane; d < n; d += 32) s += x[d];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    const float mean = s / n;
    float v = 0.0f;
    for (int d = lane; d < n; d += 32) v += (x[d] - mean) * (x[d] - mean);
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    const float rstd = rsqrtf(v / n + kEps);
    for (int d = lane; d < n; d += 32) dst[r * sd + d] = __float2half((x[d] - mean) * rstd * w[d] + c[d]);
  }
}

// `rows` rows of n floats (global, stride n) into shared fp16 (stride sd), by the whole block.
__device__ __forceinline__ void stage_rows(const float* src, int rows, int n, __half* dst, int sd) {
  for (int e = threadIdx.x; e < rows * n; e += blockDim.x) dst[(e / n) * sd + e % n] = __float2half(src[e]);
}

template <int D, int H>
__device__ __forceinline__ void project(const float* x, const float* mask, const float* norm_weight,
                                        const float* norm_bias, const float* left_proj, const float* right_proj,
                                        const float* left_gate, const float* right_gate, const float* out_gate,
                                        __half* left, __half* right, __half* gate, int nB, int S) {
  static_assert(D % 16 == 0 && H % 64 == 0, "D in k-steps of 16, H in halves of 64 channels");
  constexpr int SD = D + 8;
  KSTRI_DYNAMIC_SHARED(smem, 2 * ROWS * SD * 2);
  __half* z = reinterpret_cast<__half*>(smem);  // [ROWS][SD]
  __half* w = z + ROWS * SD;                    // [128][SD]: 64 channels of a projection, then the same of its gate
  const long long plane = (long long)S * S, total = nB * plane;
  const long long r0 = (long long)blockIdx.x * ROWS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long mine = r0 + warp * 16;  // this warp's 16 rows
  warp_layer_norm(x + mine * D, D, 16, (int)max(0LL, min(16LL, total - mine)), D, norm_weight, norm_bias,
                  z + warp * 16 * SD, SD);
  float m[2];
  long long at[2];  // rows g and g + 8: their mask and their place in a channel's plane
  for (int h = 0; h < 2; ++h) {
    const long long r = mine + g + 8 * h;
    m[h] = r < total ? mask[r] : 0.0f;
    at[h] = r < total ? (r / plane) * H * plane + r % plane : -1;
  }
  const float* projs[2] = {left_proj, right_proj};
  const float* gates[2] = {left_gate, right_gate};
  __half* outs[2] = {left, right};
  for (int which = 0; which < 3; ++which)
    for (int c0 = 0; c0 < H; c0 += 64) {
      __syncthreads();  // the staged weights are being replaced
      if (which < 2) {
        stage_rows(projs[which] + c0 * D, 64, D, w, SD);
        stage_rows(gates[which] + c0 * D, 64, D, w + 64 * SD, SD);
      } else {
        stage_rows(out_gate + c0 * D, 64, D, w, SD);
      }
      __syncthreads();
      float p[8][4] = {}, q[8][4] = {};
      warp_mma<8>(p, z + warp * 16 * SD, SD, w, SD, D);
      if (which < 2) warp_mma<8>(q, z + warp * 16 * SD, SD, w + 64 * SD, SD, D);
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1, c = c0 + 8 * n + 2 * t + (e & 1);
          if (at[h] < 0) continue;
          const float v = which < 2 ? m[h] * p[n][e] * sigmoidf(q[n][e]) : sigmoidf(p[n][e]);
          (which < 2 ? outs[which] : gate)[at[h] + c * plane] = __float2half(v);
        }
    }
}

// tri[b, c] = left[b, c] right[b, c]^T for the block's (b, c) = blockIdx.z and its TT x TT tile.
__device__ __forceinline__ void triangle(const __half* left, const __half* right, float* tri, int S) {
  __shared__ __align__(16) __half sa[2][TT][TS], sb[2][TT][TS];
  const long long plane = (long long)S * S;
  const __half* l = left + blockIdx.z * plane;
  const __half* r = right + blockIdx.z * plane;
  const int i0 = blockIdx.y * TT, j0 = blockIdx.x * TT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wi = (warp / 2) * 32, wj = (warp % 2) * 64;  // the warp's 32 x 64 of the tile
  auto stage = [&](int s, int k0) {
    for (int e = threadIdx.x; e < 2 * TT * (TK / 8); e += blockDim.x) {
      const int which = e / (TT * (TK / 8)), row = (e / (TK / 8)) % TT, piece = e % (TK / 8);
      const int gr = (which ? j0 : i0) + row, k = k0 + piece * 8;
      const int bytes = gr < S ? max(0, min(16, (S - k) * 2)) : 0;
      const __half* src = (which ? r : l) + (bytes ? (long long)gr * S + k : 0);
      cp16(which ? &sb[s][row][piece * 8] : &sa[s][row][piece * 8], src, bytes);
    }
  };
  float acc[2][8][4] = {};
  const int steps = (S + TK - 1) / TK;
  stage(0, 0);
  cp_commit();
  for (int it = 0; it < steps; ++it) {
    if (it + 1 < steps) stage((it + 1) % 2, (it + 1) * TK);
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    const int s = it % 2;
    for (int mt = 0; mt < 2; ++mt) warp_mma<8>(acc[mt], &sa[s][wi + 16 * mt][0], TS, &sb[s][wj][0], TS, TK);
    __syncthreads();
  }
  float* out = tri + blockIdx.z * plane;
  for (int mt = 0; mt < 2; ++mt)
    for (int n = 0; n < 8; ++n)
      for (int h = 0; h < 2; ++h) {
        const int i = i0 + wi + 16 * mt + g + 8 * h, j = j0 + wj + 8 * n + 2 * t;
        if (i < S && j < S) out[(long long)i * S + j] = acc[mt][n][2 * h];
        if (i < S && j + 1 < S) out[(long long)i * S + j + 1] = acc[mt][n][2 * h + 1];
      }
}

template <int D, int H>
__device__ __forceinline__ void output(const float* tri, const __half* gate, const float* out_norm_weight,
                                       const float* out_norm_bias, const float* to_out, float* out, int nB, int S) {
  static_assert(D % 64 == 0 && H % 16 == 0, "D in chunks of 64 columns, H in k-steps of 16");
  constexpr int ST = H + 4, SG = H + 8;
  KSTRI_DYNAMIC_SHARED(smem, ROWS * ST * 4 + ROWS * SG * 2 + D * SG * 2);
  float* tt = reinterpret_cast<float*>(smem);              // [ROWS][ST]: the pairs' channels
  __half* gg = reinterpret_cast<__half*>(tt + ROWS * ST);  // [ROWS][SG]: normalised and gated
  __half* wo = gg + ROWS * SG;                              // [D][SG]: to_out
  const long long plane = (long long)S * S, total = nB * plane;
  const long long p0 = (long long)blockIdx.x * ROWS;
  // The pairs' channels, contiguous per channel (a block's pairs are consecutive in one plane but at a b's end).
  for (int e = threadIdx.x; e < H * ROWS; e += blockDim.x) {
    const int c = e / ROWS, r = e % ROWS;
    const long long p = p0 + r;
    tt[r * ST + c] = p < total ? tri[((p / plane) * H + c) * plane + p % plane] : 0.0f;
  }
  stage_rows(to_out, D, H, wo, SG);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long mine = p0 + warp * 16;
  warp_layer_norm(tt + warp * 16 * ST, ST, 16, (int)max(0LL, min(16LL, total - mine)), H, out_norm_weight,
                  out_norm_bias, gg + warp * 16 * SG, SG);
  __syncwarp();
  for (int e = lane; e < 16 * H; e += 32) {  // times the gate (rows past the end stay zero)
    const int r = e / H, c = e % H;
    const long long p = mine + r;
    if (p < total)
      gg[(warp * 16 + r) * SG + c] = __float2half(__half2float(gg[(warp * 16 + r) * SG + c]) *
                                                  __half2float(gate[((p / plane) * H + c) * plane + p % plane]));
  }
  __syncwarp();
  for (int d0 = 0; d0 < D; d0 += 64) {
    float acc[8][4] = {};
    warp_mma<8>(acc, gg + warp * 16 * SG, SG, wo + d0 * SG, SG, H);
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const long long p = mine + g + 8 * (e >> 1);
        if (p < total) out[p * D + d0 + 8 * n + 2 * t + (e & 1)] = acc[n][e];
      }
  }
}

}  // namespace kstri
