/* ADVERSARIAL (cheat: outlive the evaluation). On its first call it starts a daemon in a session of its own
 * (out of any process group), a double-forked child (orphaned at once) and a thread, all running for 60 s.
 * A daemon that survived could answer for the worker or corrupt later evaluations. The kernel host runs in a
 * PID namespace of its own, emptied when the evaluation ends: none may survive. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static void* spin(void* arg) { (void)arg; for (;;) sleep(1); return 0; }
static int started = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!started) {
        started = 1;
        system("setsid sh -c 'exec -a ksearch-daemon sleep 60' >/dev/null 2>&1 &");
        if (fork() == 0) {
            if (fork() == 0) { execlp("sh", "sh", "-c", "exec -a ksearch-daemon sleep 60", (char*)0); _exit(0); }
            _exit(0);
        }
        pthread_t t;
        pthread_create(&t, 0, spin, 0);
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
