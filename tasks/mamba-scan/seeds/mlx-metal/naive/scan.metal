// mamba-scan, naive: one thread per channel (b, d). The NS-entry state h lives in registers and the
// thread walks all L time steps in order:
//   dt = softplus(delta + delta_bias[d]);  h[n] = exp(dt * A[d, n]) * h[n] + dt * u * Bm[b, n, t]
//   y = (sum_n h[n] * Cm[b, n, t] + Dskip[d] * u) * silu(z)
// Neighbouring threads are neighbouring channels, L elements apart: every load of u, delta, z and store
// of y is strided (uncoalesced), while a simdgroup's Bm/Cm loads all hit the same element.
// Only B*D threads exist, each a chain of L dependent steps: latency-bound.
//
// Layouts (row-major): u, delta, z, y (B, D, L) in T; A (D, NS) float; Bm, Cm (B, NS, L) in T;
// Dskip, delta_bias (D) float; state (B, D, NS) float. Scalars B, D, L are ints.
// Template: T (float or float16_t), NS = N. All arithmetic is float.
const uint ch = thread_position_in_grid.x;  // channel b * D + d
if (ch >= uint(B * D)) {
  return;
}
const uint nL = uint(L);
const uint b = ch / uint(D), d = ch % uint(D);

float a2[NS], h[NS];
#pragma clang loop unroll(full)
for (int n = 0; n < NS; ++n) {
  a2[n] = A[d * NS + n] * M_LOG2E_F;  // exp(dt * A) = exp2(dt * A * log2(e))
  h[n] = 0.0f;
}
const float bias = delta_bias[d], dskip = Dskip[d];
const uint row = ch * nL;         // this channel's first element in u, delta, z, y
const uint brow = b * NS * nL;    // batch row b of Bm and Cm

for (uint t = 0; t < nL; ++t) {
  const float dt = softplus_f(float(delta[row + t]) + bias);
  const float ut = float(u[row + t]);
  const float du = dt * ut;
  float acc = 0.0f;
#pragma clang loop unroll(full)
  for (int n = 0; n < NS; ++n) {
    h[n] = metal::exp2(dt * a2[n]) * h[n] + du * float(Bm[brow + n * nL + t]);
    acc += h[n] * float(Cm[brow + n * nL + t]);
  }
  const float zt = float(z[row + t]);
  y[row + t] = static_cast<T>((acc + dskip * ut) * (zt / (1.0f + metal::exp(-zt))));
}
#pragma clang loop unroll(full)
for (int n = 0; n < NS; ++n) {
  state[ch * NS + n] = h[n];
}
