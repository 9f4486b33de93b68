#define WARP_SIZE 32
__inline__ __device__ float warpReduceSum(float val) {
    for (int mask = WARP_SIZE / 2; mask > 0; mask /= 2)
        val += __shfl_xor_sync(0xffffffff, val, mask);
    return val;
}

__global__ void sum_all(const float* in, float* total, int n) {
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        sum += in[i];
    sum = warpReduceSum(sum);
    if ((threadIdx.x & (WARP_SIZE - 1)) == 0)
        atomicAdd(total, sum);
}
