// trimul, expert, third launch: a block of 8 warps per 128 pairs normalises their channels, gates them and
// projects them to D on the tensor cores; trimul.cuh says how. Template arguments: D, H.
#include "trimul.cuh"

template <int D, int H>
__global__ void __launch_bounds__(256)
    trimul_output(const float* tri, const __half* gate, const float* out_norm_weight, const float* out_norm_bias,
                  const float* to_out, float* out, int B, int S) {
  kstri::output<D, H>(tri, gate, out_norm_weight, out_norm_bias, to_out, out, B, S);
}
