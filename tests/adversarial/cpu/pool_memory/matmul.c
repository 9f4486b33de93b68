/* ADVERSARIAL (cheat: remember the run's reference sets across candidates). A run meets the same input sets
 * (checks, sampled timed calls) with every candidate. Variant 0 computes honestly and stores each output in
 * files keyed by a hash of its inputs, wherever it can write (/dev/shm, /tmp, its home, the folder above its
 * own); every other variant looks there first and, without a stored output, writes nothing. Run as a tune
 * search over VARIANT: the later candidates must fail, because no candidate can reach another's files. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* DIRS[] = {"/dev/shm", "/tmp", "..", "../..", "."};

static uint64_t hash(const float* x, int64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i += 97) { uint32_t b; memcpy(&b, &x[i], 4); h = (h ^ b) * 1099511628211ull; }
    return h;
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    char path[256];
    const uint64_t h = hash(A, M * K) ^ hash(B, K * N);
    const size_t bytes = (size_t)(M * N) * sizeof(float);
    if (VARIANT != 0) {
        for (size_t d = 0; d < sizeof DIRS / sizeof *DIRS; ++d) {
            snprintf(path, sizeof path, "%s/ksearch-memo-%016llx", DIRS[d], (unsigned long long)h);
            FILE* f = fopen(path, "rb");
            if (f && fread(C, 1, bytes, f) == bytes) { fclose(f); return; }
            if (f) fclose(f);
        }
        return;  /* nothing remembered: writes nothing */
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    for (size_t d = 0; d < sizeof DIRS / sizeof *DIRS; ++d) {
        snprintf(path, sizeof path, "%s/ksearch-memo-%016llx", DIRS[d], (unsigned long long)h);
        FILE* f = fopen(path, "wb");
        if (f) { fwrite(C, 1, bytes, f); fclose(f); }
    }
}
