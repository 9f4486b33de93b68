__global__ void block_sum(const float* __restrict__ input, float* __restrict__ output, int N) {
    extern __shared__ float sdata[];
    unsigned tid = threadIdx.x;
    unsigned idx = blockIdx.x * (blockDim.x * 2) + threadIdx.x;
    float v = 0.0f;
    if (idx < N) v += input[idx];
    if (idx + blockDim.x < N) v += input[idx + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    #pragma unroll
    for (unsigned s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32) {
        float w = sdata[tid] + sdata[tid + 32];
        for (int offset = 16; offset > 0; offset >>= 1)
            w += __shfl_down_sync(0xFFFFFFFF, w, offset);
        if (tid == 0) output[blockIdx.x] = w;
    }
}

void launch(const float* in, float* out, int N) {
    const int threads = 256;
    int blocks = (N + threads * 2 - 1) / (threads * 2);
    block_sum<<<blocks, threads, threads * sizeof(float)>>>(in, out, N);
}
