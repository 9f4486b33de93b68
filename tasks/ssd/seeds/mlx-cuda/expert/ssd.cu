// ssd, expert: the whole chunked SSD in one launch.
//
// One block of 256 threads (8 warps) per (p-tile of PT head dimensions, b * H + h). It walks the chunks of
// Q steps in order and keeps the state's PT x N slice S in shared memory (float), so no per-chunk state
// ever goes to device memory. Per chunk (t0 = c Q, len = min(Q, L - t0); t, s index the chunk's steps),
// with dt_s = clip(softplus(dt + dt_bias), 0.001, 100) and cum_t = sum_{s <= t} dt_s A_h (inclusive):
//   1. M[t, s] = (C_t . B_s) exp(cum_t - cum_s) dt_s for s <= t, else 0           (Q x Q, K = N)
//   2. y[t, p] = exp(cum_t) (C_t . S[p, :]) + sum_s M[t, s] x_s[p] + D_h x_t[p]   (Q x PT, K = N and Q)
//   3. S[p, n] = exp(cum_end) S[p, n] + sum_s (w_s x_s[p]) B_s[n],  w_s = exp(cum_end - cum_s) dt_s
// Steps past L read as zero (dt = 0: they add nothing, and the decay stays put). The next chunk's C, B and x
// are copied into a second buffer (cp.async) while this one is computed.
//
// bf16 / f16 (T of 2 bytes): the three products run on the tensor cores (mma.sync m16n8k16, f32
// accumulators, tc.h). C, B and x enter as they are (exact); the float operands S, M and w x enter as a
// hi + lo pair of 16-bit values (two MMAs), so every product keeps ~16 bits more than one rounding would:
// the only rounding of y that matters is its final one. float (T of 4 bytes): the same walk with plain
// float FMA from shared memory (exact float32 arithmetic, as the float32 tolerance wants).
//
// Layouts (row-major): x, y (B, L, H, P) in T; dt (B, L, H) in T; Bm, Cm (B, L, G, N) in T; A_log, Dskip,
// dt_bias (H) f32; state (B, H, P, N) f32. Scalars: L[0], H[0], G[0], P[0], N[0]. Template: Q (chunk
// length, a multiple of 16), PT (p-tile, a multiple of 16). Shared memory (dynamic, plan.toml): the larger of
// the two paths' layouts below.
extern __shared__ __align__(16) unsigned char ssd_smem[];
const int nL = L[0], nH = H[0], nG = G[0], nP = P[0], nN = N[0];
const int NC = (nL + Q - 1) / Q;
const int pt0 = blockIdx.x * PT;  // first head dimension of this block
const int bh = blockIdx.y, b = bh / nH, h = bh % nH, g = h / (nH / nG);
const int tid = threadIdx.x;
const float Ah = -expf(A_log[h]), dtb = dt_bias[h], Dh = Dskip[h];
const size_t HP = (size_t)nH * nP, GN = (size_t)nG * nN;
const T* xh = x + (size_t)b * nL * HP + (size_t)h * nP + pt0;  // x[t][p] = xh[t * HP + p] (p within the tile)
T* yh = y + (size_t)b * nL * HP + (size_t)h * nP + pt0;
const T* Bg = Bm + (size_t)b * nL * GN + (size_t)g * nN;       // Bm[t][n] = Bg[t * GN + n]
const T* Cg = Cm + (size_t)b * nL * GN + (size_t)g * nN;
const T* dth = dt + (size_t)b * nL * nH + h;                     // dt[t] = dth[t * nH]
const int pw = min(PT, nP - pt0);                                // head dimensions of this tile that exist

if (sizeof(T) == 2) {
  // ---------------------------------------------------------------- tensor-core path (bf16, f16)
  // Shared memory (T = 16-bit; N16 = N rounded up to 16, columns past N are zero):
  //   sS  float [PT][N16 + 8]            the state slice (rows padded: conflict-free fragment reads)
  //   sC, sB  T [2][Q][N16 + 8]          C_t, B_s of the chunk, double-buffered (the next chunk's copies
  //   sX  T [2][Q][PT + 8]               and x_s (tile columns)   fly while this one is computed)
  //   sMh, sMl T [Q][Q + 8]              M as hi + lo
  //   s_dt float [2][Q], s_cum, s_w, s_ec float [Q]
  // Fragments along s (B of the state product, x in both products) are gathered as 16-bit pairs from
  // these natural layouts; the paddings keep every fragment access free of bank conflicts.
  constexpr int XS = Q + 8, XN = PT + 8;
  constexpr int JY = PT / 16;  // n8 tiles per warp in the y product (a warp owns 16 t x PT / 2 p)
  const int N16 = (nN + 15) / 16 * 16, CS = N16 + 8, SS = N16 + 8, NT = N16 / 8;
  const int warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  float* sS = reinterpret_cast<float*>(ssd_smem);
  T* sC0 = reinterpret_cast<T*>(sS + PT * SS);
  T* sB0 = sC0 + 2 * Q * CS;
  T* sX0 = sB0 + 2 * Q * CS;
  T* sMh = sX0 + 2 * Q * XN;
  T* sMl = sMh + Q * XS;
  float* s_dt0 = reinterpret_cast<float*>(sMl + Q * XS);
  float* s_cum = s_dt0 + 2 * Q;
  float* s_w = s_cum + Q;
  float* s_ec = s_w + Q;
  const bool vec = nN % 8 == 0 && nP % 8 == 0;  // 16-byte copies of B, C and x (else plain loads)

  // Copies chunk cc's C, B and x into buffer k (asynchronously when vec), zeros past L, N and P.
  auto stage = [&](int cc, int k) {
    const int u0 = cc * Q, ulen = min(Q, nL - u0);
    T* dC = sC0 + k * Q * CS;
    T* dB = sB0 + k * Q * CS;
    T* dX = sX0 + k * Q * XN;
    if (vec) {
      const int NU = N16 / 8;
      for (int i = tid; i < Q * NU; i += 256) {
        const int t = i / NU, n = (i % NU) * 8;
        const bool ok = t < ulen && n < nN;
        const size_t off = ok ? (size_t)(u0 + t) * GN + n : 0;
        ssd_cp16(dC + t * CS + n, Cg + off, ok);
        ssd_cp16(dB + t * CS + n, Bg + off, ok);
      }
      constexpr int PU = PT / 8;
      for (int i = tid; i < Q * PU; i += 256) {
        const int t = i / PU, p = (i % PU) * 8;
        const bool ok = t < ulen && p < pw;
        ssd_cp16(dX + t * XN + p, xh + (ok ? (size_t)(u0 + t) * HP + p : 0), ok);
      }
      ssd_cp_commit();
    } else {
      for (int i = tid; i < Q * N16; i += 256) {
        const int t = i / N16, n = i % N16;
        const bool ok = t < ulen && n < nN;
        dC[t * CS + n] = ok ? Cg[(size_t)(u0 + t) * GN + n] : static_cast<T>(0.0f);
        dB[t * CS + n] = ok ? Bg[(size_t)(u0 + t) * GN + n] : static_cast<T>(0.0f);
      }
      for (int i = tid; i < Q * PT; i += 256) {
        const int t = i / PT, p = i % PT;
        dX[t * XN + p] = (t < ulen && p < pw) ? xh[(size_t)(u0 + t) * HP + p] : static_cast<T>(0.0f);
      }
    }
  };
  // dt of step cc * Q + tid after bias, softplus and clip (0 past L); raw value fetched early, finished late.
  auto dt_raw = [&](int cc) -> float {
    const int t = cc * Q + tid;
    return (tid < Q && t < nL) ? static_cast<float>(dth[(size_t)t * nH]) : -1e30f;
  };
  auto dt_fin = [&](float a) -> float {
    if (a < -1e29f) return 0.0f;
    a += dtb;
    return fminf(fmaxf(a > 20.0f ? a : log1pf(expf(a)), 0.001f), 100.0f);
  };

  for (int i = tid; i < PT * SS; i += 256) sS[i] = 0.0f;
  stage(0, 0);
  if (tid < Q) s_dt0[tid] = dt_fin(dt_raw(0));
  for (int c = 0; c < NC; ++c) {
    const int t0 = c * Q, len = min(Q, nL - t0), k = c & 1;
    const T* sC = sC0 + k * Q * CS;
    const T* sB = sB0 + k * Q * CS;
    const T* sX = sX0 + k * Q * XN;
    const float* s_dt = s_dt0 + k * Q;
    ssd_cp_wait_all();
    __syncthreads();  // chunk c staged (every thread's copies) and chunk c - 1 done with the other buffer
    float dt_next = 0.0f;
    if (c + 1 < NC) {
      stage(c + 1, k ^ 1);
      dt_next = dt_raw(c + 1);
    }
    // ---- cumulative sums (each thread < Q sums in the same order, so cum_end is cum[Q - 1] exactly)
    if (tid < Q) {
      float run = 0.0f, mine = 0.0f;
      for (int kk = 0; kk < Q; ++kk) {
        run += s_dt[kk] * Ah;
        if (kk == tid) mine = run;
      }
      s_cum[tid] = mine;
      s_w[tid] = s_dt[tid] * expf(run - mine);
      s_ec[tid] = expf(mine);
    }
    __syncthreads();
    // ---- 1. M (Q x Q) on the tensor cores: m16 x n8 tiles on or below the diagonal
    {
      constexpr int MT = Q / 16, NT8 = Q / 8;
      for (int tile = warp; tile < MT * NT8; tile += 8) {
        const int mt = tile / NT8, nt = tile % NT8;
        if (nt > 2 * mt + 1) continue;  // s > t everywhere in this tile: never read by step 2
        const int tr = 16 * mt + gq, sc = 8 * nt + gq;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int k0 = 0; k0 < N16; k0 += 16) {
          const uint32_t a[4] = {ssd_ld32(sC + tr * CS + k0 + 2 * tq), ssd_ld32(sC + (tr + 8) * CS + k0 + 2 * tq),
                                 ssd_ld32(sC + tr * CS + k0 + 8 + 2 * tq), ssd_ld32(sC + (tr + 8) * CS + k0 + 8 + 2 * tq)};
          ssd_mma<T>(acc, a, ssd_ld32(sB + sc * CS + k0 + 2 * tq), ssd_ld32(sB + sc * CS + k0 + 8 + 2 * tq));
        }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int t = tr + 8 * hr, s = 8 * nt + 2 * tq;
          const float ct = s_cum[t];
          const float m0 = s <= t ? acc[2 * hr] * expf(ct - s_cum[s]) * s_dt[s] : 0.0f;
          const float m1 = s + 1 <= t ? acc[2 * hr + 1] * expf(ct - s_cum[s + 1]) * s_dt[s + 1] : 0.0f;
          uint32_t hi, lo;
          ssd_split<T>(m0, m1, hi, lo);
          *reinterpret_cast<uint32_t*>(sMh + t * XS + s) = hi;
          *reinterpret_cast<uint32_t*>(sMl + t * XS + s) = lo;
        }
      }
    }
    __syncthreads();
    // ---- 2. y = exp(cum_t) C S^T + M x + D x; a warp owns rows 16 mt .. (t) and columns pb .. pb + PT / 2 (p)
    for (int strip = warp; strip < Q / 8; strip += 8) {
      const int mt = strip / 2, pb = (strip % 2) * (PT / 2), tr = 16 * mt + gq;
      float acc[JY][4];
#pragma unroll
      for (int j = 0; j < JY; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
      if (c > 0) {  // the state entering the chunk (zero before the first)
        for (int k0 = 0; k0 < N16; k0 += 16) {
          const uint32_t a[4] = {ssd_ld32(sC + tr * CS + k0 + 2 * tq), ssd_ld32(sC + (tr + 8) * CS + k0 + 2 * tq),
                                 ssd_ld32(sC + tr * CS + k0 + 8 + 2 * tq), ssd_ld32(sC + (tr + 8) * CS + k0 + 8 + 2 * tq)};
#pragma unroll
          for (int j = 0; j < JY; ++j) {
            const float* sp = sS + (pb + 8 * j + gq) * SS + k0 + 2 * tq;
            const float2 v0 = *reinterpret_cast<const float2*>(sp);
            const float2 v1 = *reinterpret_cast<const float2*>(sp + 8);
            uint32_t h0, l0, h1, l1;
            ssd_split<T>(v0.x, v0.y, h0, l0);
            ssd_split<T>(v1.x, v1.y, h1, l1);
            ssd_mma<T>(acc[j], a, h0, h1);
            ssd_mma<T>(acc[j], a, l0, l1);
          }
        }
        const float e0 = s_ec[tr], e1 = s_ec[tr + 8];
#pragma unroll
        for (int j = 0; j < JY; ++j) {
          acc[j][0] *= e0; acc[j][1] *= e0; acc[j][2] *= e1; acc[j][3] *= e1;
        }
      }
      for (int ks = 0; ks <= mt; ++ks) {  // causal: s <= t
        const int k0 = 16 * ks;
        const uint32_t ah[4] = {ssd_ld32(sMh + tr * XS + k0 + 2 * tq), ssd_ld32(sMh + (tr + 8) * XS + k0 + 2 * tq),
                                ssd_ld32(sMh + tr * XS + k0 + 8 + 2 * tq), ssd_ld32(sMh + (tr + 8) * XS + k0 + 8 + 2 * tq)};
        const uint32_t al[4] = {ssd_ld32(sMl + tr * XS + k0 + 2 * tq), ssd_ld32(sMl + (tr + 8) * XS + k0 + 2 * tq),
                                ssd_ld32(sMl + tr * XS + k0 + 8 + 2 * tq), ssd_ld32(sMl + (tr + 8) * XS + k0 + 8 + 2 * tq)};
#pragma unroll
        for (int j = 0; j < JY; ++j) {
          const T* xp = sX + (k0 + 2 * tq) * XN + pb + 8 * j + gq;  // x[s][p], s = k0 + 2 tq (+1, +8, +9)
          const uint32_t b0 = ssd_pair(xp, xp + XN), b1 = ssd_pair(xp + 8 * XN, xp + 9 * XN);
          ssd_mma<T>(acc[j], ah, b0, b1);
          ssd_mma<T>(acc[j], al, b0, b1);
        }
      }
#pragma unroll
      for (int j = 0; j < JY; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int t = tr + 8 * (r / 2), p = pb + 8 * j + 2 * tq + (r % 2);
          if (t < len && p < pw)
            yh[(size_t)(t0 + t) * HP + p] = static_cast<T>(acc[j][r] + Dh * static_cast<float>(sX[t * XN + p]));
        }
      }
    }
    __syncthreads();
    // ---- 3. S = exp(cum_end) S + (w x)^T B; a warp owns rows 16 mt .. (p) and up to 4 n8 tiles
    {
      constexpr int MP = PT / 16;
      const float dec = expf(s_cum[Q - 1]);
      const int nstrips = MP * ((NT + 3) / 4);
      for (int strip = warp; strip < nstrips; strip += 8) {
        const int mt = strip % MP, ng = strip / MP, pr = 16 * mt + gq;
        uint32_t ah[Q / 16][4], al[Q / 16][4];  // w x as hi + lo, for all Q steps
#pragma unroll
        for (int ks = 0; ks < Q / 16; ++ks) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int p = pr + 8 * (q % 2), s = 16 * ks + 8 * (q / 2) + 2 * tq;
            const float x0 = static_cast<float>(sX[s * XN + p]), x1 = static_cast<float>(sX[(s + 1) * XN + p]);
            ssd_split<T>(x0 * s_w[s], x1 * s_w[s + 1], ah[ks][q], al[ks][q]);
          }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int nt = 4 * ng + j;
          if (nt < NT) {
            const int n = 8 * nt;
            float* s0 = sS + pr * SS + n + 2 * tq;
            float* s1 = s0 + 8 * SS;
            const float2 u0 = *reinterpret_cast<const float2*>(s0), u1 = *reinterpret_cast<const float2*>(s1);
            float acc[4] = {dec * u0.x, dec * u0.y, dec * u1.x, dec * u1.y};
#pragma unroll
            for (int ks = 0; ks < Q / 16; ++ks) {
              const T* bp = sB + (16 * ks + 2 * tq) * CS + n + gq;  // B[s][n], s = 16 ks + 2 tq (+1, +8, +9)
              const uint32_t b0 = ssd_pair(bp, bp + CS), b1 = ssd_pair(bp + 8 * CS, bp + 9 * CS);
              ssd_mma<T>(acc, ah[ks], b0, b1);
              ssd_mma<T>(acc, al[ks], b0, b1);
            }
            *reinterpret_cast<float2*>(s0) = make_float2(acc[0], acc[1]);
            *reinterpret_cast<float2*>(s1) = make_float2(acc[2], acc[3]);
          }
        }
      }
    }
    if (c + 1 < NC && tid < Q) s_dt0[(k ^ 1) * Q + tid] = dt_fin(dt_next);
  }
  __syncthreads();
  float* so = state + ((size_t)bh * nP + pt0) * nN;
  for (int i = tid; i < pw * nN; i += 256) so[i] = sS[(i / nN) * SS + i % nN];
} else {
  // ---------------------------------------------------------------- float path (exact float32 FMA)
  // Shared memory: sS float [PT][N + 1], sC, sB float [Q][N + 1] (odd strides: conflict-free columns),
  // sX float [Q][PT], sM float [Q][Q], s_dt, s_cum, s_w, s_ec float [Q].
  const int SF = nN + 1;
  float* sS = reinterpret_cast<float*>(ssd_smem);
  float* sC = sS + PT * SF;
  float* sB = sC + Q * SF;
  float* sX = sB + Q * SF;
  float* sM = sX + Q * PT;
  float* s_dt = sM + Q * Q;
  float* s_cum = s_dt + Q;
  float* s_w = s_cum + Q;
  float* s_ec = s_w + Q;
  for (int i = tid; i < PT * SF; i += 256) sS[i] = 0.0f;
  for (int c = 0; c < NC; ++c) {
    const int t0 = c * Q, len = min(Q, nL - t0);
    __syncthreads();
    if (tid < Q) {
      float v = 0.0f;
      if (tid < len) {
        const float a = static_cast<float>(dth[(size_t)(t0 + tid) * nH]) + dtb;
        v = fminf(fmaxf(a > 20.0f ? a : log1pf(expf(a)), 0.001f), 100.0f);
      }
      s_dt[tid] = v;
    }
    for (int i = tid; i < Q * nN; i += 256) {
      const int t = i / nN, n = i % nN;
      const bool ok = t < len;
      sC[t * SF + n] = ok ? static_cast<float>(Cg[(size_t)(t0 + t) * GN + n]) : 0.0f;
      sB[t * SF + n] = ok ? static_cast<float>(Bg[(size_t)(t0 + t) * GN + n]) : 0.0f;
    }
    for (int i = tid; i < Q * PT; i += 256) {
      const int s = i / PT, p = i % PT;
      sX[i] = (s < len && p < pw) ? static_cast<float>(xh[(size_t)(t0 + s) * HP + p]) : 0.0f;
    }
    __syncthreads();
    if (tid < Q) {
      float run = 0.0f, mine = 0.0f;
      for (int k = 0; k < Q; ++k) {
        run += s_dt[k] * Ah;
        if (k == tid) mine = run;
      }
      s_cum[tid] = mine;
      s_w[tid] = s_dt[tid] * expf(run - mine);
      s_ec[tid] = expf(mine);
    }
    __syncthreads();
    for (int i = tid; i < Q * Q; i += 256) {  // 1. M
      const int t = i / Q, s = i % Q;
      float m = 0.0f;
      if (s <= t) {
        const float* cr = sC + t * SF;
        const float* br = sB + s * SF;
        float d = 0.0f;
        for (int n = 0; n < nN; ++n) d = fmaf(cr[n], br[n], d);
        m = d * expf(s_cum[t] - s_cum[s]) * s_dt[s];
      }
      sM[i] = m;
    }
    __syncthreads();
    for (int i = tid; i < Q * PT; i += 256) {  // 2. y
      const int t = i / PT, p = i % PT;
      if (t < len && p < pw) {
        float yi = 0.0f;
        if (c > 0) {
          const float* cr = sC + t * SF;
          const float* sr = sS + p * SF;
          for (int n = 0; n < nN; ++n) yi = fmaf(cr[n], sr[n], yi);
          yi *= s_ec[t];
        }
        for (int s = 0; s <= t; ++s) yi = fmaf(sM[t * Q + s], sX[s * PT + p], yi);
        yh[(size_t)(t0 + t) * HP + p] = static_cast<T>(yi + Dh * sX[t * PT + p]);
      }
    }
    __syncthreads();
    {  // 3. S
      const float dec = expf(s_cum[Q - 1]);
      for (int i = tid; i < PT * nN; i += 256) {
        const int p = i / nN, n = i % nN;
        float v = dec * sS[p * SF + n];
        for (int s = 0; s < Q; ++s) v = fmaf(s_w[s] * sX[s * PT + p], sB[s * SF + n], v);
        sS[p * SF + n] = v;
      }
    }
  }
  __syncthreads();
  float* so = state + ((size_t)bh * nP + pt0) * nN;
  for (int i = tid; i < pw * nN; i += 256) so[i] = sS[(i / nN) * SF + i % nN];
}
