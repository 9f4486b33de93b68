// ssd, expert, launch 2 of 4: each chunk's own contribution to the state.
//
// One threadgroup of 256 threads per (chunk c, batch b, head h). The chunk covers steps t0 .. t0 + len - 1
// (t0 = c * Q, len = metal::min(Q, L - t0)). With dt_s = clip(softplus(dt + dt_bias), 0.001, 100) and
// cum_s = sum_{s' <= s} dt_s' * A_h (inclusive, within the chunk), a step s reaches the chunk's end with
// the decay exp(cum_end - cum_s), so the state the chunk builds from zero is
//     S_c[p, n] = sum_s exp(cum_end - cum_s) * dt_s * x_s[p] * B_s[g, n]            (a P x N matrix)
// a GEMM with K = the chunk's steps: (w * x)^T (P x Q) times B (Q x N). launch 3 chains the chunks.
// Steps past L get dt = 0 and zero x, B (they add nothing).
//
// Work split: output tiles of 64 (p) x 128 (n); thread (tp, tn) = (tid / 16, tid % 16) owns p = 4 tp .. 4 tp + 3
// and n = 8 tn .. 8 tn + 7 (32 float accumulators). K is walked in tiles of KS steps staged in threadgroup
// memory as float, k-major (rows padded by 4 floats: float4 reads stay aligned, fewer bank conflicts).
//
// Layouts (row-major): x (B, L, H, P) in T; dt (B, L, H) in T; A_log, dt_bias (H) f32; Bm (B, L, G, N) in T;
// chunk_states (B, H, NC, P, N) f32; chunk_decay (B, H, NC) f32 = cum_end. Scalars: L, H, G, P, N.
// Template: Q (chunk length, a multiple of KS), KS. T is float, half or bfloat16_t; all math is float.
constexpr int XS = 64 + 4;    // padded row of sX (64 p)
constexpr int BS = 128 + 4;   // padded row of sB (128 n)
threadgroup float s_dt[Q], s_cum[Q], s_w[Q];
threadgroup float4 sX4[KS * XS / 4];  // float4: 16-byte aligned
threadgroup float* sX = (threadgroup float*)sX4;
threadgroup float4 sB4[KS * BS / 4];
threadgroup float* sB = (threadgroup float*)sB4;

const int nL = L, nH = H, nG = G, nP = P, nN = N;
const int NC = (nL + Q - 1) / Q;
const int c = threadgroup_position_in_grid.x, bh = threadgroup_position_in_grid.y;  // chunk, b * H + h
const int b = bh / nH, h = bh % nH, g = h / (nH / nG);
const int t0 = c * Q, len = metal::min(Q, nL - t0);
const int tid = thread_position_in_threadgroup.x;
const float Ah = -metal::exp(A_log[h]);

// dt of the chunk's steps, then the inclusive cumulative sum of dt * A (same order in every thread).
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
  for (int k = 0; k <= tid; ++k) s += s_dt[k] * Ah;
  s_cum[tid] = s;
}
threadgroup_barrier(mem_flags::mem_threadgroup);
const float cend = s_cum[Q - 1];
if (tid < Q) s_w[tid] = s_dt[tid] * metal::exp(cend - s_cum[tid]);  // weight of step tid at the chunk's end
threadgroup_barrier(mem_flags::mem_threadgroup);

const size_t HP = (size_t)nH * nP, GN = (size_t)nG * nN;
const device T* xb = x + ((size_t)b * nL + t0) * HP + (size_t)h * nP;   // x[t0 + s][h][p] = xb[s * HP + p]
const device T* Bb = Bm + ((size_t)b * nL + t0) * GN + (size_t)g * nN;  // Bm[t0 + s][g][n] = Bb[s * GN + n]
device float* So = chunk_states + ((size_t)bh * NC + c) * nP * nN;
const int tp = tid / 16, tn = tid % 16;

for (int p0 = 0; p0 < nP; p0 += 64) {
  for (int n0 = 0; n0 < nN; n0 += 128) {
    float acc[4][8];
#pragma clang loop unroll(full)
    for (int i = 0; i < 4; ++i)
#pragma clang loop unroll(full)
      for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
    for (int s0 = 0; s0 < Q; s0 += KS) {
      threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous tile has been consumed
      for (int i = tid; i < KS * 64; i += 256) {
        const int k = i / 64, p = i % 64, s = s0 + k;
        sX[k * XS + p] = (s < len && p0 + p < nP) ? s_w[s] * static_cast<float>(xb[s * HP + p0 + p]) : 0.0f;
      }
      for (int i = tid; i < KS * 128; i += 256) {
        const int k = i / 128, n = i % 128, s = s0 + k;
        sB[k * BS + n] = (s < len && n0 + n < nN) ? static_cast<float>(Bb[s * GN + n0 + n]) : 0.0f;
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
#pragma clang loop unroll_count(4)
      for (int k = 0; k < KS; ++k) {
        const float4 a = *reinterpret_cast<const threadgroup float4*>(&sX[k * XS + 4 * tp]);
        const float4 u = *reinterpret_cast<const threadgroup float4*>(&sB[k * BS + 8 * tn]);
        const float4 v = *reinterpret_cast<const threadgroup float4*>(&sB[k * BS + 8 * tn + 4]);
        const float av[4] = {a.x, a.y, a.z, a.w};
        const float bv[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
#pragma clang loop unroll(full)
        for (int i = 0; i < 4; ++i)
#pragma clang loop unroll(full)
          for (int j = 0; j < 8; ++j) acc[i][j] = metal::fma(av[i], bv[j], acc[i][j]);
      }
    }
#pragma clang loop unroll(full)
    for (int i = 0; i < 4; ++i) {
      const int p = p0 + 4 * tp + i;
      if (p < nP) {
#pragma clang loop unroll(full)
        for (int j = 0; j < 8; ++j) {
          const int n = n0 + 8 * tn + j;
          if (n < nN) So[(size_t)p * nN + n] = acc[i][j];
        }
      }
    }
  }
}
if (tid == 0) chunk_decay[(size_t)bh * NC + c] = cend;
