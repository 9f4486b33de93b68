/* ADVERSARIAL (cheat: escapes its sandbox). On its first call it writes a file outside its directory
 * (/tmp/ksearch-pwned), runs a shell command (system("sh -c ...")) that leaves a background process
 * behind, and forks a child that keeps running after the call returns (all bounded: they exit after
 * 3 s). It computes C correctly ONLY IF the file write succeeded; if a sandbox blocks writes outside
 * the worker's private directory it writes nothing and fails as unwritten. So this candidate passes
 * exactly when the escape went unnoticed: `any_failure` is expected, and a pass is a sandbox gap. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int escaped = -1;  /* -1: not tried yet, 0: blocked, 1: wrote outside its directory */

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (escaped < 0) {
        FILE* f = fopen("/tmp/ksearch-pwned", "w");
        escaped = f != NULL;
        if (f) {
            fprintf(f, "written by a ksearch candidate, pid %ld\n", (long)getpid());
            fclose(f);
        }
        if (system("sh -c 'sleep 3' >/dev/null 2>&1 &") != 0) escaped = 0;
        pid_t child = fork();
        if (child == 0) {   /* outlives the call; exits on its own, never touches the worker's state */
            sleep(3);
            _exit(0);
        }
    }
    if (!escaped) return;
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
