#define NUM_BINS 64
__global__ void histo_kernel(unsigned char *buffer, long size, unsigned int *histo) {
    __shared__ unsigned int temp[NUM_BINS];
    if (threadIdx.x < NUM_BINS) temp[threadIdx.x] = 0;
    __syncthreads();
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    int offset = blockDim.x * gridDim.x;
    while (i < size) {
        atomicAdd(&temp[buffer[i] % NUM_BINS], 1);
        i += offset;
    }
    __syncthreads();
    if (threadIdx.x < NUM_BINS) atomicAdd(&(histo[threadIdx.x]), temp[threadIdx.x]);
}
