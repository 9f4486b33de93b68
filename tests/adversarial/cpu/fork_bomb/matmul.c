/* ADVERSARIAL (resource exhaustion: processes). On its first call it forks until fork fails, each child
 * sleeping for 60 s under a recognisable name, then computes C. The jail's process limit stops the forking
 * and the end of the evaluation ends every child. */
#include <stdint.h>
#include <unistd.h>

static int done = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!done) {
        done = 1;
        for (int i = 0; i < 100000; ++i) {
            pid_t p = fork();
            if (p < 0) break;
            if (p == 0) { execlp("sh", "sh", "-c", "exec -a ksearch-forkling sleep 60", (char*)0); _exit(0); }
        }
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
