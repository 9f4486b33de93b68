// ssd, expert, launch 1 of 4: the raw intra-chunk scores C_t . B_s, once per (chunk, batch, group).
//
// All H / G heads of a group share B and C, so C B^T (Q x Q, K = N) is computed here once per group instead
// of once per head (it would be ~40% of launch 4's multiply-adds). Decay, causal mask and dt, which depend
// on the head, are applied in launch 4. One threadgroup of 256 threads per (chunk c, b * G + g); thread
// (ti, si) = (tid / 16, tid % 16) owns the 4 x 4 tile t = 4 ti .., s = 4 si .. (with Q = 32 only
// ti, si < 8 compute). K = N is walked in tiles of KS staged k-major in threadgroup memory (rows padded by 4).
// Steps past L read as zero.
//
// Layouts (row-major): Bm, Cm (B, L, G, N) in T; scores (B, G, NC, Q, Q) f32 with
// scores[..., s, t] = C_t . B_s (transposed: launch 4 reads it as M^T). Scalars: L, G, N.
// Template: Q (32 or 64), KS (a divisor of Q).
constexpr int QP = Q + 4;
constexpr int TQ = Q / 4;
threadgroup float4 sA4[KS * QP / 4];  // float4: 16-byte aligned
threadgroup float* sA = (threadgroup float*)sA4;  // [k][t] = C_t[n0 + k]
threadgroup float4 sK4[KS * QP / 4];
threadgroup float* sK = (threadgroup float*)sK4;  // [k][s] = B_s[n0 + k]

const int nL = L, nG = G, nN = N;
const int NC = (nL + Q - 1) / Q;
const int c = threadgroup_position_in_grid.x, bg = threadgroup_position_in_grid.y;
const int b = bg / nG, g = bg % nG;
const int t0 = c * Q, len = metal::min(Q, nL - t0);
const int tid = thread_position_in_threadgroup.x, ti = tid / 16, si = tid % 16;
const bool act = ti < TQ && si < TQ;
const size_t GN = (size_t)nG * nN;
const device T* Bb = Bm + ((size_t)b * nL + t0) * GN + (size_t)g * nN;
const device T* Cb = Cm + ((size_t)b * nL + t0) * GN + (size_t)g * nN;

float m[4][4];
#pragma clang loop unroll(full)
for (int i = 0; i < 4; ++i)
#pragma clang loop unroll(full)
  for (int j = 0; j < 4; ++j) m[i][j] = 0.0f;
for (int n0 = 0; n0 < nN; n0 += KS) {
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int i = tid; i < KS * Q; i += 256) {
    const int k = i % KS, t = i / KS, n = n0 + k;  // consecutive threads: consecutive n (coalesced)
    const bool ok = t < len && n < nN;
    sA[k * QP + t] = ok ? static_cast<float>(Cb[t * GN + n]) : 0.0f;
    sK[k * QP + t] = ok ? static_cast<float>(Bb[t * GN + n]) : 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (act) {
#pragma clang loop unroll_count(4)
    for (int k = 0; k < KS; ++k) {
      const float4 a = *reinterpret_cast<const threadgroup float4*>(&sA[k * QP + 4 * ti]);
      const float4 u = *reinterpret_cast<const threadgroup float4*>(&sK[k * QP + 4 * si]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {u.x, u.y, u.z, u.w};
#pragma clang loop unroll(full)
      for (int i = 0; i < 4; ++i)
#pragma clang loop unroll(full)
        for (int j = 0; j < 4; ++j) m[i][j] = metal::fma(av[i], bv[j], m[i][j]);
    }
  }
}
if (act) {
  device float* out = scores + ((size_t)bg * NC + c) * Q * Q;
#pragma clang loop unroll(full)
  for (int j = 0; j < 4; ++j)
#pragma clang loop unroll(full)
    for (int i = 0; i < 4; ++i) out[(4 * si + j) * Q + 4 * ti + i] = m[i][j];
}
