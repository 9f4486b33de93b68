// mamba-scan, expert: a chunked parallel scan over time.
//
// Per channel (b, d) and state n the recurrence h_t = a_t * h_{t-1} + b_t, with a_t = exp(dt_t * A[d, n])
// and b_t = dt_t * u_t * Bm[b, n, t], is a composition of affine maps; composing (P1, S1) then (P2, S2)
// gives (P2 * P1, P2 * S1 + S2), an associative operator, so it can be scanned in parallel.
//
// Work split: one simdgroup (32 lanes) per channel; a threadgroup of (32, DB) threads holds DB channels of
// one batch row b (grid y = channel, grid z = batch row; the grid's y is a multiple of DB, so every
// threadgroup is whole and channels past D only help with the tiles). Time goes in tiles of
// TL = 32 * ITEMS steps; lane l owns the ITEMS consecutive steps t0 + l*ITEMS + i, so a simdgroup's loads
// of u, delta, z and stores of y cover one contiguous stretch of the row. Per tile:
//   1. the threadgroup stages Bm[b, :, tile] and Cm[b, :, tile] in threadgroup memory as float:
//      contiguous loads, many in flight per thread, read by all DB channels of the threadgroup;
//   2. each lane computes dt = softplus(delta + delta_bias) and dt * u for its steps;
//   3. for each n: the lane composes its steps into one map (P, S) (S = its scan from h = 0); the state
//      entering the tile (carry[n]) is folded into lane 0's S; an inclusive simd scan (simd_shuffle_up,
//      5 rounds) then leaves in S the state after each lane's last step. A lane's incoming state is lane
//      l-1's S (lane 0: the carry) and lane 31's S is the next tile's carry. The lane replays its steps
//      from its incoming state and accumulates y_t += h_t * Cm[b, n, t];
//   4. y = (y + Dskip * u) * silu(z), stored as T.
// Steps past L get dt = 0 (a = 1, b = 0: the identity), so the carry passes through them unchanged.
// Everything is float; T (float or float16_t) appears only in the store of y.
//
// Layouts (row-major): u, delta, z, y (B, D, L) in T; A (D, NS) float; Bm, Cm (B, NS, L) in T;
// Dskip, delta_bias (D) float; state (B, D, NS) float. Scalars D, L are ints.
// Template: T, NS = N, ITEMS. Threadgroup memory: 2 * NS * 32 * (ITEMS + 1) floats (at most 32 KB).
constexpr int TL = 32 * ITEMS;         // time steps per tile
constexpr int ROW = 32 * (ITEMS + 1);  // a padded row: tile step j sits at j + j / ITEMS, so lanes
                                       // reading steps l * ITEMS + i hit distinct banks
threadgroup float sB[NS * ROW];
threadgroup float sC[NS * ROW];

const uint nD = uint(D), nL = uint(L);
const uint lane = thread_position_in_threadgroup.x;
const uint d = thread_position_in_grid.y;  // this simdgroup's channel
const uint b = thread_position_in_grid.z;
const bool active = d < nD;  // uniform over the simdgroup; inactive ones still load tiles and reach barriers
const uint tid = thread_position_in_threadgroup.y * 32 + lane;
const uint nthreads = threads_per_threadgroup.x * threads_per_threadgroup.y;

const uint row = (b * nD + (active ? d : 0)) * nL;  // the channel's first element in u, delta, z, y
const uint brow = b * NS * nL;                      // batch row b of Bm and Cm

float a2[NS], carry[NS];
#pragma clang loop unroll(full)
for (int n = 0; n < NS; ++n) {
  a2[n] = active ? A[d * NS + n] * M_LOG2E_F : 0.0f;  // exp(dt * A) = exp2(dt * A * log2(e))
  carry[n] = 0.0f;                                     // h_{-1} = 0
}
const float bias = active ? delta_bias[d] : 0.0f;
const float dskip = active ? Dskip[d] : 0.0f;

for (uint t0 = 0; t0 < nL; t0 += TL) {
  // 1. Stage the tile of Bm and Cm (zeros past L). Consecutive threads take consecutive steps; the
  //    unrolled loop over n puts 2 * NS independent loads in flight per thread.
  for (uint j = tid; j < uint(TL); j += nthreads) {
    const uint t = t0 + j, s = j + j / ITEMS;
    const bool inside = t < nL;
#pragma clang loop unroll(full)
    for (int n = 0; n < NS; ++n) {
      sB[n * ROW + s] = inside ? float(Bm[brow + n * nL + t]) : 0.0f;
      sC[n * ROW + s] = inside ? float(Cm[brow + n * nL + t]) : 0.0f;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  if (active) {
    // 2. This lane's steps.
    const uint tl = t0 + lane * ITEMS;  // the lane's first step
    float dt[ITEMS], ut[ITEMS], du[ITEMS], yacc[ITEMS];
#pragma clang loop unroll(full)
    for (int i = 0; i < ITEMS; ++i) {
      const uint t = tl + i;
      dt[i] = 0.0f;
      ut[i] = 0.0f;
      if (t < nL) {
        dt[i] = softplus_f(float(delta[row + t]) + bias);
        ut[i] = float(u[row + t]);
      }
      du[i] = dt[i] * ut[i];
      yacc[i] = 0.0f;
    }
    const uint s0 = lane * (ITEMS + 1);  // the lane's first step in a padded row

#pragma clang loop unroll(full)
    for (int n = 0; n < NS; ++n) {
      // 3a. The lane's steps as one map h -> P * h + S.
      float a[ITEMS], bx[ITEMS];
      float P = 1.0f, S = 0.0f;
#pragma clang loop unroll(full)
      for (int i = 0; i < ITEMS; ++i) {
        a[i] = metal::exp2(dt[i] * a2[n]);
        bx[i] = du[i] * sB[n * ROW + s0 + i];
        S = a[i] * S + bx[i];
        P *= a[i];
      }
      // 3b. Inclusive simd scan; with the carry folded into lane 0, S becomes the true state.
      if (lane == 0) {
        S += P * carry[n];
      }
#pragma clang loop unroll(full)
      for (ushort off = 1; off < 32; off *= 2) {
        const float Pp = simd_shuffle_up(P, off);
        const float Sp = simd_shuffle_up(S, off);
        if (lane >= off) {  // (Pp, Sp) comes first: (P, S) o (Pp, Sp) = (P * Pp, P * Sp + S)
          S += P * Sp;
          P *= Pp;
        }
      }
      float h = simd_shuffle_up(S, ushort(1));  // the state entering this lane's steps
      if (lane == 0) {
        h = carry[n];
      }
      carry[n] = simd_shuffle(S, ushort(31));  // the state after the tile
      // 3c. Replay the lane's steps from its incoming state.
#pragma clang loop unroll(full)
      for (int i = 0; i < ITEMS; ++i) {
        h = a[i] * h + bx[i];
        yacc[i] += h * sC[n * ROW + s0 + i];
      }
    }

    // 4. Skip connection and gate.
#pragma clang loop unroll(full)
    for (int i = 0; i < ITEMS; ++i) {
      const uint t = tl + i;
      if (t < nL) {
        const float zt = float(z[row + t]);
        y[row + t] = static_cast<T>((yacc[i] + dskip * ut[i]) * (zt / (1.0f + metal::exp(-zt))));
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // the next tile overwrites sB and sC
}

if (active && lane == 0) {
#pragma clang loop unroll(full)
  for (int n = 0; n < NS; ++n) {
    state[(b * nD + d) * NS + n] = carry[n];
  }
}
