/* ADVERSARIAL (cheat: relies on the network, e.g. to fetch answers or exfiltrate inputs). Generates no
 * traffic: it only lists the network interfaces it can see (getifaddrs) and computes C correctly only
 * when one besides loopback is up, i.e. when it could reach the network. The worker runs in a network
 * namespace of its own (only a loopback device), so it writes nothing: unwritten. A pass means the
 * candidate had network access. */
#include <ifaddrs.h>
#include <net/if.h>
#include <string.h>

static int online(void) {
    struct ifaddrs* list;
    if (getifaddrs(&list) != 0) return 0;
    int found = 0;
    for (struct ifaddrs* i = list; i; i = i->ifa_next)
        if (!(i->ifa_flags & IFF_LOOPBACK) && (i->ifa_flags & IFF_UP)) found = 1;
    freeifaddrs(list);
    return found;
}

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (!online()) return;
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
}
