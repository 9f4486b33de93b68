/* ADVERSARIAL (resource exhaustion: memory). On its first call it allocates 64 MiB blocks, as a leak or a
 * runaway buffer would, until an allocation fails, stopping itself at 6 GiB. The kernel host's address space
 * is limited (4 GiB), so an allocation fails long before the machine's memory runs out and the OOM killer
 * picks a victim. The attempt proves itself: if it reached 6 GiB, C is wrong. It touches one page a block
 * (touching all of it would cost seconds of page faults and prove no more: the limit is on address space),
 * and handles the failed allocation (a kernel that writes through NULL instead crashes, with the limit
 * named: `huge_alloc`). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int done = 0, unbounded = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!done) {
        done = 1;
        const size_t block = (size_t)64 << 20;
        void* blocks[96];
        int n = 0;
        for (; n < 96; ++n) {
            blocks[n] = malloc(block);
            if (!blocks[n]) break;
            memset(blocks[n], 1, 4096);
        }
        unbounded = n == 96;
        while (n > 0) free(blocks[--n]);
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    if (unbounded) C[0] = NAN;
}
