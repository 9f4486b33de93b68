// trimul, naive (GPU MODE's outgoing triangle multiplicative update), all in float32, in three launches:
//   project:  z = LayerNorm(x[b, i, k]) over D; per channel c < H: left = mask * (left_proj z) * sigmoid(left_gate z),
//             right likewise, gate = sigmoid(out_gate z); stored channel-major, [b, c, i, k].
//   triangle: tri[b, c, i, j] = sum_k left[b, c, i, k] * right[b, c, j, k], a 16 x 16 tiled product per (b, c).
//   output:   out[b, i, j] = to_out (LayerNorm(tri[b, :, i, j]) over H * gate[b, :, i, j]).
// LayerNorm: (v - mean) / sqrt(biased variance + 1e-5) * weight + bias. Weights in nn.Linear's (out, in) layout:
// the five projections (H, D), to_out (D, H). Each block reduces with shared memory and barriers.

constexpr float kEps = 1e-5f;

__device__ __forceinline__ float sigmoidf(float u) { return 1.0f / (1.0f + expf(-u)); }

// Sum of v over the block (blockDim.x threads, at most 1024), every thread gets it; `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  __syncthreads();  // scratch may still be read from the previous sum
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

template <int D, int H>
__global__ void trimul_project(const float* x, const float* mask, const float* norm_weight, const float* norm_bias,
                               const float* left_proj, const float* right_proj, const float* left_gate,
                               const float* right_gate, const float* out_gate, float* left, float* right, float* gate,
                               int S) {
  __shared__ float z[D];
  __shared__ float scratch[32];
  const long long row = blockIdx.x;  // (b * S + i) * S + k
  const long long plane = (long long)S * S;
  const long long b = row / plane, ik = row % plane;
  const float* xr = x + row * D;
  float part = 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) part += xr[d];
  const float mean = block_sum(part, scratch) / D;
  part = 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const float c = xr[d] - mean;
    part += c * c;
  }
  const float rstd = rsqrtf(block_sum(part, scratch) / D + kEps);
  for (int d = threadIdx.x; d < D; d += blockDim.x) z[d] = (xr[d] - mean) * rstd * norm_weight[d] + norm_bias[d];
  __syncthreads();
  const float m = mask[row];
  for (int c = threadIdx.x; c < H; c += blockDim.x) {
    float lp = 0.0f, rp = 0.0f, lg = 0.0f, rg = 0.0f, og = 0.0f;
    for (int d = 0; d < D; ++d) {
      const float v = z[d];
      lp = fmaf(left_proj[c * D + d], v, lp);
      rp = fmaf(right_proj[c * D + d], v, rp);
      lg = fmaf(left_gate[c * D + d], v, lg);
      rg = fmaf(right_gate[c * D + d], v, rg);
      og = fmaf(out_gate[c * D + d], v, og);
    }
    const long long at = (b * H + c) * plane + ik;
    left[at] = m * lp * sigmoidf(lg);
    right[at] = m * rp * sigmoidf(rg);
    gate[at] = sigmoidf(og);
  }
}

__global__ void trimul_triangle(const float* left, const float* right, float* tri, int S) {
  __shared__ float a[16][17], bt[16][17];  // a row tile of left, of right; +1 against bank conflicts
  const long long plane = (long long)S * S;
  const float* l = left + blockIdx.z * plane;
  const float* r = right + blockIdx.z * plane;
  const int i = blockIdx.y * 16 + threadIdx.y, j = blockIdx.x * 16 + threadIdx.x;
  const int ri = blockIdx.y * 16 + threadIdx.x, rj = blockIdx.x * 16 + threadIdx.x;  // rows a thread loads
  float acc = 0.0f;
  for (int k0 = 0; k0 < S; k0 += 16) {
    const int k = k0 + threadIdx.y;
    a[threadIdx.x][threadIdx.y] = ri < S && k < S ? l[(long long)ri * S + k] : 0.0f;
    bt[threadIdx.x][threadIdx.y] = rj < S && k < S ? r[(long long)rj * S + k] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) acc = fmaf(a[threadIdx.y][kk], bt[threadIdx.x][kk], acc);
    __syncthreads();
  }
  if (i < S && j < S) tri[blockIdx.z * plane + (long long)i * S + j] = acc;
}

template <int D, int H>
__global__ void trimul_output(const float* tri, const float* gate, const float* out_norm_weight,
                              const float* out_norm_bias, const float* to_out, float* out, int S) {
  __shared__ float g[H];
  __shared__ float scratch[32];
  const long long pair = blockIdx.x;  // (b * S + i) * S + j
  const long long plane = (long long)S * S;
  const long long b = pair / plane, ij = pair % plane;
  float part = 0.0f;
  for (int c = threadIdx.x; c < H; c += blockDim.x) part += tri[(b * H + c) * plane + ij];
  const float mean = block_sum(part, scratch) / H;
  part = 0.0f;
  for (int c = threadIdx.x; c < H; c += blockDim.x) {
    const float v = tri[(b * H + c) * plane + ij] - mean;
    part += v * v;
  }
  const float rstd = rsqrtf(block_sum(part, scratch) / H + kEps);
  for (int c = threadIdx.x; c < H; c += blockDim.x) {
    const long long at = (b * H + c) * plane + ij;
    g[c] = ((tri[at] - mean) * rstd * out_norm_weight[c] + out_norm_bias[c]) * gate[at];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int c = 0; c < H; ++c) acc = fmaf(to_out[d * H + c], g[c], acc);
    out[pair * D + d] = acc;
  }
}
