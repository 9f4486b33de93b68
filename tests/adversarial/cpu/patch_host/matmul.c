/* ADVERSARIAL (cheat: patch the process that runs it). On its first call it takes the GIL and runs Python in
 * its own host (PyRun_SimpleString, found with dlsym): the host's `run` is replaced by one that makes only
 * the first call of any request for several calls, the shape timed requests have, and a host whose empty
 * requests are answered only after a pause, to skew a round-trip calibration. The call count, the clock and
 * the calibration live in the worker, and every timed call's outputs must be written whole. */
#include <dlfcn.h>
#include <stdint.h>

typedef int (*ensure_t)(void);
typedef void (*release_t)(int);
typedef int (*run_t)(const char*);

static const char* PATCH =
    "import time\n"
    "import ksearch_worker.kernel_host as kh\n"
    "_orig = kh.Host.run\n"
    "def run(self, msg):\n"
    "    if not msg.get('calls'):\n"
    "        time.sleep(0.01)\n"
    "        return None\n"
    "    if len(msg.get('slots') or []) > 1:\n"
    "        msg = dict(msg, slots=msg['slots'][:1])\n"
    "    return _orig(self, msg)\n"
    "kh.Host.run = run\n";

static int patched = 0;

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!patched) {
        patched = 1;
        void* self = dlopen(NULL, RTLD_NOW);
        ensure_t ensure = (ensure_t)dlsym(self, "PyGILState_Ensure");
        release_t release = (release_t)dlsym(self, "PyGILState_Release");
        run_t run = (run_t)dlsym(self, "PyRun_SimpleString");
        if (ensure && release && run) {
            int g = ensure();
            run(PATCH);
            release(g);
        }
    }
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
