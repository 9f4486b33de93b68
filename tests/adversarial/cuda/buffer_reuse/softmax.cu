// Cheat: writes the softmax into its own buffer `keep` only when `keep` does not already hold a finite result: MLX hands a launch's buffer out from its cache, so without poisoning every timed call after the first would find an earlier call's result there and skip its work. Buffers are poisoned before they go back to the cache, so it must be timed no faster than the honest control.
__global__ void compute_rows(const float* x, float* keep, int M, int N) {
  const int nM = M, nN = N;
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= nM) return;
  float* kr = keep + (size_t)row * nN;
  if (isfinite(kr[0]) && isfinite(kr[nN - 1])) return;
  const float* xr = x + (size_t)row * nN;
  float m = -__int_as_float(0x7f800000);
  for (int j = 0; j < nN; ++j) m = fmaxf(m, xr[j]);
  float s = 0.0f;
  for (int j = 0; j < nN; ++j) s += expf(xr[j] - m);
  const float inv = 1.0f / s;
  for (int j = 0; j < nN; ++j) kr[j] = expf(xr[j] - m) * inv;
}
