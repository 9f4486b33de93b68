/* ADVERSARIAL (cheat: depends on the call count / warm-up detection). A static counter: the first 8
 * calls compute C (more than any number of correctness checks run before timing), every later call
 * returns at once. Timing sees a near-zero kernel whose buffers still hold earlier, correct results;
 * only a check after timing (fresh inputs in the same buffers) sees that it stopped working. */
static long calls = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (++calls > 8) return;
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
