/* C[M,N] = A[M,K] @ B[K,N], float32, row-major. Single-threaded, portable C11.
 *
 * A correct but naive starting point whose tunables (all #defines, see plan.toml) change the
 * memory access pattern and the instruction-level parallelism:
 *
 *   LOOP_ORDER 0  i-j-k: one dot product per C element; the k loop walks a column of B with
 *                 stride N (a cache miss per step at large N, and no contiguous SIMD loads).
 *              1  i-k-j: C[i,:] += A[i,k] * B[k,:]; the inner loop streams rows of B and C
 *                 contiguously, so the compiler vectorises it.
 *   BM, BN, BK    cache tiles over M, N, K; 0 means "no tiling" (the whole dimension).
 *   MR            (i-k-j only) rows of C updated together: every B vector loaded is reused MR times.
 *   UNROLL        i-k-j: k steps fused per pass over a C row (C is loaded/stored once per UNROLL
 *                 FMAs); i-j-k: independent partial sums in the dot product (breaks the FMA
 *                 latency chain).
 *
 * Every combination is exact for any M, K, N: tiles are clipped with min(), and the MR / UNROLL
 * remainders fall back to 1-row / 1-step code.
 */
#include <stdint.h>
#include <string.h>

#define TILE(T, n) ((T) > 0 ? (int64_t)(T) : (n))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* i-k-j micro-kernel: rows [i, i+mr) of C, columns [j0, j1), k in [k0, k1).
 * mr and ku are compile-time constants at the call sites, so after inlining the r/u loops unroll
 * and the j loop vectorises. restrict: A, B and C never overlap, so the vectoriser needs no
 * run-time alias checks between them. */
#if LOOP_ORDER != 0
static inline void rows_ikj(const float* restrict A, const float* restrict B, float* restrict C,
                            int64_t N, int64_t K, int64_t i, int mr, int ku,
                            int64_t j0, int64_t j1, int64_t k0, int64_t k1) {
    int64_t k = k0;
    for (; k + ku <= k1; k += ku) {
        float a[MR][UNROLL];
        for (int r = 0; r < mr; ++r)
            for (int u = 0; u < ku; ++u) a[r][u] = A[(i + r) * K + k + u];
        for (int64_t j = j0; j < j1; ++j) {
            for (int r = 0; r < mr; ++r) {
                float c = C[(i + r) * N + j];
                for (int u = 0; u < ku; ++u) c += a[r][u] * B[(k + u) * N + j];
                C[(i + r) * N + j] = c;
            }
        }
    }
    for (; k < k1; ++k) /* k remainder: one step at a time */
        for (int r = 0; r < mr; ++r) {
            const float a = A[(i + r) * K + k];
            for (int64_t j = j0; j < j1; ++j) C[(i + r) * N + j] += a * B[k * N + j];
        }
}

static void block_ikj(const float* restrict A, const float* restrict B, float* restrict C,
                      int64_t N, int64_t K, int64_t i0, int64_t i1,
                      int64_t j0, int64_t j1, int64_t k0, int64_t k1) {
    int64_t i = i0;
    for (; i + MR <= i1; i += MR) rows_ikj(A, B, C, N, K, i, MR, UNROLL, j0, j1, k0, k1);
    for (; i < i1; ++i) rows_ikj(A, B, C, N, K, i, 1, UNROLL, j0, j1, k0, k1); /* M remainder */
}

#else
/* i-j-k: UNROLL independent partial sums per dot product, combined at the end. */
static void block_ijk(const float* restrict A, const float* restrict B, float* restrict C,
                      int64_t N, int64_t K, int64_t i0, int64_t i1,
                      int64_t j0, int64_t j1, int64_t k0, int64_t k1) {
    for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) {
            float acc[UNROLL] = {0};
            int64_t k = k0;
            for (; k + UNROLL <= k1; k += UNROLL)
                for (int u = 0; u < UNROLL; ++u) acc[u] += A[i * K + k + u] * B[(k + u) * N + j];
            for (; k < k1; ++k) acc[0] += A[i * K + k] * B[k * N + j];
            float s = 0.0f;
            for (int u = 0; u < UNROLL; ++u) s += acc[u];
            C[i * N + j] += s;
        }
}
#endif

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    const int64_t bm = TILE(BM, M), bn = TILE(BN, N), bk = TILE(BK, K);
    memset(C, 0, sizeof(float) * (size_t)(M * N)); /* every tile accumulates into C */
    /* Tile order j, k, i: a BK x BN panel of B stays in cache while all row tiles of A pass over it. */
    for (int64_t j0 = 0; j0 < N; j0 += bn) {
        const int64_t j1 = MIN(j0 + bn, N);
        for (int64_t k0 = 0; k0 < K; k0 += bk) {
            const int64_t k1 = MIN(k0 + bk, K);
            for (int64_t i0 = 0; i0 < M; i0 += bm) {
                const int64_t i1 = MIN(i0 + bm, M);
#if LOOP_ORDER == 0
                block_ijk(A, B, C, N, K, i0, i1, j0, j1, k0, k1);
#else
                block_ikj(A, B, C, N, K, i0, i1, j0, j1, k0, k1);
#endif
            }
        }
    }
}
