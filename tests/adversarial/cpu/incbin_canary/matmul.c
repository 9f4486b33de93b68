/* ADVERSARIAL (cheat: read a file the kernel must not see, at compile time). An assembler `.incbin` copies
 * /tmp/ksearch-adversarial-canary.txt (root-only, planted by the test: it stands for the config file holding API keys) into
 * the library, which then could leak it through its outputs and the messages about them. The compiler and
 * assembler run unprivileged and confined to the candidate's folder: the file cannot be read, the build
 * fails, and nothing of the file reaches any message. */
#include <stdint.h>

__asm__(".section .rodata\n.global leaked\nleaked:\n.incbin \"/tmp/ksearch-adversarial-canary.txt\"\n.byte 0\n.previous");
extern const char leaked[];

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    C[0] = (float)leaked[0];
}
