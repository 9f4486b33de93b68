/* ADVERSARIAL (cheat: aliases an input). Casts away the const of A and uses it as scratch: each row of
 * C is computed, then written both into C and over the first N elements of the matching row of A (as
 * a kernel that "reuses the input buffer to save memory" would). C is right, but A has been
 * clobbered behind the caller's back: reported as a modified input. */
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    float* a = (float*)A;
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
    }
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N && j < K; ++j) a[i * K + j] = C[i * N + j];
}
