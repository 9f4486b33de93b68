// The cuda target's gqa-paged-decode naive seed (tasks/gqa-paged-decode/seeds/cuda/naive/paged_decode.cu) on the CPU
// emulation, with the checks of paged_decode.cpp (NW warps per block; the other template values unused).
#define KSEARCH_CUDA_NAIVE
#include "paged_decode.cpp"
