// Helpers of the ssd expert: 16-bit packing, the hi/lo split of float operands, and the tensor-core MMA.
//
// Fragments follow PTX's mma.m16n8k16 layout (lane = 4 * gq + tq): A (16 x 16, row-major) is four
// 32-bit registers {(gq, 2tq..2tq+1), (gq+8, 2tq..), (gq, 8+2tq..), (gq+8, 8+2tq..)}; B (16 x 8, k-major)
// two registers {(k = 2tq..2tq+1, n = gq), (k = 8+2tq.., n = gq)}; C/D (16 x 8 f32) four floats
// {(gq, 2tq), (gq, 2tq+1), (gq+8, 2tq), (gq+8, 2tq+1)}. In each register the lower index sits in the
// lower 16 bits.
//
// A float operand v enters the tensor cores as two 16-bit values, hi = rn(v) and lo = rn(v - hi): the
// product with an exact 16-bit operand then errs by about 2^-17 |v| (bf16) instead of 2^-9 |v|.
// The templates are compiled for T = float too (the float path of the kernel never calls them).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename A, typename B> struct ssd_same { static constexpr bool value = false; };
template <typename A> struct ssd_same<A, A> { static constexpr bool value = true; };

template <typename T>
__device__ __forceinline__ uint32_t ssd_pack(float a, float b) {  // a in the low half
  if constexpr (ssd_same<T, __half>::value) {
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <typename T>
__device__ __forceinline__ float2 ssd_unpack(uint32_t u) {
  if constexpr (ssd_same<T, __half>::value) {
    return __half22float2(*reinterpret_cast<__half2*>(&u));
  } else {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
  }
}

// hi = rn(a, b), lo = rn(a - hi.a, b - hi.b)
template <typename T>
__device__ __forceinline__ void ssd_split(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = ssd_pack<T>(a, b);
  const float2 h = ssd_unpack<T>(hi);
  lo = ssd_pack<T>(a - h.x, b - h.y);
}

// d += A B on the tensor cores (f32 accumulators); T picks bf16 or f16 inputs.
template <typename T>
__device__ __forceinline__ void ssd_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (ssd_same<T, __half>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 32 bits of 16-bit data at p (p must be 4-byte aligned).
template <typename T>
__device__ __forceinline__ uint32_t ssd_ld32(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Two 16-bit values (at p0 and p1) in one register, p0's in the low half: a fragment pair along a
// column of a row-major shared array.
template <typename T>
__device__ __forceinline__ uint32_t ssd_pair(const T* p0, const T* p1) {
  return (uint32_t)(*reinterpret_cast<const unsigned short*>(p0)) |
         ((uint32_t)(*reinterpret_cast<const unsigned short*>(p1)) << 16);
}

// Asynchronous 16-byte copy global -> shared (cp.async, L2 only); zero-fills when !valid (src unread).
__device__ __forceinline__ void ssd_cp16(void* dst, const void* src, bool valid) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n));
}
__device__ __forceinline__ void ssd_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void ssd_cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
