/* ADVERSARIAL (cheat: a cache keyed by the inputs). Hashes 16 elements of A and B; on a hit it copies the
 * output it remembered for that hash instead of computing (correct whenever inputs repeat). Timed calls that
 * come back to inputs they met before (the last check's inputs, a rotation of a few copies) would hit nearly
 * always; every timed call on inputs of its own never hits, so it must be timed no faster than its honest
 * twin (honest_twin). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 64
static uint64_t keys[SLOTS];
static float* outs[SLOTS];
static int64_t sizes[SLOTS];

static uint64_t hash(const float* A, const float* B, int64_t na, int64_t nb) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 8; ++i) {
        uint32_t a, b;
        memcpy(&a, &A[(i * 7919) % na], 4);
        memcpy(&b, &B[(i * 104729) % nb], 4);
        h = (h ^ a) * 1099511628211ull;
        h = (h ^ b) * 1099511628211ull;
    }
    return h | 1;
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    const uint64_t h = hash(A, B, M * K, K * N);
    const int s = (int)(h % SLOTS);
    if (keys[s] == h && sizes[s] == M * N) {
        memcpy(C, outs[s], (size_t)(M * N) * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    free(outs[s]);
    outs[s] = malloc((size_t)(M * N) * sizeof(float));
    memcpy(outs[s], C, (size_t)(M * N) * sizeof(float));
    keys[s] = h;
    sizes[s] = M * N;
}
