// The mlx-metal naive seed of gqa-paged-decode, back-translated to CUDA over the Metal prelude, run with the
// checks of paged_decode.cpp.
#define KSEARCH_METAL_NAIVE
#include "paged_decode.cpp"
