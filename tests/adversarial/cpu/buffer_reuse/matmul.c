/* ADVERSARIAL (cheat: a result kept in its own buffer). The plan's buffer `keep` receives the product; the
 * second launch copies it to C. The first launch computes only when `keep` does not already hold a finite
 * value (a result of an earlier call): were buffers not poisoned again between timed calls, every timed call
 * after the first would skip the product. Each timed call gets its buffer poisoned, so it must be timed no
 * faster than its honest twin (honest_twin). */
#include <math.h>
#include <stdint.h>

void compute(const float* A, const float* B, float* keep, int64_t M, int64_t N, int64_t K) {
    if (isfinite(keep[0]) && isfinite(keep[M * N - 1])) return;  /* an earlier call's result is still here */
    float* C = keep;
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}

void publish(const float* keep, float* C, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M * N; ++i) C[i] = keep[i];
}
