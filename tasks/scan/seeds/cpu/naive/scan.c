/* Linear recurrence over time, per channel (the Mamba selective-scan core):
 *     h[r, t] = a[r, t] * h[r, t-1] + b[r, t],   h[r, -1] = 0,
 * for each of the R = B*D channels r; a, b, h are (B, D, L) float32, time contiguous: x[r*L + t].
 * Single-threaded C11.
 *
 * One channel alone is a chain of dependent FMAs (one FMA latency per step, no SIMD). Independent
 * channels are what a CPU can overlap. Tunables (#defines, see plan.toml):
 *   CB     channels advanced together per time step (1 = one channel at a time, the naive loop).
 *   CHUNK  0: read a, b and write h in place, CB channels apart (stride L: gathers/scatters).
 *          >0: copy a CB x CHUNK tile, transposed, into small local buffers (time-major, channels
 *          contiguous), run the recurrence there with contiguous SIMD over the CB channels, and
 *          transpose the result back. Must keep CB*CHUNK floats per buffer cache-resident.
 * Remainders (R not a multiple of CB, L not a multiple of CHUNK) run the same code with shorter bounds.
 */
#include <stdint.h>

#define MIN(x, y) ((x) < (y) ? (x) : (y))

/* nc channels starting at a, b, h (nc == CB, a constant after inlining, except for the last block). */
static inline void scan_block(const float* restrict a, const float* restrict b, float* restrict h,
                              int64_t L, int nc) {
    float hv[CB];
    for (int c = 0; c < nc; ++c) hv[c] = 0.0f;
#if CHUNK == 0
    for (int64_t t = 0; t < L; ++t)
        for (int c = 0; c < nc; ++c) {
            hv[c] = a[c * L + t] * hv[c] + b[c * L + t];
            h[c * L + t] = hv[c];
        }
#else
    float ta[CHUNK][CB], tb[CHUNK][CB];  /* time-major tiles: row t holds the nc channels at time t */
    for (int64_t t0 = 0; t0 < L; t0 += CHUNK) {
        const int tl = (int)MIN((int64_t)CHUNK, L - t0);
        for (int t = 0; t < tl; ++t)  /* transpose in: gather the nc channels at time t0 + t */
            for (int c = 0; c < nc; ++c) {
                ta[t][c] = a[c * L + t0 + t];
                tb[t][c] = b[c * L + t0 + t];
            }
        for (int t = 0; t < tl; ++t)  /* recurrence: the c loop is contiguous and independent: SIMD */
            for (int c = 0; c < nc; ++c) {
                hv[c] = ta[t][c] * hv[c] + tb[t][c];
                ta[t][c] = hv[c];     /* reuse ta for the output tile */
            }
        for (int c = 0; c < nc; ++c)  /* transpose out: each channel's tl steps are contiguous */
            for (int t = 0; t < tl; ++t) h[c * L + t0 + t] = ta[t][c];
    }
#endif
}

void scan(const float* a, const float* b, float* h, int64_t B, int64_t D, int64_t L) {
    const int64_t R = B * D;  /* channels are independent: batch and d_inner flatten together */
    int64_t r = 0;
    for (; r + CB <= R; r += CB) scan_block(a + r * L, b + r * L, h + r * L, L, CB);
    if (r < R) scan_block(a + r * L, b + r * L, h + r * L, L, (int)(R - r));
}
