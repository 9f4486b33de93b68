/* ADVERSARIAL (cheat: never returns). Spins forever: the evaluator must report a timeout within its
 * deadline, kill the worker's process group and go on. */
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    (void)A; (void)B; (void)C; (void)M; (void)N; (void)K;
    volatile int64_t spin = 0;
    for (;;) spin++;
}
