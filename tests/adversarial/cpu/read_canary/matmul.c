/* ADVERSARIAL (cheat: read what the kernel must not see, at run time). It tries /tmp/ksearch-adversarial-canary.txt
 * (root-only, planted by the test), /proc/self/environ, /proc/1/environ and the folder above its own; if any
 * read succeeds it writes the bytes it got into C, where they would show in error messages. Confined to its
 * folder, it can read none of them and computes C honestly: contained. */
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

static int grab(const char* path, unsigned char* out, int n) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    int got = (int)read(fd, out, (size_t)n);
    close(fd);
    return got > 0 ? got : 0;
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    unsigned char buf[64];
    const char* paths[] = {"/tmp/ksearch-adversarial-canary.txt", "/proc/self/environ", "/proc/1/environ", "../ksearch_plan.h"};
    for (int p = 0; p < 4; ++p) {
        int got = grab(paths[p], buf, 64);
        for (int i = 0; i < got && i < M * N; ++i) C[i] = (float)buf[i];
    }
}
