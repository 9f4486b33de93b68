__global__ void sum_reduce(const float *input, float *result, unsigned int n) {
    __shared__ float cache[512];
    unsigned int tid = threadIdx.x;
    unsigned int gid = blockIdx.x * blockDim.x * 2 + threadIdx.x;
    float temp = 0;
    while (gid < n) { temp += input[gid]; if (gid + blockDim.x < n) temp += input[gid + blockDim.x]; gid += blockDim.x * gridDim.x * 2; }
    cache[tid] = temp;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) cache[tid] += cache[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(result, cache[0]);
}
int main() { float *d_in, *d_out; unsigned int n = 1 << 24; sum_reduce<<<256, 512>>>(d_in, d_out, n); }
