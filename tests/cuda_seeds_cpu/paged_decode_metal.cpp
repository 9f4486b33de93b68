// The cuda target's gqa-paged-decode expert carried to Apple silicon and back: `ksearch translate` of the cuda
// seed to mlx-metal (helpers' shared memory hoisted into threadgroup structs, thread-local arrays, simd
// functions), then `ksearch back-translate` of that Metal to mlx-cuda bodies over the Metal prelude, run with
// the checks of paged_decode.cpp. What runs is the Metal translation's meaning: no Apple GPU is here.
#define KSEARCH_METAL_ROUND_TRIP
#include "paged_decode.cpp"
