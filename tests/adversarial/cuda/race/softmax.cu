// Cheat: one block per row; its 256 threads add their partial sums into one shared float without atomics.
__global__ void softmax_rows(const float* x, float* y, int M, int N) {
  const int nM = M, nN = N;
  const int row = blockIdx.x;
  if (row >= nM) return;
  const float* xr = x + (size_t)row * nN;
  float* yr = y + (size_t)row * nN;
  __shared__ float mx, sum;
  if (threadIdx.x == 0) { float m = -__int_as_float(0x7f800000); for (int j = 0; j < nN; ++j) m = fmaxf(m, xr[j]); mx = m; sum = 0.0f; }
  __syncthreads();
  float part = 0.0f;
  for (int j = threadIdx.x; j < nN; j += blockDim.x) part += expf(xr[j] - mx);
  volatile float* vs = &sum;
  *vs = *vs + part;  // the race: read-modify-write from every thread at once
  __syncthreads();
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < nN; j += blockDim.x) yr[j] = expf(xr[j] - mx) * inv;
}
