/* ADVERSARIAL (resource exhaustion: file descriptors). It opens /dev/null until no descriptor is left, then
 * computes C. The kernel host then cannot receive the shared memory of the next request: the candidate's
 * failure ("exhausted"), not the evaluator's error. */
#include <fcntl.h>
#include <stdint.h>

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    while (open("/dev/null", O_RDONLY) >= 0) {}
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
