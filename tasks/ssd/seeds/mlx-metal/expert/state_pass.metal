// ssd, expert, launch 3 of 4: carry the state across chunks.
//
// One thread per state entry (b, h, p, n): walking the chunks in order from S = 0,
//     carry[c] = S  (the state entering chunk c);   S = exp(cum_end[c]) * S + S_c
// where S_c is chunk c's own contribution and cum_end[c] = sum of dt * A over the chunk (launch 2).
// The final S is the output state. Consecutive threads are consecutive n: every access is coalesced, and
// the loads of chunk_states / chunk_decay do not depend on S, so they can be in flight early.
//
// Layouts: chunk_states, carry (B, H, NC, P, N) f32; chunk_decay (B, H, NC) f32; state (B, H, P, N) f32.
// Scalars: B, H, P, N, L. Template: Q (chunk length).
const int nL = L, NC = (nL + Q - 1) / Q;
const size_t PN = (size_t)P * N;
const size_t total = (size_t)B * H * PN;
const size_t idx = (size_t)thread_position_in_grid.x;
if (idx >= total) return;  // no barriers in this kernel
const size_t bh = idx / PN, r = idx % PN;
const device float* Sc = chunk_states + bh * NC * PN + r;
device float* Ci = carry + bh * NC * PN + r;
const device float* dec = chunk_decay + bh * NC;
float S = 0.0f;
#pragma clang loop unroll_count(4)
for (int c = 0; c < NC; ++c) {
  Ci[c * PN] = S;
  S = metal::fma(metal::exp(dec[c]), S, Sc[c * PN]);
}
state[idx] = S;
