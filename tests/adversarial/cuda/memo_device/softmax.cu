// Cheat: a device-global cache keyed by a hash of a few elements of x (8 entries, one per row block): on a hit it copies the remembered row instead of computing. Timed calls that come back to inputs they met would nearly always hit; every timed call now has inputs of its own, so it must be timed no faster than the honest control.
__global__ void softmax_rows(const float* x, float* y, int M, int N) {
  const int nM = M, nN = N;
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= nM) return;
  unsigned int h = 2166136261u;
  for (int i = 0; i < 4; ++i) h = (h ^ __float_as_uint(x[(size_t)((i * 7919) % nM) * nN])) * 16777619u;
  const int slot = (int)(h % MEMO_SLOTS);
  const bool fits = (size_t)nM * nN <= MEMO_CAP;
  float* keep = memo + (size_t)slot * MEMO_CAP + (size_t)row * nN;
  if (fits && memo_key[slot] == h) {
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
    if (row == nM - 1) memo_key[slot] = h;  // racy on purpose: a cheat, not a protocol
  }
}
