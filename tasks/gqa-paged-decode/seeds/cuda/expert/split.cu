// gqa-paged-decode, expert, first launch: one block of NW warps per (work item, KV head); paged.cuh says how.
// Template arguments: the plan's `template` values in order, then its type argument T.
#include "paged.cuh"

template <int D, int Hq, int Hkv, int CH, int NW, int KT, typename T>
__global__ void __launch_bounds__(32 * NW)
    paged_decode_split(const T* q, const T* k_cache, const T* v_cache, const int* kv_indptr, const int* kv_indices,
                       float* part, int B) {
  kspaged::split<T, D, Hq, Hkv, CH, NW, KT>(q, k_cache, v_cache, kv_indptr, kv_indices, part, B);
}
