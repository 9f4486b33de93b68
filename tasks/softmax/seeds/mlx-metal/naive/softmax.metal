// softmax, naive: one thread owns a whole row and walks it three times (max, sum of exp, write).
// Neighbouring threads read rows N floats apart, so no load is coalesced, and only M threads exist:
// a baseline to beat, not a kernel to ship. x, y are (M, N) float32; scalars M, N are int32 constants.
const uint row = thread_position_in_grid.x;
if (row >= uint(M)) return;  // the grid is M threads; a threadgroup may overhang it
const device float* xr = x + size_t(row) * N;
device float* yr = y + size_t(row) * N;
float m = -INFINITY;
for (int j = 0; j < N; ++j) m = metal::max(m, xr[j]);
float s = 0.0f;
for (int j = 0; j < N; ++j) s += metal::exp(xr[j] - m);
const float inv = 1.0f / s;
for (int j = 0; j < N; ++j) yr[j] = metal::exp(xr[j] - m) * inv;
