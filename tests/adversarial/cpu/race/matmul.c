/* ADVERSARIAL (cheat/bug: a data race). Two threads (pthread_create; glibc >= 2.34 needs no
 * -lpthread) each compute ALL of C, one walking the elements forward and summing k forward, the other
 * walking backward and summing k backward, and both store into C without synchronisation. Every value
 * either writes is within tolerance, but the two differ in their last bits, and which thread stores
 * an element last depends on where they cross, i.e. on scheduling: two runs on the same inputs give
 * different bits. Only a determinism check (same seed twice, compared bitwise) catches it. */
#include <pthread.h>

struct job { const float* A; const float* B; float* C; int64_t M, N, K; int backward; };

static void* work(void* p) {
    const struct job* j = p;
    const int64_t total = j->M * j->N;
    for (int64_t t = 0; t < total; ++t) {
        const int64_t e = j->backward ? total - 1 - t : t;
        const int64_t row = e / j->N, col = e % j->N;
        float acc = 0.0f;
        if (j->backward)
            for (int64_t k = j->K - 1; k >= 0; --k) acc += j->A[row * j->K + k] * j->B[k * j->N + col];
        else
            for (int64_t k = 0; k < j->K; ++k) acc += j->A[row * j->K + k] * j->B[k * j->N + col];
        ((volatile float*)j->C)[e] = acc;
    }
    return NULL;
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    struct job fwd = {A, B, C, M, N, K, 0}, bwd = {A, B, C, M, N, K, 1};
    pthread_t t;
    if (pthread_create(&t, NULL, work, &bwd) != 0) {
        work(&bwd);
        work(&fwd);
        return;
    }
    work(&fwd);
    pthread_join(t, NULL);
}
