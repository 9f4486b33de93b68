// gqa-paged-decode, expert, second launch: one block of D threads per (sequence, query head) merges the
// sequence's work items into o and the base-2 lse; paged.cuh says how.
#include "paged.cuh"

template <int D, int Hq, int CH, typename T>
__global__ void __launch_bounds__(D) paged_decode_merge(const float* part, const int* kv_indptr, T* o, float* lse, int B) {
  kspaged::merge<T, D, Hq, CH>(part, kv_indptr, o, lse, B);
}
