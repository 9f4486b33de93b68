// attention, expert prefill: tiled flash attention. One threadgroup per BQ = 8 * NSG query rows of one
// (b, h); simdgroup sg owns rows q0 + 8 sg .. q0 + 8 sg + 7 and keeps, in 8x8 simdgroup_matrix
// fragments, its Q rows (D / 8 fragments) and its output accumulator O (D / 8 fragments).
// Per tile of BK keys (K and V staged in threadgroup memory as float, K transposed):
//   S = Q K^T                      (8 x BK per simdgroup; Q pre-scaled by log2(e) / sqrt(D))
//   m_new = max(m, rowmax S),  P = exp2(S - m_new),  corr = exp2(m - m_new)
//   l = corr l + rowsum P,     O = diag(corr) O + P V
// and at the end o = diag(1 / l) O. The exp2 trick: folding log2(e) into the scale makes every
// exponential an exp2 of the same value exp would have taken. Masked scores (keys past Tk, or past the
// bottom-right causal diagonal j <= i + Tk - Tq) get P = 0 explicitly and never enter the maximum, so
// no infinity is ever formed; with CAUSAL = 1 the key loop stops at the last key the tile's last row
// sees, so blocks entirely above the diagonal are never loaded.
// The softmax works on the scores through threadgroup memory (simdgroup_store, then plain per-lane
// code: lane owns row lane / 4 and BK / 4 of its columns; row reductions over the 4 lanes of a quad by
// simd_shuffle_xor), so nothing depends on how a fragment's elements are spread over lanes. The per-row
// rescale of O is an MMA with an 8x8 diagonal matrix for the same reason.
//
// Layouts (row-major): q, o (B, Hq, Tq, D); k, v (B, Hkv, Tk, D), all T (float, half or bfloat16_t);
// GQA: head h reads KV head h / (Hq / Hkv). Scalars: Hq, Hkv, Tq, Tk, CAUSAL. Template ints: D (head dim,
// a multiple of 8), BK (keys per tile, a multiple of 8), NSG (simdgroups). Grid: (32 NSG ceil(Tq / BQ),
// Hq, B) threads, threadgroups of 32 NSG: every threadgroup is full, every thread reaches every barrier.
constexpr int BQ = 8 * NSG;
constexpr int LDQ = D + 4;   // row stride (floats) of the Q, V and O tiles: 16 bytes of padding
constexpr int LDK = BK + 4;  // row stride of the transposed K tile (D rows of BK keys)
constexpr int KV_FLOATS = D * LDK + BK * LDQ;
constexpr int TILE_FLOATS = KV_FLOATS > BQ * LDQ ? KV_FLOATS : BQ * LDQ;
constexpr int PER = BK / 4;  // score columns per lane
constexpr uint NT = 32 * NSG;
threadgroup float tiles[TILE_FLOATS];  // the Q tile, then K^T and V per key tile, then the O tile
threadgroup float scores[NSG * 8 * BK];  // per simdgroup: its 8 x BK scores, then probabilities
threadgroup float diags[NSG * 64];       // per simdgroup: one 8x8 diagonal matrix

const uint qt = threadgroup_position_in_grid.x;
const uint h = threadgroup_position_in_grid.y;
const uint b = threadgroup_position_in_grid.z;
const uint tid = thread_index_in_threadgroup;
const uint sg = simdgroup_index_in_threadgroup;
const uint lane = thread_index_in_simdgroup;
const int nHq = Hq, nHkv = Hkv, nTq = Tq, nTk = Tk;
const bool causal = CAUSAL != 0;
const int offset = nTk - nTq;  // row i sees keys j <= i + offset when causal
const uint g = h / uint(nHq / nHkv);
const int q0 = int(qt) * BQ;
const device T* qh = q + (b * uint(nHq) + h) * uint(nTq) * uint(D);
const device T* kh = k + (b * uint(nHkv) + g) * uint(nTk) * uint(D);
const device T* vh = v + (b * uint(nHkv) + g) * uint(nTk) * uint(D);
device T* oh = o + (b * uint(nHq) + h) * uint(nTq) * uint(D);
const float qscale = 1.4426950408889634f / metal::sqrt(float(D));  // log2(e) / sqrt(D)

// 1. The Q tile, scaled (rows past Tq are zero), then each simdgroup's fragments.
for (uint e = tid; e < uint(BQ * D); e += NT) {
  const int r = int(e) / D, d = int(e) % D;
  const int i = q0 + r;
  tiles[r * LDQ + d] = i < nTq ? static_cast<float>(qh[uint(i) * uint(D) + uint(d)]) * qscale : 0.0f;
}
threadgroup_barrier(mem_flags::mem_threadgroup);
simdgroup_float8x8 qf[D / 8];
simdgroup_float8x8 of[D / 8];
simdgroup_float8x8 zero = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
for (int dc = 0; dc < D / 8; ++dc) {
  simdgroup_load(qf[dc], tiles + int(sg) * 8 * LDQ + dc * 8, LDQ);
  of[dc] = zero;
}
threadgroup float* my_scores = scores + int(sg) * 8 * BK;
threadgroup float* my_diag = diags + int(sg) * 64;
for (uint e = lane; e < 64; e += 32) my_diag[e] = 0.0f;

const int rr = int(lane) / 4;   // this lane's row within the simdgroup's 8
const int quarter = int(lane) % 4;
const int my_i = q0 + int(sg) * 8 + rr;
float m_row = -3.0e38f;  // running max (log2 units); a finite stand-in for -inf
float l_row = 0.0f;      // running sum of exp2(s - m_row)

// Keys any row of this tile sees: all, or up to the last row's diagonal.
const int kend = causal ? metal::min(nTk, q0 + BQ + offset) : nTk;
threadgroup float* kt = tiles;                // K^T: D rows x BK keys (stride LDK)
threadgroup float* vt = tiles + D * LDK;      // V: BK keys x D (stride LDQ)
threadgroup_barrier(mem_flags::mem_threadgroup);  // every simdgroup holds its Q before K overwrites it

for (int kb = 0; kb < kend; kb += BK) {
  // 2. Stage K (transposed) and V of keys kb .. kb + BK - 1 as float; keys past Tk are zero.
  for (uint e = tid; e < uint(BK * D); e += NT) {
    const int jj = int(e) / D, d = int(e) % D;
    const int j = kb + jj;
    float kx = 0.0f, vx = 0.0f;
    if (j < nTk) {
      kx = static_cast<float>(kh[uint(j) * uint(D) + uint(d)]);
      vx = static_cast<float>(vh[uint(j) * uint(D) + uint(d)]);
    }
    kt[d * LDK + jj] = kx;
    vt[jj * LDQ + d] = vx;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // 3. S = Q K^T for this simdgroup's 8 rows, stored to its score tile.
  for (int kc = 0; kc < BK / 8; ++kc) {
    simdgroup_float8x8 sf = zero;
    for (int dc = 0; dc < D / 8; ++dc) {
      simdgroup_float8x8 kf;
      simdgroup_load(kf, kt + dc * 8 * LDK + kc * 8, LDK);
      simdgroup_multiply_accumulate(sf, qf[dc], kf, sf);
    }
    simdgroup_store(sf, my_scores + kc * 8, BK);
  }
  simdgroup_barrier(mem_flags::mem_threadgroup);

  // 4. Online softmax of row rr over this tile (4 lanes per row, PER columns each).
  float sv[PER];
  bool vis[PER];
  float bmax = -3.0e38f;
  for (int e = 0; e < PER; ++e) {
    const int c = quarter * PER + e;
    const int j = kb + c;
    vis[e] = j < nTk && (!causal || j <= my_i + offset);
    sv[e] = my_scores[rr * BK + c];
    if (vis[e]) bmax = metal::max(bmax, sv[e]);
  }
  bmax = metal::max(bmax, metal::simd_shuffle_xor(bmax, ushort(1)));
  bmax = metal::max(bmax, metal::simd_shuffle_xor(bmax, ushort(2)));
  const float m_new = metal::max(m_row, bmax);
  const float corr = metal::fast::exp2(m_row - m_new);
  float psum = 0.0f;
  for (int e = 0; e < PER; ++e) {
    const float p = vis[e] ? metal::fast::exp2(sv[e] - m_new) : 0.0f;
    my_scores[rr * BK + quarter * PER + e] = p;
    psum += p;
  }
  psum += metal::simd_shuffle_xor(psum, ushort(1));
  psum += metal::simd_shuffle_xor(psum, ushort(2));
  l_row = l_row * corr + psum;
  m_row = m_new;
  if (quarter == 0) my_diag[rr * 9] = corr;
  simdgroup_barrier(mem_flags::mem_threadgroup);

  // 5. O = diag(corr) O + P V.
  simdgroup_float8x8 df;
  simdgroup_load(df, my_diag, 8);
  simdgroup_float8x8 pf[BK / 8];
  for (int kc = 0; kc < BK / 8; ++kc) simdgroup_load(pf[kc], my_scores + kc * 8, BK);
  for (int dc = 0; dc < D / 8; ++dc) {
    simdgroup_float8x8 acc;
    simdgroup_multiply_accumulate(acc, df, of[dc], zero);
    for (int kc = 0; kc < BK / 8; ++kc) {
      simdgroup_float8x8 vf;
      simdgroup_load(vf, vt + kc * 8 * LDQ + dc * 8, LDQ);
      simdgroup_multiply_accumulate(acc, pf[kc], vf, acc);
    }
    of[dc] = acc;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // the tile is read by all before the next overwrites it
}

// 6. o = diag(1 / l) O, staged through threadgroup memory (rows past Tq are not written).
if (quarter == 0) my_diag[rr * 9] = l_row > 0.0f ? 1.0f / l_row : 0.0f;
simdgroup_barrier(mem_flags::mem_threadgroup);
simdgroup_float8x8 dinv;
simdgroup_load(dinv, my_diag, 8);
threadgroup_barrier(mem_flags::mem_threadgroup);
threadgroup float* my_o = tiles + int(sg) * 8 * LDQ;
for (int dc = 0; dc < D / 8; ++dc) {
  simdgroup_float8x8 res;
  simdgroup_multiply_accumulate(res, dinv, of[dc], zero);
  simdgroup_store(res, my_o + dc * 8, LDQ);
}
simdgroup_barrier(mem_flags::mem_threadgroup);
for (uint e = lane; e < uint(8 * D); e += 32) {
  const int r = int(e) / D, d = int(e) % D;
  const int i = q0 + int(sg) * 8 + r;
  if (i < nTq) oh[uint(i) * uint(D) + uint(d)] = static_cast<T>(my_o[r * LDQ + d]);
}
