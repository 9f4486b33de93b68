#include <cstdio>
extern "C" __global__ void add(const float *x, const float *y, float *out, size_t n) {
    for (size_t idx = threadIdx.x + blockIdx.x * blockDim.x; idx < n; idx += gridDim.x * blockDim.x)
        out[idx] = x[idx] + y[idx];
}
int main() {
    int n = 1 << 20;
    float *x, *y, *out;
    add<<<(n + 511) / 512, 512>>>(x, y, out, n);
    return 0;
}
