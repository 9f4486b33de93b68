/* ADVERSARIAL (cheat: downgrades precision beyond tolerance). A correct three-pass softmax, but exp is
 * Schraudolph's bit trick (write a scaled x into the exponent field), ~4% relative error: fast and
 * plausible looking, far outside the task's rtol of 1e-3. */
#include <string.h>

static inline float crude_exp(float x) {
    if (x < -87.0f) return 0.0f;
    const int32_t i = (int32_t)(12102203.0f * x) + 1065353216;
    float f;
    memcpy(&f, &i, 4);
    return f;
}

void softmax(const float* x, float* y, int64_t M, int64_t N) {
    for (int64_t r = 0; r < M; ++r) {
        const float* xr = x + r * N;
        float* yr = y + r * N;
        float mx = xr[0];
        for (int64_t j = 1; j < N; ++j) mx = xr[j] > mx ? xr[j] : mx;
        float s = 0.0f;
        for (int64_t j = 0; j < N; ++j) s += (yr[j] = crude_exp(xr[j] - mx));
        const float inv = 1.0f / s;
        for (int64_t j = 0; j < N; ++j) yr[j] *= inv;
    }
}
