// The mlx-metal expert seed of gqa-paged-decode, back-translated to CUDA over the Metal prelude (`ksearch
// back-translate`), run with the checks of paged_decode.cpp: what the Metal means, where no Apple GPU is.
#define KSEARCH_METAL_SEED
#include "paged_decode.cpp"
