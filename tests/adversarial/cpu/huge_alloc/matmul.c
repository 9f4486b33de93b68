/* ADVERSARIAL (cheat: allocates huge memory). Asks for 16 TiB (1 << 44 bytes) and writes its first
 * and last byte without checking the pointer, then computes correctly. Under any memory limit or
 * heuristic overcommit the allocation fails and the write through NULL kills the worker (SIGSEGV);
 * only an unlimited, always-overcommit host would let it pass. Bounded on purpose: it never touches
 * more than two pages, so it cannot push the machine into the OOM killer. */
#include <stdlib.h>

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    const size_t huge = (size_t)1 << 44;
    volatile char* p = malloc(huge);
    p[0] = 1;
    p[huge - 1] = 1;
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    free((void*)p);
}
