// mla-paged-prefill, expert: one block of 8 warps per tile of 4 query tokens of a sequence; prefill.cuh says how.
// Template argument: T.
#include "prefill.cuh"

template <typename T>
__global__ void __launch_bounds__(32 * ksmla::PW)
    mla_prefill_tiles(const T* q_nope, const T* q_pe, const T* ckv_cache, const T* kpe_cache, const int* qo_indptr,
                      const int* kv_indptr, const int* kv_indices, T* output, float* lse, int B) {
  ksmla::prefill<T>(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output, lse, B);
}
