// A warp-level tensor-core GEMM as hand-written CUDA does it: C (M x N, float) = A (M x K, half, row-major)
// times B (K x N, half, stored column by column: column n's K values contiguous), one warp per 16 x 8 tile of C.
// Each step stages a 16 x 16 tile of A and a 16 x 8 tile of B in shared memory with cp.async (16-byte copies,
// zero-filled past the edges; K a multiple of 8), then multiplies them on the tensor cores with
// mma.sync.aligned.m16n8k16: the inline PTX that `ksearch translate` emulates on Metal.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__device__ __forceinline__ void cp16(void* dst, const void* src, bool ok) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

// c += a b on the tensor cores: lane (g = lane / 4, t = lane % 4) holds the fragments of PTX's layout.
__device__ __forceinline__ void mma16816(float* c, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__global__ void gemm_mma(const __half* A, const __half* B, float* C, int M, int N, int K) {
  __shared__ __align__(16) __half sa[16][16];  // rows x k
  __shared__ __align__(16) __half sb[8][16];   // columns x k
  const int lane = threadIdx.x, row0 = blockIdx.y * 16, col0 = blockIdx.x * 8;
  const int g = lane / 4, t = lane % 4;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < K; k0 += 16) {
    {  // A: 16 rows x two 8-half chunks, one copy per lane
      const int r = lane / 2, k = k0 + (lane % 2) * 8;
      const bool ok = row0 + r < M && k < K;
      cp16(&sa[r][(lane % 2) * 8], A + (ok ? (size_t)(row0 + r) * K + k : 0), ok);
    }
    if (lane < 16) {  // B: 8 columns x two chunks
      const int n = lane / 2, k = k0 + (lane % 2) * 8;
      const bool ok = col0 + n < N && k < K;
      cp16(&sb[n][(lane % 2) * 8], B + (ok ? (size_t)(col0 + n) * K + k : 0), ok);
    }
    cp_commit();
    cp_wait_all();
    __syncwarp();
    unsigned a[4], b[2];
    a[0] = *reinterpret_cast<const unsigned*>(&sa[g][2 * t]);
    a[1] = *reinterpret_cast<const unsigned*>(&sa[g + 8][2 * t]);
    a[2] = *reinterpret_cast<const unsigned*>(&sa[g][2 * t + 8]);
    a[3] = *reinterpret_cast<const unsigned*>(&sa[g + 8][2 * t + 8]);
    b[0] = *reinterpret_cast<const unsigned*>(&sb[g][2 * t]);
    b[1] = *reinterpret_cast<const unsigned*>(&sb[g][2 * t + 8]);
    mma16816(c, a, b);
    __syncwarp();
  }
  const int r = row0 + g, n = col0 + 2 * t;
  if (r < M && n < N) C[(size_t)r * N + n] = c[0];
  if (r < M && n + 1 < N) C[(size_t)r * N + n + 1] = c[1];
  if (r + 8 < M && n < N) C[(size_t)(r + 8) * N + n] = c[2];
  if (r + 8 < M && n + 1 < N) C[(size_t)(r + 8) * N + n + 1] = c[3];
}

void launch(const __half* A, const __half* B, float* C, int M, int N, int K, cudaStream_t s) {
  gemm_mma<<<dim3((N + 7) / 8, (M + 15) / 16), 32, 0, s>>>(A, B, C, M, N, K);
}
