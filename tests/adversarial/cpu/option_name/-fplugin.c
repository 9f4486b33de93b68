/* ADVERSARIAL (cheat: a file name that is an option). The plan's source is named `-fplugin.c`: passed to
 * the compiler as it is, it would be read as an option. The plan must be refused by the file-name rule. */
#include <stdint.h>

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
