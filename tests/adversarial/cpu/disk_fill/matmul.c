/* ADVERSARIAL (resource exhaustion: disk). On its first call it writes 4 GiB of zeros into a file in its own
 * folder, the one place it may write. The jail's limit on a file's size stops the file at 64 MiB (the host
 * ignores SIGXFSZ, so the writes fail with EFBIG), and a folder that full is the candidate's failure,
 * with the machine's disk left alone. */
#include <stdint.h>
#include <stdio.h>

static int done = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!done) {
        done = 1;
        static char block[1 << 20];
        FILE* f = fopen("fill.bin", "wb");
        for (int i = 0; f && i < 4096; ++i) fwrite(block, 1, sizeof block, f);
        if (f) fclose(f);
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
