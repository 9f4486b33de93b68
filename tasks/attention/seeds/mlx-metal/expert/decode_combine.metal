// attention, expert decode, pass 2: one simdgroup per output row (b, h, i) merges the NSPLIT partials of
// pass 1 (slice max M_s in log2 units, sum l_s, accumulator acc_s):
//   M = max_s M_s,  w_s = exp2(M_s - M),  o = (sum_s w_s acc_s) / (sum_s w_s l_s)
// Lane owns D / 32 consecutive elements of the row.
// Layouts (row-major): part_m, part_l (B, Hq, Tq, NSPLIT), part_o (B, Hq, Tq, NSPLIT, D) float32;
// o (B, Hq, Tq, D) in T. Scalars: B, Hq, Tq. Template ints: D (a multiple of 32), NSPLIT.
constexpr int DL = D / 32;
const uint row = thread_position_in_grid.x / 32;
const uint lane = thread_position_in_grid.x % 32;
if (row >= uint(B * Hq * Tq)) return;  // never taken: the grid is one simdgroup per row

float mx = -3.0e38f;
for (int t = 0; t < NSPLIT; ++t) mx = metal::max(mx, part_m[row * uint(NSPLIT) + uint(t)]);
float lsum = 0.0f;
float acc[DL];
for (int c = 0; c < DL; ++c) acc[c] = 0.0f;
for (int t = 0; t < NSPLIT; ++t) {
  const uint prow = row * uint(NSPLIT) + uint(t);
  const float w = metal::fast::exp2(part_m[prow] - mx);
  lsum = metal::fma(w, part_l[prow], lsum);
  for (int c = 0; c < DL; ++c) acc[c] = metal::fma(w, part_o[prow * uint(D) + lane * uint(DL) + uint(c)], acc[c]);
}
const float inv = 1.0f / lsum;  // >= 1: the slice holding the row's maximum contributes exp2(0) l >= 1
for (int c = 0; c < DL; ++c) o[row * uint(D) + lane * uint(DL) + uint(c)] = static_cast<T>(acc[c] * inv);
