// trimul, expert, second launch: the triangle sum, a 128 x 128 tile of left[b, c] right[b, c]^T per block on the
// tensor cores; trimul.cuh says how.
#include "trimul.cuh"

__global__ void __launch_bounds__(256) trimul_triangle(const __half* left, const __half* right, float* tri, int S) {
  kstri::triangle(left, right, tri, S);
}
