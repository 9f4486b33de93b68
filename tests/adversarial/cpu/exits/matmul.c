/* ADVERSARIAL (cheat: exits). Computes half the rows, then calls exit(0): the worker vanishes with a
 * "success" exit status and no reply. Must be reported as a crash of this candidate (the worker died,
 * exit status 0), never as a pass or a protocol failure of the evaluator. */
#include <stdlib.h>

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        if (i == M / 2) exit(0);
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    if (M / 2 == 0) exit(0);
}
