// Sum of each row with warp shuffles: one block of 32 * WARPS threads per row.
constexpr int WARPS = 8;
#define FULL_MASK 0xffffffff

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) {
        v += __shfl_down_sync(FULL_MASK, v, offset);
    }
    return v;
}

__global__ void row_sum(const float* x, float* y, int rows, int cols) {
    __shared__ float partial[WARPS];
    int row = blockIdx.x;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        acc += xr[j];
    }
    acc = warp_sum(acc);
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        float v = lane < WARPS ? partial[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            v += __shfl_xor_sync(0xffffffff, v, offset);
        }
        if (lane == 0) y[row] = v;
    }
}

void launch_row_sum(const float* x, float* y, int rows, int cols) {
    row_sum<<<rows, 32 * WARPS>>>(x, y, rows, cols);
}
