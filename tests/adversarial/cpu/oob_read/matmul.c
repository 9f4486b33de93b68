/* ADVERSARIAL (cheat/bug: reads out of bounds into neighbouring memory). Indexes A with an off-by-one,
 * A[i*K + k + 1], so every product uses the wrong element and the very last one reads 4 bytes past the
 * end of A (into the guard bytes that follow every array; no fault). Whatever it reads, the result is
 * deterministically wrong and must be reported outside tolerance. */
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            const float a = A[i * K + k + 1];
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += a * B[k * N + j];
        }
    }
}
