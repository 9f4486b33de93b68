// ssd, expert, launch 4 of 4: the outputs of one chunk.
//
// One threadgroup of 256 threads per (chunk c, batch b, head h); t, s index the chunk's steps (t0 = c * Q).
// With dt_s and the inclusive cumulative sums cum_t of dt * A_h within the chunk (as in launch 2):
//     y[t, p] = sum_{s <= t} M[t, s] * x_s[p]                  M[t, s] = (C_t . B_s) exp(cum_t - cum_s) dt_s
//             + exp(cum_t) * sum_n C_t[n] * carry[p, n]        (the state entering the chunk, launch 3)
//             + D_h * x_t[p]
// 1. M from the raw scores C_t . B_s of launch 1 (shared by the heads of a group), masked (s <= t),
//    decayed and scaled by dt_s, kept in threadgroup memory (transposed: sMt[s][t]);
// 2. y (Q x 64 p per pass) = [C * exp(cum) | M] (Q x (N + Q)) times [carry^T ; x] ((N + Q) x 64): the
//    inter-chunk term (skipped for the first chunk, whose carry is zero) and the intra-chunk term are one
//    GEMM over K = N + Q, tiles of KS staged in threadgroup memory.
// Thread (ti, si) = (tid / 16, tid % 16) owns a 4 x 4 tile of y: t = 4 ti .. 4 ti + 3, p = 4 si .. 4 si + 3.
// With Q = 32 only the threads with ti < 8 compute.
//
// Layouts (row-major): x, y (B, L, H, P) in T; dt (B, L, H) in T; A_log, Dskip, dt_bias (H) f32;
// Cm (B, L, G, N) in T; scores (B, G, NC, Q, Q) f32; carry (B, H, NC, P, N) f32. Scalars: L, H, G, P, N.
// Template: Q (chunk length: 32 or 64), KS (a divisor of Q). All math is float; T only in loads and y.
constexpr int QP = Q + 4;    // padded row of the k-major C / B tiles
constexpr int XS = 64 + 4;   // padded row of the k-major carry / x tiles (64 p)
constexpr int TQ = Q / 4;    // 4 x 4 thread tiles along t (and s)
threadgroup float s_dt[Q], s_cum[Q];
threadgroup float4 sMt4[Q * Q / 4];  // float4: 16-byte aligned
threadgroup float* sMt = (threadgroup float*)sMt4;  // sMt[s * Q + t] = M[t, s]
threadgroup float4 stg4[(KS * QP + KS * XS) / 4];
threadgroup float* stg = (threadgroup float*)stg4;  // staging: [KS][QP] and [KS][XS]

const int nL = L, nH = H, nG = G, nP = P, nN = N;
const int NC = (nL + Q - 1) / Q;
const int c = threadgroup_position_in_grid.x, bh = threadgroup_position_in_grid.y;
const int b = bh / nH, h = bh % nH, g = h / (nH / nG);
const int t0 = c * Q, len = metal::min(Q, nL - t0);
const int tid = thread_position_in_threadgroup.x;
const int ti = tid / 16, si = tid % 16;
const bool trow = ti < TQ;
const float Ah = -metal::exp(A_log[h]);

if (tid < Q) {
  float v = 0.0f;
  if (tid < len) {
    const float a = static_cast<float>(dt[((size_t)b * nL + t0 + tid) * nH + h]) + dt_bias[h];
    v = metal::min(metal::max(softplus_f(a), 0.001f), 100.0f);
  }
  s_dt[tid] = v;
}
threadgroup_barrier(mem_flags::mem_threadgroup);
if (tid < Q) {
  float s = 0.0f;
  for (int k = 0; k <= tid; ++k) s += s_dt[k] * Ah;  // same order as launch 2
  s_cum[tid] = s;
}
threadgroup_barrier(mem_flags::mem_threadgroup);

const size_t HP = (size_t)nH * nP, GN = (size_t)nG * nN;
const device T* xb = x + ((size_t)b * nL + t0) * HP + (size_t)h * nP;   // x[t0 + s][h][p] = xb[s * HP + p]
device T* yb = y + ((size_t)b * nL + t0) * HP + (size_t)h * nP;
const device T* Cb = Cm + ((size_t)b * nL + t0) * GN + (size_t)g * nN;
threadgroup float* sA = stg;            // [KS][QP]: C exp(cum) (the inter-chunk term)
threadgroup float* sK = stg + KS * QP;  // [KS][XS]: carry^T or x

// 1. M^T from launch 1's raw scores: masked (s <= t), decayed and scaled by dt_s (coalesced over t).
{
  const device float* sc = scores + (((size_t)b * nG + g) * NC + c) * Q * Q;  // sc[s * Q + t] = C_t . B_s
  for (int i = tid; i < Q * Q; i += 256) {
    const int s = i / Q, t = i % Q;
    sMt[i] = s <= t ? sc[i] * metal::exp(s_cum[t] - s_cum[s]) * s_dt[s] : 0.0f;
  }
}

// 2. y = [C exp(cum) | M] [carry^T ; x] + D x, 64 columns p at a time.
const device float* Cin = carry + ((size_t)bh * NC + c) * nP * nN;  // carry[p][n] = Cin[p * nN + n]
const float Dh = Dskip[h];
for (int p0 = 0; p0 < nP; p0 += 64) {
  float acc[4][4];
#pragma clang loop unroll(full)
  for (int i = 0; i < 4; ++i)
#pragma clang loop unroll(full)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  if (c > 0) {  // inter-chunk: exp(cum_t) C_t . carry[p]
    for (int n0 = 0; n0 < nN; n0 += KS) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (int i = tid; i < KS * Q; i += 256) {
        const int k = i % KS, t = i / KS, n = n0 + k;
        sA[k * QP + t] = (t < len && n < nN) ? static_cast<float>(Cb[t * GN + n]) * metal::exp(s_cum[t]) : 0.0f;
      }
      for (int i = tid; i < KS * 64; i += 256) {
        const int k = i % KS, p = i / KS, n = n0 + k;
        sK[k * XS + p] = (p0 + p < nP && n < nN) ? Cin[(size_t)(p0 + p) * nN + n] : 0.0f;
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (trow) {
#pragma clang loop unroll_count(4)
        for (int k = 0; k < KS; ++k) {
          const float4 a = *reinterpret_cast<const threadgroup float4*>(&sA[k * QP + 4 * ti]);
          const float4 u = *reinterpret_cast<const threadgroup float4*>(&sK[k * XS + 4 * si]);
          const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {u.x, u.y, u.z, u.w};
#pragma clang loop unroll(full)
          for (int i = 0; i < 4; ++i)
#pragma clang loop unroll(full)
            for (int j = 0; j < 4; ++j) acc[i][j] = metal::fma(av[i], bv[j], acc[i][j]);
        }
      }
    }
  }
  for (int s0 = 0; s0 < Q; s0 += KS) {  // intra-chunk: M x
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int i = tid; i < KS * 64; i += 256) {
      const int k = i / 64, p = i % 64, s = s0 + k;  // consecutive threads: consecutive p (coalesced)
      sK[k * XS + p] = (s < len && p0 + p < nP) ? static_cast<float>(xb[s * HP + p0 + p]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (trow) {
#pragma clang loop unroll_count(4)
      for (int k = 0; k < KS; ++k) {
        const float4 a = *reinterpret_cast<const threadgroup float4*>(&sMt[(s0 + k) * Q + 4 * ti]);
        const float4 u = *reinterpret_cast<const threadgroup float4*>(&sK[k * XS + 4 * si]);
        const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {u.x, u.y, u.z, u.w};
#pragma clang loop unroll(full)
        for (int i = 0; i < 4; ++i)
#pragma clang loop unroll(full)
          for (int j = 0; j < 4; ++j) acc[i][j] = metal::fma(av[i], bv[j], acc[i][j]);
      }
    }
  }
  if (trow) {
#pragma clang loop unroll(full)
    for (int i = 0; i < 4; ++i) {
      const int t = 4 * ti + i;
      if (t < len) {
#pragma clang loop unroll(full)
        for (int j = 0; j < 4; ++j) {
          const int p = p0 + 4 * si + j;
          if (p < nP) yb[t * HP + p] = static_cast<T>(acc[i][j] + Dh * static_cast<float>(xb[t * HP + p]));
        }
      }
    }
  }
}
