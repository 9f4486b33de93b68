/* ADVERSARIAL (cheat: writes a constant). y = 1/N everywhere: every row sums to 1 and the answer is
 * exact for flat rows, so it would pass on degenerate inputs (constant x). The task's inputs have a
 * per-row spread, so the values must be reported outside tolerance. */
void softmax(const float* x, float* y, int64_t M, int64_t N) {
    (void)x;
    const float c = 1.0f / (float)N;
    for (int64_t i = 0; i < M * N; ++i) y[i] = c;
}
