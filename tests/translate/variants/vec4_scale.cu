__global__ void scale4(const float* __restrict__ x, float* __restrict__ y, int n4, float unused_pad) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x = rsqrtf(v.x * v.x + 1.0f); v.y *= 2.0f; v.z = __ldg(&x[4 * i + 2]); v.w = tanhf(v.w);
        reinterpret_cast<float4*>(y)[i] = v;
    }
}
