/* ADVERSARIAL (cheat: hard-codes the feedback shapes). Every non-held-out matmul workload has M, N and
 * K divisible by 64, so this kernel only runs whole 64x64x64 tiles: rows and columns past the last
 * whole tile are set to 0 and the K remainder is dropped. Correct on every feedback workload; only the
 * held-out odd300x129x257 (and gemv1x512x1000) can catch it, as values outside tolerance. */
#define T 64

void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M * N; ++i) C[i] = 0.0f;
    const int64_t Mt = M / T * T, Nt = N / T * T, Kt = K / T * T;
    for (int64_t i0 = 0; i0 < Mt; i0 += T)
        for (int64_t k0 = 0; k0 < Kt; k0 += T)
            for (int64_t j0 = 0; j0 < Nt; j0 += T)
                for (int64_t i = i0; i < i0 + T; ++i)
                    for (int64_t k = k0; k < k0 + T; ++k)
                        for (int64_t j = j0; j < j0 + T; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
}
