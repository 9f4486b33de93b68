/* ADVERSARIAL (resource exhaustion: disk). On its first call it tries to write 2 GiB of zeros into its own
 * folder, as files of 40 MiB (each under the jail's 64 MiB limit on a file) at the top and in a subfolder, so
 * that only a bound on what the kernel host may write at all stops it. The host's folder is read-only to it
 * (Landlock) and no file of its may grow (a file-size limit of 0, everywhere): not one byte may land.
 * The attempt proves itself: if any byte was written, C is wrong. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

static int done = 0;
static size_t written = 0;

static void fill(const char* path) {
    static char block[1 << 20];
    FILE* f = fopen(path, "wb");
    if (!f) return;
    for (int i = 0; i < 40; ++i) written += fwrite(block, 1, sizeof block, f);
    fclose(f);
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!done) {
        done = 1;
        char path[64];
        mkdir("fill", 0700);
        for (int i = 0; i < 50; ++i) {
            snprintf(path, sizeof path, i % 2 ? "fill/%d.bin" : "fill%d.bin", i);
            fill(path);
        }
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    if (written > 0) C[0] = NAN;
}
