// Module state of module_state_a_fill / module_state_b_reuse: a table of 2^(i/64), i in [0, 64), that the
// kernel builds when FILL is 1 and only reads when FILL is 0. It starts zeroed in every freshly loaded module.
#define LUT_SIZE 64
__device__ float lut[LUT_SIZE];
