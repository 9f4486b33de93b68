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
