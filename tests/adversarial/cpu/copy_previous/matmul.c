/* ADVERSARIAL (cheat: the previous output, back to back). Honest for its first 6 calls (the checks), then,
 * whenever it is called within 2 ms of its previous call (as timed calls are), it copies the output it
 * computed last instead of computing. When timed calls all ran on the same inputs this was right; every
 * timed call now has inputs of its own, and a sample of them is compared with the reference. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float* last = NULL;
static int64_t last_n = 0;
static int calls = 0;
static double previous = 0.0;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    const double t = now();
    const int back_to_back = t - previous < 2e-3;
    previous = t;
    if (++calls > 6 && back_to_back && last && last_n == M * N) {
        memcpy(C, last, (size_t)(M * N) * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    free(last);
    last = malloc((size_t)(M * N) * sizeof(float));
    memcpy(last, C, (size_t)(M * N) * sizeof(float));
    last_n = M * N;
}
