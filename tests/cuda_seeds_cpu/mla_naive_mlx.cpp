// The mla-paged-decode naive cuda seed carried to mlx-cuda by `ksearch translate` (tests/testsuite/cuda_seeds_cpu.rs
// writes the translation and puts it on the include path), run as MLX runs a body, with the checks of
// mla_naive.cpp: the translation computes what the seed computes.
#define KSEARCH_MLX_BODY
#include "mla_naive.cpp"
