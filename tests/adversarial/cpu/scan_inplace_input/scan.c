/* ADVERSARIAL (cheat: aliases an input). Runs the recurrence in place in b (const cast away: "saves a
 * buffer"), then copies the result into h. h is right, b is destroyed: a modified input. */
#include <string.h>

void scan(const float* a, const float* b, float* h, int64_t B, int64_t D, int64_t L) {
    float* bw = (float*)b;
    for (int64_t r = 0; r < B * D; ++r)
        for (int64_t t = 1; t < L; ++t) bw[r * L + t] += a[r * L + t] * bw[r * L + t - 1];
    memcpy(h, b, (size_t)(B * D * L) * sizeof(float));
}
