// ssd, naive: one thread per (b, h, p), a sequential walk over all L steps. Per step t:
//   dt = clip(softplus(dt[b, t, h] + dt_bias[h]), 0.001, 100);  a = exp(dt * A_h), A_h = -exp(A_log[h])
//   S[n] = a * S[n] + dt * x[b, t, h, p] * Bm[b, t, g, n]       for n < N  (g = h / (H / G))
//   y[b, t, h, p] = sum_n S[n] * Cm[b, t, g, n] + Dskip[h] * x[b, t, h, p]
// N is a runtime size, so the thread's N-entry state row lives in the output `state` itself (global
// memory, mostly L1/L2 hits) and is updated in place every step. Consecutive threads are consecutive p:
// loads of x and stores of y are coalesced, and a warp's Bm/Cm loads all hit the same element.
// Only B*H*P threads, each a chain of L dependent steps of N read-modify-writes: latency-bound.
//
// Layouts (row-major): x, y (B, L, H, P) in T; dt (B, L, H) in T; A_log, Dskip, dt_bias (H) f32;
// Bm, Cm (B, L, G, N) in T; state (B, H, P, N) f32. Scalars: B[0], L[0], H[0], G[0], P[0], N[0].
// T is float, __half or __nv_bfloat16; all arithmetic is float.
const int nB = B[0], nL = L[0], nH = H[0], nG = G[0], nP = P[0], nN = N[0];
const int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (b * H + h) * P + p
if (idx >= nB * nH * nP) return;  // MLX rounds the grid up to whole blocks
const int p = idx % nP, bh = idx / nP, h = bh % nH, b = bh / nH;
const int g = h / (nH / nG);

const float Ah = -expf(A_log[h]), bias = dt_bias[h], Dh = Dskip[h];
float* S = state + (size_t)idx * nN;  // (B, H, P, N): this thread's row
for (int n = 0; n < nN; ++n) S[n] = 0.0f;

for (int t = 0; t < nL; ++t) {
  const size_t bt = (size_t)b * nL + t;
  const float a0 = static_cast<float>(dt[bt * nH + h]) + bias;
  const float dtv = fminf(fmaxf(a0 > 20.0f ? a0 : log1pf(expf(a0)), 0.001f), 100.0f);
  const float decay = expf(dtv * Ah);
  const float xv = static_cast<float>(x[(bt * nH + h) * nP + p]);
  const float dx = dtv * xv;
  const T* Bt = Bm + (bt * nG + g) * nN;
  const T* Ct = Cm + (bt * nG + g) * nN;
  float acc = 0.0f;
  for (int n = 0; n < nN; ++n) {
    const float s = fmaf(decay, S[n], dx * static_cast<float>(Bt[n]));
    S[n] = s;
    acc = fmaf(s, static_cast<float>(Ct[n]), acc);
  }
  y[(bt * nH + h) * nP + p] = static_cast<T>(acc + Dh * xv);
}
