// attention, expert: prefill (Tq > 1). One block of 32 * NW threads per (BQ = 16 * WM * NW query rows, b * Hq + h);
// fp16 / bf16 run FlashAttention-2 on tensor cores (mma.sync m16n8k16, fp32 accumulators), fp32 runs the same
// blocking on TF32 tensor cores in 3xTF32 (mma.sync m16n8k8). The device code is in attn.cuh. Template: D (head dim), NW, WM, BK (keys per tile), and the
// dims Hq, Hkv, Tq, Tk, CAUSAL as compile-time constants (no scalar inputs: each one would cost the caller an array
// per call). Dynamic shared memory: (BQ + 4 BK) * D * 2 bytes.
extern __shared__ __align__(128) unsigned char ks_smem[];
ksattn::prefill<D, NW, WM, BK>(q, k, v, o, Hq, Hkv, Tq, Tk, CAUSAL, ks_smem);
