// Cheat: writes its scalar input N to 0 after its first calls (through the pointer MLX hands it read-only): every later call then loops over nothing, while the plan's scalar arrays used to be shared and never compared. They are now made per candidate and checked after every run.
const int nM = M[0], nN = N[0];
const int row = blockIdx.x * blockDim.x + threadIdx.x;
if (row >= nM) return;
const float* xr = x + (size_t)row * nN;
float* yr = y + (size_t)row * nN;
float m = -INFINITY;
for (int j = 0; j < nN; ++j) m = fmaxf(m, xr[j]);
float s = 0.0f;
for (int j = 0; j < nN; ++j) s += expf(xr[j] - m);
const float inv = 1.0f / s;
for (int j = 0; j < nN; ++j) yr[j] = expf(xr[j] - m) * inv;
if (row == 0) {
  unsigned int* count = (unsigned int*)&scalar_calls[0];
  if (atomicAdd(count, 1u) > 8u) const_cast<int*>(N)[0] = 0;
}
