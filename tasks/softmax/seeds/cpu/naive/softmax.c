/* y[i, :] = softmax(x[i, :]) for each of M rows of length N, float32, row-major. Single-threaded C11.
 *
 * Tunables (#defines, see plan.toml):
 *   ACC       independent accumulator lanes in the reductions (max, sum). Without -ffast-math the
 *             compiler may not reorder a float reduction, so ACC=1 is a scalar loop; with ACC=8/16
 *             the lanes are explicit and the loop vectorises.
 *   FAST_EXP  0: libm expf (a scalar call per element: blocks vectorisation).
 *             1: inline Cody-Waite + degree-6 polynomial exp (relative error ~1e-7), branch-free so
 *                it vectorises together with the loop around it.
 *   ONLINE    0: three passes: max; exp and sum (storing exp in y); scale y by 1/sum.
 *             1: two passes: running (max, sum) per lane in one read of x, then y = exp(x - max) / sum
 *                (reads x twice instead of x twice + y twice, but evaluates exp twice).
 */
#include <math.h>
#include <stdint.h>

/* exp(x) for x <= 0 (all calls here), accurate to ~1e-7 relative; anything below -87.3 gives
 * ~1e-38 instead of a denormal or 0, which is far below every tolerance. */
static inline float exp_fast(float x) {
    x = x < -87.3f ? -87.3f : x;                     /* keeps 2^n a normal float */
    x = x > 88.0f ? 88.0f : x;
    const float shift = 12582912.0f;                 /* 1.5 * 2^23: adding it rounds to an integer */
    const float n = (x * 1.44269504f + shift) - shift;  /* n = round(x / ln 2) */
    float r = x - n * 0.693359375f;                  /* ln 2 split in two for an exact reduction */
    r = r - n * -2.12194440e-4f;                     /* |r| <= ln(2)/2 */
    float p = 1.9875691500e-4f;                      /* Cephes expf polynomial */
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } s = { .i = ((int32_t)n + 127) << 23 };  /* 2^n */
    return p * s.f;
}

#if FAST_EXP
#define EXP(v) exp_fast(v)
#else
#define EXP(v) expf(v)
#endif

static void softmax_row(const float* restrict x, float* restrict y, int64_t N) {
    int64_t j;
#if ONLINE == 0
    float m[ACC], s[ACC];
    for (int u = 0; u < ACC; ++u) m[u] = -INFINITY, s[u] = 0.0f;
    /* pass 1: max */
    for (j = 0; j + ACC <= N; j += ACC)
        for (int u = 0; u < ACC; ++u) m[u] = x[j + u] > m[u] ? x[j + u] : m[u];
    for (; j < N; ++j) m[0] = x[j] > m[0] ? x[j] : m[0];
    float mx = m[0];
    for (int u = 1; u < ACC; ++u) mx = m[u] > mx ? m[u] : mx;
    /* pass 2: e = exp(x - max), kept in y, and its sum */
    for (j = 0; j + ACC <= N; j += ACC)
        for (int u = 0; u < ACC; ++u) {
            const float e = EXP(x[j + u] - mx);
            y[j + u] = e;
            s[u] += e;
        }
    for (; j < N; ++j) {
        const float e = EXP(x[j] - mx);
        y[j] = e;
        s[0] += e;
    }
    float sum = 0.0f;
    for (int u = 0; u < ACC; ++u) sum += s[u];
    /* pass 3: normalise */
    const float inv = 1.0f / sum;
    for (j = 0; j < N; ++j) y[j] *= inv;
#else
    /* pass 1: per lane, a running max m and sum s of exp(x - m). One exp per element:
     * e = exp(-|x - m|) is either the new term (x <= m) or the rescale factor of the old sum (x > m). */
    float m[ACC], s[ACC];
    for (int u = 0; u < ACC; ++u) m[u] = -INFINITY, s[u] = 0.0f;
    for (j = 0; j + ACC <= N; j += ACC)
        for (int u = 0; u < ACC; ++u) {
            const float v = x[j + u], d = v - m[u];
            const float e = EXP(d > 0.0f ? -d : d);
            s[u] = d > 0.0f ? s[u] * e + 1.0f : s[u] + e;
            m[u] = d > 0.0f ? v : m[u];
        }
    for (; j < N; ++j) {
        const float v = x[j], d = v - m[0];
        const float e = EXP(d > 0.0f ? -d : d);
        s[0] = d > 0.0f ? s[0] * e + 1.0f : s[0] + e;
        m[0] = d > 0.0f ? v : m[0];
    }
    /* merge lanes: lanes that saw no element have m = -inf, s = 0 and contribute 0 */
    float mx = m[0];
    for (int u = 1; u < ACC; ++u) mx = m[u] > mx ? m[u] : mx;
    float sum = 0.0f;
    for (int u = 0; u < ACC; ++u) sum += s[u] * EXP(m[u] - mx);
    /* pass 2: y = exp(x - max) / sum */
    const float inv = 1.0f / sum;
    for (j = 0; j < N; ++j) y[j] = EXP(x[j] - mx) * inv;
#endif
}

void softmax(const float* x, float* y, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M; ++i) softmax_row(x + i * N, y + i * N, N);
}
