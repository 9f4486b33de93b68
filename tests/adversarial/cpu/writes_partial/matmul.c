/* ADVERSARIAL (cheat: writes part of the output). Computes C correctly except its last column, which
 * it never touches (a tiled kernel that forgets the remainder looks like this). The one poisoned
 * column per row must be reported as unwritten even though every written element is right. */
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j + 1 < N; ++j) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
}
