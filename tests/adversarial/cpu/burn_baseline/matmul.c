/* ADVERSARIAL (cheat: slow the baselines down). On its first call it starts two processes in sessions of
 * their own that spin for 60 s, so that a baseline timed while they run looks slower and the candidate's
 * speedup over it larger. Baselines are timed with no candidate process alive (the kernel host's namespace
 * is emptied when its evaluation ends): the baselines' times must match those measured beside its honest
 * twin, and no spinner may survive.
 * The spinners prove themselves: unless both are running under the name `ksearch-burner` (the survivors
 * check reads command lines), C is wrong, so spinners that silently failed to start cannot pass by default. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

static int started = 0, burning = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!started) {
        started = 1;
        /* close-on-exec: EOF once both spinners have exec'd; a byte if one failed */
        int report[2];
        if (pipe2(report, O_CLOEXEC) == 0) {
            pid_t spinners[2] = {-1, -1};
            for (int i = 0; i < 2; ++i) {
                spinners[i] = fork();
                if (spinners[i] == 0) {
                    setsid();
                    /* `timeout` ends the spin after 60 s even if the jail failed to */
                    execl("/usr/bin/timeout", "ksearch-burner", "60", "/bin/sh", "-c", "while :; do :; done",
                          (char*)0);
                    (void)!write(report[1], "x", 1);
                    _exit(127);
                }
            }
            close(report[1]);
            char c;
            burning = read(report[0], &c, 1) == 0 && spinners[0] > 0 && spinners[1] > 0 &&
                      kill(spinners[0], 0) == 0 && kill(spinners[1], 0) == 0;
            close(report[0]);
        }
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    if (!burning) C[0] = NAN;
}
