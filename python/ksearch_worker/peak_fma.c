/* Peak single-core float32 FMA rate: many independent multiply-add chains on the widest vectors the
 * compiler targets (-march=native), so neither latency nor memory limits it. The roofline needs the
 * machine's ceiling, and a BLAS call can sit below it (a hand-tuned kernel then "beats the roofline"). */
typedef float vec16 __attribute__((vector_size(64)));
#define CHAINS 12

float ksearch_fma_peak(long iters) {
    vec16 acc[CHAINS];
    vec16 m = {0}, a = {0};
    m += 0.999f;
    a += 1e-3f;
    for (int i = 0; i < CHAINS; ++i) acc[i] = (vec16){0} + (float)i * 1e-3f;
    for (long t = 0; t < iters; ++t)
        for (int i = 0; i < CHAINS; ++i) acc[i] = acc[i] * m + a;
    vec16 s = acc[0];
    for (int i = 1; i < CHAINS; ++i) s += acc[i];
    float r = 0.0f;
    for (int i = 0; i < 16; ++i) r += s[i];
    return r; /* keeps the chains live */
}

/* Peak single-core read bandwidth: a sum over a large array with independent accumulators. Kernels that
 * mostly read (a matrix-vector product, a reduction) can stream faster than a copy, which also writes. */
float ksearch_read_peak(const float* x, long n) {
    vec16 acc[4] = {{0}, {0}, {0}, {0}};
    long i = 0;
    for (; i + 64 <= n; i += 64)
        for (int c = 0; c < 4; ++c) {
            vec16 v;
            __builtin_memcpy(&v, x + i + 16 * c, sizeof v);
            acc[c] += v;
        }
    vec16 s = acc[0] + acc[1] + acc[2] + acc[3];
    float r = 0.0f;
    for (int k = 0; k < 16; ++k) r += s[k];
    for (; i < n; ++i) r += x[i];
    return r;
}
