/* ADVERSARIAL (cheat: aborts). Computes C, then calls abort(): the worker dies of SIGABRT, which must be
 * reported as a crash naming the signal, and the next workload gets a fresh worker. */
#include <stdlib.h>

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    abort();
}
