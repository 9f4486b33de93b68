// trimul, expert, first launch: a block of 8 warps per 128 pair rows normalises them and makes their left, right
// and out-gate channels on the tensor cores; trimul.cuh says how. Template arguments: D, H.
#include "trimul.cuh"

template <int D, int H>
__global__ void __launch_bounds__(256)
    trimul_project(const float* x, const float* mask, const float* norm_weight, const float* norm_bias,
                   const float* left_proj, const float* right_proj, const float* left_gate, const float* right_gate,
                   const float* out_gate, __half* left, __half* right, __half* gate, int B, int S) {
  kstri::project<D, H>(x, mask, norm_weight, norm_bias, left_proj, right_proj, left_gate, right_gate, out_gate, left,
                       right, gate, B, S);
}
