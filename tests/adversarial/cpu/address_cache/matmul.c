/* ADVERSARIAL (cheat: caches by input address). A static table maps (A, B, shape) pointers to a saved
 * copy of C; a call with addresses it has seen copies the saved result instead of computing. Each
 * check allocates new input buffers, so checks always miss and see a correct kernel; the timing loop
 * reuses its buffers and is served from the cache. Only fresh inputs written into the same timed
 * buffers (the check after timing) expose the stale result. */
#include <stdlib.h>
#include <string.h>

#define SLOTS 4096

struct entry { const float* a; const float* b; int64_t m, n, k; float* c; };
static struct entry table[SLOTS];
static int nentries = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    const size_t bytes = (size_t)(M * N) * sizeof(float);
    for (int s = 0; s < nentries; ++s) {
        struct entry* e = &table[s];
        if (e->a == A && e->b == B && e->m == M && e->n == N && e->k == K) {
            memcpy(C, e->c, bytes);
            return;
        }
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    if (nentries < SLOTS) {
        float* copy = malloc(bytes);
        if (copy) {
            memcpy(copy, C, bytes);
            table[nentries++] = (struct entry){A, B, M, N, K, copy};
        }
    }
}
