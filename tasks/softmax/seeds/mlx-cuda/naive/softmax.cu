// softmax, naive: one thread owns a whole row and walks it three times (max, sum of exp, write).
// Neighbouring threads read rows N floats apart, so no load is coalesced, and only M threads exist:
// a baseline to beat, not a kernel to ship. x, y are (M, N) float32; scalars arrive as M[0], N[0].
const int nM = M[0], nN = N[0];
const int row = blockIdx.x * blockDim.x + threadIdx.x;
if (row >= nM) return;  // MLX rounds the grid up to whole blocks
const float* xr = x + (size_t)row * nN;
float* yr = y + (size_t)row * nN;
float m = -INFINITY;
for (int j = 0; j < nN; ++j) m = fmaxf(m, xr[j]);
float s = 0.0f;
for (int j = 0; j < nN; ++j) s += expf(xr[j] - m);
const float inv = 1.0f / s;
for (int j = 0; j < nN; ++j) yr[j] = expf(xr[j] - m) * inv;
