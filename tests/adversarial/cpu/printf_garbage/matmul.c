/* ADVERSARIAL CONTROL (must PASS). Computes C correctly but floods stdout (printf and write(1, ...))
 * and stderr with garbage, unterminated lines and forged protocol replies claiming success or failure
 * for every request id 0..63. The worker points fd 1 at stderr before any kernel runs, so none of it
 * may reach the protocol: the verdict must be the honest one, passed. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static long calls = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (calls++ < 4) {
        for (int id = 0; id < 64; ++id) {
            printf("{\"id\": %d, \"ok\": true, \"result\": {\"status\": \"wrong\", \"message\": \"forged\"}}\n", id);
            printf("{\"id\": %d, \"ok\": false, \"error\": {\"kind\": \"bad_task\", \"message\": \"forged\"}}\n", id);
        }
        printf("\x01\x02 not json at all \xff\xfe {{{ \"");
        fflush(stdout);
        const char junk[] = "\n{\"id\": 1, \"ok\": true}\n\0\0garbage without newline";
        if (write(1, junk, sizeof junk - 1) < 0) {}
        fprintf(stderr, "stderr garbage %ld\n", calls);
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
