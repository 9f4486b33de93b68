// mla-paged-decode, expert, second launch: one block of 512 threads per (sequence, head) merges the sequence's
// work items into output and the base-2 lse; mla.cuh says how.
#include "mla.cuh"

template <int CH, typename T>
__global__ void __launch_bounds__(ksmla::DC)
    mla_decode_merge(const float* part, const int* kv_indptr, T* output, float* lse, int B) {
  ksmla::merge<T, CH>(part, kv_indptr, output, lse, B);
}
