// attention, expert decode, pass 1 (split-K): one threadgroup per (key slice s, KV head g, batch row b).
// It reads keys j0 .. j1 - 1 of K and V for head g exactly once and scores them against ALL the query
// rows that use head g: the Hq / Hkv heads h = g * (Hq / Hkv) + hl and their Tq rows i, R = (Hq / Hkv) Tq
// rows in all (r = hl * Tq + i; at most MAXR, held in registers). So each K/V byte is read once per KV
// head, not once per query head.
// Simdgroup sg takes keys j0 + sg, j0 + sg + DSG, ...; lane owns D / 32 consecutive elements of every
// q row, of the key and value rows and of every accumulator. Per key: one simd_sum per row gives the
// score (q pre-scaled by log2(e) / sqrt(D), so exponentials are exp2), then an online-softmax update of
// (m, l, acc) for that row, unless the causal mask hides the key from it (j > i + Tk - Tq).
// The DSG simdgroups then merge through threadgroup memory into one partial per (row, slice):
//   part_m = M = max_sg m_sg,  part_l = sum_sg exp2(m_sg - M) l_sg,  part_o = sum_sg exp2(m_sg - M) acc_sg
// A slice with no visible key leaves M = -3e38 (finite stand-in for -inf), l = 0, acc = 0: the combine
// pass gives it weight exp2(-3e38 - M') = 0.
//
// Layouts (row-major): q (B, Hq, Tq, D), k, v (B, Hkv, Tk, D) in T; part_m, part_l (B, Hq, Tq, NSPLIT)
// and part_o (B, Hq, Tq, NSPLIT, D) in float32; the row of (b, h, i) is (b * Hq + h) * Tq + i =
// (b * Hkv + g) * R + r. Scalars: Hq, Hkv, Tq, Tk, CAUSAL. Template ints: D (a multiple of 32), DSG
// (simdgroups), MAXR (most rows), NSPLIT (slices). Grid (32 DSG NSPLIT, Hkv, B), threadgroups of 32 DSG.
constexpr int DL = D / 32;  // elements per lane
threadgroup float tg_m[DSG * MAXR];
threadgroup float tg_l[DSG * MAXR];
threadgroup float tg_o[DSG * D];

const uint s = threadgroup_position_in_grid.x;
const uint g = threadgroup_position_in_grid.y;
const uint b = threadgroup_position_in_grid.z;
const uint tid = thread_index_in_threadgroup;
const uint sg = simdgroup_index_in_threadgroup;
const uint lane = thread_index_in_simdgroup;
const int nHq = Hq, nHkv = Hkv, nTq = Tq, nTk = Tk;
const bool causal = CAUSAL != 0;
const int offset = nTk - nTq;
const int R = (nHq / nHkv) * nTq;  // <= MAXR (the plan's `when`)
const uint row0 = (b * uint(nHkv) + g) * uint(R);
const float qscale = 1.4426950408889634f / metal::sqrt(float(D));  // log2(e) / sqrt(D)

float qv[MAXR][DL];
float acc[MAXR][DL];
float m[MAXR];
float l[MAXR];
for (int r = 0; r < MAXR; ++r) {
  for (int c = 0; c < DL; ++c) {
    qv[r][c] = r < R ? static_cast<float>(q[(row0 + uint(r)) * uint(D) + lane * uint(DL) + uint(c)]) * qscale : 0.0f;
    acc[r][c] = 0.0f;
  }
  m[r] = -3.0e38f;
  l[r] = 0.0f;
}

const int per = (nTk + NSPLIT - 1) / NSPLIT;  // keys per slice
const int j0 = int(s) * per;
const int j1 = metal::min(nTk, j0 + per);
const device T* kh = k + (b * uint(nHkv) + g) * uint(nTk) * uint(D) + lane * uint(DL);
const device T* vh = v + (b * uint(nHkv) + g) * uint(nTk) * uint(D) + lane * uint(DL);
for (int j = j0 + int(sg); j < j1; j += DSG) {
  float kx[DL], vx[DL];
  for (int c = 0; c < DL; ++c) {
    kx[c] = static_cast<float>(kh[uint(j) * uint(D) + uint(c)]);
    vx[c] = static_cast<float>(vh[uint(j) * uint(D) + uint(c)]);
  }
  for (int r = 0; r < MAXR; ++r) {
    if (r < R) {  // uniform over the simdgroup, so simd_sum sees all 32 lanes
      float part = 0.0f;
      for (int c = 0; c < DL; ++c) part = metal::fma(qv[r][c], kx[c], part);
      const float sc = metal::simd_sum(part);
      const int i = r % nTq;
      if (!causal || j <= i + offset) {
        const float m_new = metal::max(m[r], sc);
        const float corr = metal::fast::exp2(m[r] - m_new);
        const float p = metal::fast::exp2(sc - m_new);
        l[r] = l[r] * corr + p;
        for (int c = 0; c < DL; ++c) acc[r][c] = metal::fma(acc[r][c], corr, p * vx[c]);
        m[r] = m_new;
      }
    }
  }
}

// Merge the DSG simdgroups' states, one row at a time (every thread reaches every barrier).
if (lane == 0) {
  for (int r = 0; r < MAXR; ++r) {
    tg_m[sg * MAXR + uint(r)] = m[r];
    tg_l[sg * MAXR + uint(r)] = l[r];
  }
}
threadgroup_barrier(mem_flags::mem_threadgroup);
for (int r = 0; r < MAXR; ++r) {
  float mx = -3.0e38f;
  for (int t = 0; t < DSG; ++t) mx = metal::max(mx, tg_m[t * MAXR + r]);
  const float w = metal::fast::exp2(m[r] - mx);
  for (int c = 0; c < DL; ++c) tg_o[sg * uint(D) + lane * uint(DL) + uint(c)] = acc[r][c] * w;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (r < R) {
    const uint prow = (row0 + uint(r)) * uint(NSPLIT) + s;
    for (uint d = tid; d < uint(D); d += 32 * DSG) {
      float sum = 0.0f;
      for (int t = 0; t < DSG; ++t) sum += tg_o[t * D + int(d)];
      part_o[prow * uint(D) + d] = sum;
    }
    if (tid == 0) {
      float lsum = 0.0f;
      for (int t = 0; t < DSG; ++t) lsum += tg_l[t * MAXR + r] * metal::fast::exp2(tg_m[t * MAXR + r] - mx);
      part_m[prow] = mx;
      part_l[prow] = lsum;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
