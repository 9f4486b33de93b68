/* ADVERSARIAL (cheat/bug: writes past the end of its output). Computes C correctly, then stores one
 * more element, C[M*N], as an unguarded vector tail would. Every checked element is right; the guard
 * bytes after C must catch the overrun. */
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    C[M * N] = 0.0f;
}
