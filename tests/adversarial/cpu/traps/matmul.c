/* ADVERSARIAL (cheat: traps). __builtin_trap() is an illegal instruction (ud2 on x86-64): the worker
 * dies of SIGILL, reported as a crash naming the signal. */
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    if (M > 0) C[0] = A[0] * B[0] + (float)(N + K);
    __builtin_trap();
}
