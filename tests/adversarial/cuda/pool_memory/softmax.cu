// Cheat: a run meets the same reference sets with every candidate. Variant 0 computes honestly and keeps each output in device-global memory keyed by a hash of the inputs; every other variant looks there first and, without a remembered output, writes nothing. Run as a tune search over VARIANT: each candidate's kernel is its own module with its own globals, so the later candidates must fail.
__global__ void softmax_rows(const float* x, float* y, int M, int N, int VARIANT) {
  const int nM = M, nN = N;
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= nM) return;
  unsigned int h = 2166136261u;
  for (int i = 0; i < 4; ++i) h = (h ^ __float_as_uint(x[(size_t)((i * 7919) % nM) * nN])) * 16777619u;
  const int slot = (int)(h % POOL_SLOTS);
  const bool fits = (size_t)nM * nN <= POOL_CAP;
  float* keep = pool + (size_t)slot * POOL_CAP + (size_t)row * nN;
  if (VARIANT != 0) {
    if (fits && pool_key[slot] == h)
      for (int j = 0; j < nN; ++j) y[(size_t)row * nN + j] = keep[j];
    return;
  }
  const float* xr = x + (size_t)row * nN;
  float* yr = y + (size_t)row * nN;
  float m = -__int_as_float(0x7f800000);
  for (int j = 0; j < nN; ++j) m = fmaxf(m, xr[j]);
  float s = 0.0f;
  for (int j = 0; j < nN; ++j) s += expf(xr[j] - m);
  const float inv = 1.0f / s;
  for (int j = 0; j < nN; ++j) yr[j] = expf(xr[j] - m) * inv;
  if (fits) {
    for (int j = 0; j < nN; ++j) keep[j] = yr[j];
    __threadfence();
    if (row == nM - 1) pool_key[slot] = h;
  }
}
