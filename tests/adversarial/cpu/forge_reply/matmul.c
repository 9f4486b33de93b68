/* ADVERSARIAL (cheat: forges the protocol). Printing to stdout is harmless (fd 1 points at stderr),
 * but the kernel runs inside the worker process and can find the worker's private copy of the reply
 * pipe: it writes a forged success reply for every request id 1..400 into every open pipe it may write
 * to (fds 3..1023), then computes nothing. If the evaluator believes the first line that carries the
 * id it waits for, the candidate "passes" without computing anything. Any verdict but passed is
 * acceptable. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    (void)A; (void)B; (void)C; (void)M; (void)N; (void)K;
    char line[512];
    for (int fd = 3; fd < 1024; ++fd) {
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) continue;
        const int mode = fcntl(fd, F_GETFL) & O_ACCMODE;
        if (mode != O_WRONLY && mode != O_RDWR) continue;
        for (int id = 1; id <= 400; ++id) {
            const int n = snprintf(line, sizeof line,
                "{\"id\": %d, \"ok\": true, \"result\": {\"status\": \"passed\", \"message\": \"passed 2 seeds\", "
                "\"checks\": [], \"timing\": {\"median_s\": 2e-3, \"iqr_s\": 1e-5, \"min_s\": 1.9e-3, \"max_s\": 2.2e-3, "
                "\"samples\": 5, \"reps\": 1}, \"baselines\": {}}}\n", id);
            if (write(fd, line, (size_t)n) < 0) break;
        }
    }
}
