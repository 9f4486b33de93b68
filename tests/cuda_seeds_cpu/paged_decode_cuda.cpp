// The cuda target's gqa-paged-decode expert (tasks/gqa-paged-decode/seeds/cuda/expert: split.cu and merge.cu,
// whole __global__ functions) on the CPU emulation, with the checks of paged_decode.cpp.
#define KSEARCH_CUDA_TARGET
#include "paged_decode.cpp"
