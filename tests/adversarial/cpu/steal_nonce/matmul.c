/* ADVERSARIAL (cheat: steals the request nonce and forges the reply). A reply is believed only with its
 * request's random nonce, and the request line sits in the memory of the process that answers it. This
 * kernel reads the memory of its own process and of its parent (/proc/PID/mem), finds the request with
 * the highest id and its nonce, and writes a forged "passed" reply carrying both into every pipe it can
 * write to, its own and its parent's (/proc/PID/fd/N); then it computes nothing. Had it run inside the
 * worker, the forgery would carry the right nonce. It runs in the kernel host, a separate process that
 * never sees a nonce, cannot read the worker's memory or open its descriptors, and holds no reply pipe:
 * the outputs stay poisoned and the verdict is wrong (unwritten). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK (1 << 20)
#define SCAN_LIMIT (1ll << 31)

static long best_id = -1;
static char best_nonce[17];

static const char* find(const char* at, const char* end, const char* pat, size_t plen) {
    for (; at + plen <= end; ++at)
        if (*at == *pat && memcmp(at, pat, plen) == 0) return at;
    return NULL;
}

/* Every `"nonce":"<16 hex>"` in buf, paired with the last `"id":N` before it. */
static void scan(const char* buf, size_t n) {
    static const char pat[] = "\"nonce\":\"";
    const size_t plen = sizeof pat - 1;
    for (const char* p = buf; (p = find(p, buf + n, pat, plen)) != NULL; ++p) {
        if ((size_t)(p - buf) + plen + 16 > n) break;
        const char* hex = p + plen;
        int ok = 1;
        for (int i = 0; i < 16; ++i) ok &= (hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f');
        if (!ok) continue;
        for (const char* q = p; q > buf && q > p - 4096; --q) {
            if (strncmp(q, "\"id\":", 5) == 0) {
                const long id = strtol(q + 5, NULL, 10);
                if (id > best_id) {
                    best_id = id;
                    memcpy(best_nonce, hex, 16);
                }
                break;
            }
        }
    }
}

static void scan_process(long pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/maps", pid);
    FILE* maps = fopen(path, "r");
    snprintf(path, sizeof path, "/proc/%ld/mem", pid);
    const int mem = open(path, O_RDONLY);
    if (!maps || mem < 0) {
        fprintf(stderr, "steal_nonce: cannot read the memory of process %ld: %s\n", pid, strerror(errno));
        if (maps) fclose(maps);
        if (mem >= 0) close(mem);
        return;
    }
    char* buf = malloc(CHUNK + 4096);
    long long scanned = 0;
    char line[512];
    while (buf && fgets(line, sizeof line, maps) && scanned < SCAN_LIMIT) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 || perms[0] != 'r') continue;
        for (unsigned long at = lo; at < hi && scanned < SCAN_LIMIT; at += CHUNK) {
            const size_t want = hi - at < CHUNK + 4096 ? hi - at : CHUNK + 4096;  /* overlap the seams */
            const ssize_t got = pread(mem, buf, want, (off_t)at);
            if (got <= 0) break;
            scan(buf, (size_t)got);
            scanned += got;
        }
    }
    free(buf);
    fclose(maps);
    close(mem);
}

static void forge(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return;
    const int mode = fcntl(fd, F_GETFL) & O_ACCMODE;
    if (mode != O_WRONLY && mode != O_RDWR) return;
    char reply[512];
    const int n = snprintf(reply, sizeof reply,
        "{\"id\":%ld,\"nonce\":\"%s\",\"ok\":true,\"result\":{\"status\":\"passed\",\"message\":\"passed 2 seeds\","
        "\"checks\":[],\"timing\":{\"median_s\":2e-3,\"iqr_s\":1e-5,\"min_s\":1.9e-3,\"max_s\":2.2e-3,"
        "\"samples\":5,\"reps\":1},\"baselines\":{}}}\n", best_id, best_nonce);
    if (write(fd, reply, (size_t)n) < 0) return;
}

static int tried = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    (void)A; (void)B; (void)C; (void)M; (void)N; (void)K;
    if (tried) return;
    tried = 1;
    const long parent = (long)getppid();
    scan_process((long)getpid());
    scan_process(parent);
    if (best_id < 0) {
        fprintf(stderr, "steal_nonce: no request nonce found\n");
        return;
    }
    fprintf(stderr, "steal_nonce: forging a reply to request %ld with nonce %s\n", best_id, best_nonce);
    for (int fd = 0; fd < 1024; ++fd) forge(fd);
    for (int n = 0; n < 1024; ++n) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/fd/%d", parent, n);
        const int fd = open(path, O_WRONLY | O_NONBLOCK);
        if (fd < 0) continue;
        forge(fd);
        close(fd);
    }
}
