/* ADVERSARIAL (cheat: writes nothing). Returns at once and leaves C as the caller left it, hoping the
 * buffer happens to hold a plausible result. The poisoned output must be reported as unwritten. */
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    (void)A; (void)B; (void)C; (void)M; (void)N; (void)K;
}
