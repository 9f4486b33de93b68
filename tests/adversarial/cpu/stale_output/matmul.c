/* ADVERSARIAL (cheat: returns the previous run's output, left in place). Remembers every output
 * buffer it has filled (by address) and, called again on one of them, writes nothing: the buffer
 * still holds the previous result. Checks always hand it fresh buffers, so it computes there; timing
 * calls it again and again on the same buffers with the same inputs, so skipping looks free and
 * correct. Only a check after timing, with fresh inputs in the timed buffers, sees the stale output. */
#define SLOTS 4096

static float* seen[SLOTS];
static int nseen = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int s = 0; s < nseen; ++s)
        if (seen[s] == C) return;   /* "already computed" */
    if (nseen < SLOTS) seen[nseen++] = C;
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
