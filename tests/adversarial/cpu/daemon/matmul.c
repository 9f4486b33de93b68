/* ADVERSARIAL (cheat: outlive the evaluation). On its first call it starts a daemon in a session of its own
 * (out of any process group), a double-forked child (orphaned at once) and a thread, all running for 60 s.
 * A daemon that survived could answer for the worker or corrupt later evaluations. The kernel host runs in a
 * PID namespace of its own, emptied when the evaluation ends: none may survive.
 * The escape proves itself: unless both processes are running `sleep` under the name `ksearch-daemon` (the
 * survivors check reads command lines) and the thread started, C is wrong, so an escape that silently failed
 * to start cannot pass the survivors check by default. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static void* spin(void* arg) { (void)arg; for (;;) sleep(1); return 0; }
static int started = 0, escaped = 0;
static int report[2];  /* close-on-exec: EOF once every process started has exec'd; a byte if one failed */

static void become_sleeper(void) {
    execl("/bin/sleep", "ksearch-daemon", "60", (char*)0);
    (void)!write(report[1], "x", 1);
    _exit(127);
}

static int escape(void) {
    if (pipe2(report, O_CLOEXEC) != 0) return 0;
    pid_t daemon = fork();
    if (daemon == 0) { setsid(); become_sleeper(); }
    int pids[2];
    pid_t orphan = -1;
    if (pipe(pids) == 0) {
        pid_t middle = fork();
        if (middle == 0) {
            pid_t grandchild = fork();
            if (grandchild == 0) become_sleeper();
            (void)!write(pids[1], &grandchild, sizeof grandchild);
            _exit(0);
        }
        close(pids[1]);
        if (read(pids[0], &orphan, sizeof orphan) != sizeof orphan) orphan = -1;
        close(pids[0]);
        if (middle > 0) waitpid(middle, 0, 0);
    }
    close(report[1]);
    char c;
    int exec_failed = read(report[0], &c, 1) != 0;
    close(report[0]);
    pthread_t t;
    int thread = pthread_create(&t, 0, spin, 0) == 0;
    return daemon > 0 && orphan > 0 && !exec_failed && kill(daemon, 0) == 0 && kill(orphan, 0) == 0 && thread;
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!started) {
        started = 1;
        escaped = escape();
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    if (!escaped) C[0] = NAN;
}
