// File-scope types of everyday CUDA, a Metal-style `uint`, and a vector cast of a read-only input.
struct Pair { float a; float b; };

struct __align__(16) Vec4 { float x, y, z, w; };

template <typename T>
struct Acc {
    T sum;
    __device__ void add(T v) { sum += v; }
};

__device__ float twice(Pair p) { return p.a * 2.0f + p.b; }

__global__ void uses_types(float* x, float* y, int n) {
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n / 4) return;
    float4 q = reinterpret_cast<float4*>(x)[i];
    Pair p; p.a = q.x; p.b = q.y;
    Acc<float> acc; acc.sum = 0.0f; acc.add(twice(p));
    Vec4 v; v.x = acc.sum; v.y = q.z; v.z = q.w; v.w = 0.0f;
    y[i] = v.x + v.y + v.z + v.w;
}

void run(float* x, float* y, int n) { uses_types<<<(n / 4 + 255) / 256, 256>>>(x, y, n); }
