/* ADVERSARIAL (cheat: spoil the inputs others are timed on). Honest through its checks, then, on its 8th
 * call (a timed one), it writes denormals into A, which baselines and later candidates timed on the same
 * memory would take the slow path on. Timed inputs are mapped read-only in the kernel host. */
#include <stdint.h>

static int calls = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (++calls == 8)
        for (int64_t i = 0; i < M * K; ++i) ((float*)A)[i] = 1e-40f;
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
