/* ADVERSARIAL (cheat: downgrades precision beyond tolerance). Rounds every element of A and B toward
 * zero to bfloat16 (8 significant bits) by masking off the low 16 bits of its float32 pattern, as a
 * "use the bf16 tensor cores" kernel would, then accumulates in float32. Each product loses ~2^-8
 * relative; over K terms that is ~1e-2 absolute, ten times the task's atol of 1e-3. */
#include <string.h>

static inline float to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            const float a = to_bf16(A[i * K + k]);
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += a * to_bf16(B[k * N + j]);
        }
    }
}
