/* ADVERSARIAL (resource exhaustion: processes). On its first call it forks until fork fails, each child
 * sleeping for 60 s under a recognisable name, then computes C. The jail's process limit stops the forking
 * and the end of the evaluation ends every child.
 * The bomb proves itself: unless it forked more than once and every child is running `sleep` under the name
 * `ksearch-forkling` (the survivors check reads command lines), C is wrong, so a bomb that silently failed
 * to start cannot pass the survivors check by default. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

static int done = 0, exploded = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!done) {
        done = 1;
        /* close-on-exec: EOF once every child has exec'd; a byte if one failed */
        int report[2];
        if (pipe2(report, O_CLOEXEC) == 0) {
            int forks = 0;
            for (int i = 0; i < 100000; ++i) {
                pid_t p = fork();
                if (p < 0) break;
                if (p == 0) {
                    execl("/bin/sleep", "ksearch-forkling", "60", (char*)0);
                    (void)!write(report[1], "x", 1);
                    _exit(127);
                }
                ++forks;
            }
            close(report[1]);
            char c;
            exploded = forks > 1 && read(report[0], &c, 1) == 0;
            close(report[0]);
        }
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    if (!exploded) C[0] = NAN;
}
