/* ADVERSARIAL (cheat: modifies its inputs). Computes C correctly, then zeroes B (const cast away), e.g.
 * to leave a scratch buffer "clean" or to sabotage whatever runs next on the same inputs. Reported as
 * a modified input even though C is right. */
#include <string.h>

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    memset((float*)B, 0, (size_t)(K * N) * sizeof(float));
}
