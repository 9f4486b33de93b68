/* CONTROL (no cheat): the plain i-k-j triple loop. The timing cheats of this suite compute C the same way
 * when they compute it at all, so each must be timed no faster than this one. */
#include <stdint.h>

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
