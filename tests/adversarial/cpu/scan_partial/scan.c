/* ADVERSARIAL (cheat: writes part of the output). Runs the recurrence for the first L/2 time steps of
 * every channel and stops: the second half of h keeps its poison and must be reported unwritten. */
void scan(const float* a, const float* b, float* h, int64_t B, int64_t D, int64_t L) {
    for (int64_t r = 0; r < B * D; ++r) {
        float s = 0.0f;
        for (int64_t t = 0; t < L / 2; ++t) {
            s = a[r * L + t] * s + b[r * L + t];
            h[r * L + t] = s;
        }
    }
}
