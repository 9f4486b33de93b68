/* ADVERSARIAL (cheat: hard-codes the feedback shapes). Every non-held-out scan workload has D a
 * multiple of 256 and L a multiple of 512, so only whole 256-channel x 512-step blocks run the real
 * recurrence; anything else gets h = b (the recurrence with a = 0). Correct on every feedback
 * workload, wrong on the held-out b3_d100_l999. */
void scan(const float* a, const float* b, float* h, int64_t B, int64_t D, int64_t L) {
    const int64_t R = B * D;
    const int whole = D % 256 == 0 && L % 512 == 0;
    for (int64_t r = 0; r < R; ++r) {
        float s = 0.0f;
        for (int64_t t = 0; t < L; ++t) {
            s = whole ? a[r * L + t] * s + b[r * L + t] : b[r * L + t];
            h[r * L + t] = s;
        }
    }
}
