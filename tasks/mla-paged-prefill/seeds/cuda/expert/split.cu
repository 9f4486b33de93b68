// mla-paged-decode, expert, first launch: one block of 4 warps per work item (a sequence's chunk of CH pages);
// mla.cuh says how. Template arguments: the plan's template value CH, then T.
#include "mla.cuh"

template <int CH, typename T>
__global__ void __launch_bounds__(32 * ksmla::NW)
    mla_decode_split(const T* q_nope, const T* q_pe, const T* ckv_cache, const T* kpe_cache, const int* kv_indptr,
                     const int* kv_indices, float* part, int B) {
  ksmla::split<T, CH>(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, part, B);
}
