// Constructs with no MLX equivalent: printf, a partial-mask ballot, cooperative grid sync, textures,
// device-side launches and an atomicCAS loop.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__global__ void child(float* out) { out[threadIdx.x] = 1.0f; }

__global__ void everything(const float* x, float* out, cudaTextureObject_t tex, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) printf("n = %d\n", n);
    unsigned m = __ballot_sync(0x0000ffff, i < n);
    cg::grid_group grid = cg::this_grid();
    grid.sync();
    float t = tex1Dfetch<float>(tex, i);
    if (i == 0) child<<<1, 32>>>(out);
    int* bits = (int*)out;
    int old = atomicCAS(&bits[0], 0, 1);
    float e = erff(x[i]);
    if (i < n) out[i] = x[i] + t + e + (float)m + (float)old;
}
