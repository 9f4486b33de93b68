// ssd, naive: one thread per (b, h, p), a sequential walk over all L steps. Per step t:
//   dt = clip(softplus(dt[b, t, h] + dt_bias[h]), 0.001, 100);  a = exp(dt * A_h), A_h = -exp(A_log[h])
//   S[n] = a * S[n] + dt * x[b, t, h, p] * Bm[b, t, g, n]       for n < N  (g = h / (H / G))
//   y[b, t, h, p] = sum_n S[n] * Cm[b, t, g, n] + Dskip[h] * x[b, t, h, p]
// N is a runtime size, so the thread's N-entry state row lives in the output `state` itself (global
// memory, mostly L1/L2 hits) and is updated in place every step. Consecutive threads are consecutive p:
// loads of x and stores of y are coalesced, and a simdgroup's Bm/Cm loads all hit the same element.
// Only B*H*P threads, each a chain of L dependent steps of N read-modify-writes: latency-bound.
//
// Layouts (row-major): x, y (B, L, H, P) in T; dt (B, L, H) in T; A_log, Dskip, dt_bias (H) f32;
// Bm, Cm (B, L, G, N) in T; state (B, H, P, N) f32. Scalars: B, L, H, G, P, N.
// T is float, half or bfloat16_t; all arithmetic is float.
const int nB = B, nL = L, nH = H, nG = G, nP = P, nN = N;
const int idx = thread_position_in_grid.x;  // (b * H + h) * P + p
if (idx >= nB * nH * nP) return;  // the grid may not be a multiple of the threadgroup
const int p = idx % nP, bh = idx / nP, h = bh % nH, b = bh / nH;
const int g = h / (nH / nG);

const float Ah = -metal::exp(A_log[h]), bias = dt_bias[h], Dh = Dskip[h];
device float* S = state + (size_t)idx * nN;  // (B, H, P, N): this thread's row
for (int n = 0; n < nN; ++n) S[n] = 0.0f;

for (int t = 0; t < nL; ++t) {
  const size_t bt = (size_t)b * nL + t;
  const float a0 = static_cast<float>(dt[bt * nH + h]) + bias;
  const float dtv = metal::min(metal::max(softplus_f(a0), 0.001f), 100.0f);
  const float decay = metal::exp(dtv * Ah);
  const float xv = static_cast<float>(x[(bt * nH + h) * nP + p]);
  const float dx = dtv * xv;
  const device T* Bt = Bm + (bt * nG + g) * nN;
  const device T* Ct = Cm + (bt * nG + g) * nN;
  float acc = 0.0f;
  for (int n = 0; n < nN; ++n) {
    const float s = metal::fma(decay, S[n], dx * static_cast<float>(Bt[n]));
    S[n] = s;
    acc = metal::fma(s, static_cast<float>(Ct[n]), acc);
  }
  y[(bt * nH + h) * nP + p] = static_cast<T>(acc + Dh * xv);
}
