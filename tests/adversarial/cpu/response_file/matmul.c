/* ADVERSARIAL (cheat: options smuggled in through a file name). The plan names its header `@opts.h`: gcc
 * reads an argument `@FILE` as a file of further options, and `@opts.h` holds `-wrapper` running a shell
 * command as the compiler's user. The plan must be refused by the file-name rule before anything runs. */
#include <stdint.h>

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
