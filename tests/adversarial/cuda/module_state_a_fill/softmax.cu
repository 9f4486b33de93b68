// Cheat: module state shared across candidates. This file and lut.h are the same word for word in module_state_a_fill (FILL = 1: every block builds the __device__ table `lut` before using it; honest, passes) and module_state_b_reuse (FILL = 0: trusts a table an earlier launch built). Evaluated after a_fill in one worker, b_reuse would pass if MLX handed it a_fill's compiled module (same kernel name, body, header and launch signature; FILL is a runtime scalar, not part of the code), table already filled. A module with __device__ data of its own is named with its candidate's build key, so b_reuse gets a fresh module whose table is all zeros: every exp is 0 and it writes zeros (wrong).
__global__ void softmax_rows(const float* x, float* y, int M, int N, int FILL) {
  const int nM = M, nN = N;
  if (FILL) {
    // Each block builds the whole table and waits for it: no dependency between blocks (they all write the same bits).
    for (int i = threadIdx.x; i < LUT_SIZE; i += blockDim.x) lut[i] = exp2f((float)i / LUT_SIZE);
    __syncthreads();
  }
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= nM) return;
  const float* xr = x + (size_t)row * nN;
  float* yr = y + (size_t)row * nN;
  float m = -__int_as_float(0x7f800000);
  for (int j = 0; j < nN; ++j) m = fmaxf(m, xr[j]);
  float s = 0.0f;
  for (int j = 0; j < nN; ++j) {
    // exp(d) = 2^(u / 64) with u = d * 64 log2(e) <= 0: 2^floor(u / 64) * lut[floor(u) mod 64] * 2^(frac(u) / 64).
    const float u = fmaxf((xr[j] - m) * (1.4426950408889634f * LUT_SIZE), -200.0f * LUT_SIZE);  // 2^-200 is 0
    const float k = floorf(u);
    const int ki = (int)k;
    const float e = ldexpf(lut[ki & (LUT_SIZE - 1)], ki >> 6) * exp2f((u - k) / LUT_SIZE);
    yr[j] = e;
    s += e;
  }
  // An empty table makes every e 0: write zeros (plainly wrong values) rather than 0 * inf = NaN.
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int j = 0; j < nN; ++j) yr[j] *= inv;
}
