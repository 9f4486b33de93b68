// Translations the analysis cannot make right, each of which must say so with an error.

// A const input written through a cast.
__global__ void scale_const_cast(const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        ((float*)x)[i] = x[i] * 2.0f;
    }
}

// In place, and read again after the thread's own write: split, the second read would see the old value.
__global__ void twice_in_place(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = x[i] + 1.0f;
        x[i] = x[i] * 2.0f;
    }
}

// Updated after its own write: `x_out[i] = x[i] + 1` would add to the old value.
__global__ void update_after_write(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = x[i] * 2.0f;
        x[i] += 1.0f;
    }
}

// A float scalar: plan scalars are int32.
__global__ void axpy(float alpha, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = alpha * x[i] + y[i];
    }
}
