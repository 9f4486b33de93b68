/* ADVERSARIAL (cheat: returns the previous run's output). The first call computes C and keeps a
 * static copy of it; every later call only copies that saved result into C. Right for the first
 * inputs (and for a second run on the same inputs), wrong for any other inputs: the second seed's
 * fresh inputs must expose it (with --checks 2 the per-seed check fires before any timing). */
#include <stdlib.h>
#include <string.h>

static float* saved = NULL;
static int64_t saved_n = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (saved && saved_n == M * N) {
        memcpy(C, saved, (size_t)(M * N) * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    free(saved);
    saved = malloc((size_t)(M * N) * sizeof(float));
    memcpy(saved, C, (size_t)(M * N) * sizeof(float));
    saved_n = M * N;
}
