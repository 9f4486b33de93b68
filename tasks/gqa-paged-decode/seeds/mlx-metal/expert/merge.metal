// gqa-paged-decode, expert, pass 2: one threadgroup of D threads per (sequence b, query head h). Simdgroup 0
// sums the work items of the sequences before b (simd_sum, 32 at a time): b's items follow. Each thread
// merges its dim over the sequence's items against their largest max M:
//   o = sum_i 2^(m_i - M) acc_i / sum_i 2^(m_i - M) l_i,   lse = M + log2(sum_i 2^(m_i - M) l_i)
// (scores were in log2 units, so lse is log2(sum_j exp(s_j)) of the unscaled scores, as the task defines it).
// Layouts as in split.metal; o (B, Hq, D) in T, lse (B, Hq) float32. Scalar: B. Template ints: D, Hq, CH.
// Grid (D B Hq, 1, 1), threadgroups of D.
threadgroup int tg_start[1];
const uint blk = threadgroup_position_in_grid.x;
const int b = int(blk / uint(Hq));
const uint h = blk % uint(Hq);
const uint d = thread_index_in_threadgroup;
if (simdgroup_index_in_threadgroup == 0) {
  int base = 0;
  for (int b0 = 0; b0 < b; b0 += 32) {
    const int bb = b0 + int(thread_index_in_simdgroup);
    const int cnt = bb < b ? (kv_indptr[bb + 1] - kv_indptr[bb] + CH - 1) / CH : 0;
    base += metal::simd_sum(cnt);
  }
  if (thread_index_in_simdgroup == 0) tg_start[0] = base;
}
threadgroup_barrier(mem_flags::mem_threadgroup);
const int items = (kv_indptr[b + 1] - kv_indptr[b] + CH - 1) / CH;
const device float* r = part + (ulong(tg_start[0]) * ulong(Hq) + ulong(h)) * ulong(D + 2);
const ulong stride = ulong(Hq) * ulong(D + 2);
float mm = -3.0e38f;
for (int i = 0; i < items; ++i) mm = metal::max(mm, r[ulong(i) * stride + ulong(D)]);
float acc = 0.0f, ll = 0.0f;
for (int i = 0; i < items; ++i) {
  const float f = metal::exp2(r[ulong(i) * stride + ulong(D)] - mm);
  acc = metal::fma(f, r[ulong(i) * stride + ulong(d)], acc);
  ll = metal::fma(f, r[ulong(i) * stride + ulong(D) + 1], ll);
}
o[(ulong(b) * ulong(Hq) + ulong(h)) * ulong(D) + ulong(d)] = static_cast<T>(acc / ll);
if (d == 0) lse[ulong(b) * ulong(Hq) + ulong(h)] = mm + metal::log2(ll);
