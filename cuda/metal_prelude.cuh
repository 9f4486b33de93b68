// ksearch back-translation prelude: the Metal built-ins that MLX-style Metal kernel bodies use, emulated in
// CUDA so that a back-translated body runs through mx.fast.cuda_kernel (see docs/back-translation.md).
// It is prepended to every back-translated kernel's header. Everything lives in namespace `ksbt` (the
// back-translator rewrites `metal::exp`, `simd_sum`, ... to `ksbt::...`), except the vector operators, which
// must be global so that argument-dependent lookup finds them from MLX's namespace.
// Goal: the same results as on an Apple GPU within the task's tolerances, not speed.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// MLX-CUDA's default header defines a macro `inf`; Metal has none, and a Metal body may name a variable so.
#ifdef inf
#undef inf
#endif

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

#ifndef M_PI_F
#define M_PI_F 3.14159265358979323846f
#endif
#ifndef M_PI_2_F
#define M_PI_2_F 1.57079632679489661923f
#endif
#ifndef M_E_F
#define M_E_F 2.71828182845904523536f
#endif
#ifndef M_LOG2E_F
#define M_LOG2E_F 1.44269504088896340736f
#endif
#ifndef M_LOG10E_F
#define M_LOG10E_F 0.434294481903251827651f
#endif
#ifndef M_LN2_F
#define M_LN2_F 0.693147180559945309417f
#endif
#ifndef M_LN10_F
#define M_LN10_F 2.30258509299404568402f
#endif
#ifndef M_SQRT2_F
#define M_SQRT2_F 1.41421356237309504880f
#endif
#ifndef M_SQRT1_2_F
#define M_SQRT1_2_F 0.707106781186547524401f
#endif
#ifndef M_1_PI_F
#define M_1_PI_F 0.318309886183790671538f
#endif
#ifndef MAXFLOAT
#define MAXFLOAT 3.402823466e+38f
#endif
#ifndef FLT_MAX
#define FLT_MAX 3.402823466e+38f
#endif
#ifndef FLT_MIN
#define FLT_MIN 1.175494351e-38f
#endif
#ifndef FLT_EPSILON
#define FLT_EPSILON 1.192092896e-07f
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef HUGE_VALF
#define HUGE_VALF __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

// ---- vector operators (Metal vectors have element-wise arithmetic; CUDA's have none) ----------------
#define KSBT_VOPS2(V, S)                                                                                     \
  __device__ inline V operator+(V a, V b) { return {a.x + b.x, a.y + b.y}; }                                \
  __device__ inline V operator-(V a, V b) { return {a.x - b.x, a.y - b.y}; }                                \
  __device__ inline V operator*(V a, V b) { return {a.x * b.x, a.y * b.y}; }                                \
  __device__ inline V operator/(V a, V b) { return {a.x / b.x, a.y / b.y}; }                                \
  __device__ inline V operator+(V a, S s) { return {a.x + s, a.y + s}; }                                    \
  __device__ inline V operator-(V a, S s) { return {a.x - s, a.y - s}; }                                    \
  __device__ inline V operator*(V a, S s) { return {a.x * s, a.y * s}; }                                    \
  __device__ inline V operator/(V a, S s) { return {a.x / s, a.y / s}; }                                    \
  __device__ inline V operator+(S s, V a) { return {s + a.x, s + a.y}; }                                    \
  __device__ inline V operator-(S s, V a) { return {s - a.x, s - a.y}; }                                    \
  __device__ inline V operator*(S s, V a) { return {s * a.x, s * a.y}; }                                    \
  __device__ inline V operator/(S s, V a) { return {s / a.x, s / a.y}; }                                    \
  __device__ inline V operator-(V a) { return {-a.x, -a.y}; }
#define KSBT_VOPS3(V, S)                                                                                     \
  __device__ inline V operator+(V a, V b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }                     \
  __device__ inline V operator-(V a, V b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }                     \
  __device__ inline V operator*(V a, V b) { return {a.x * b.x, a.y * b.y, a.z * b.z}; }                     \
  __device__ inline V operator/(V a, V b) { return {a.x / b.x, a.y / b.y, a.z / b.z}; }                     \
  __device__ inline V operator+(V a, S s) { return {a.x + s, a.y + s, a.z + s}; }                           \
  __device__ inline V operator-(V a, S s) { return {a.x - s, a.y - s, a.z - s}; }                           \
  __device__ inline V operator*(V a, S s) { return {a.x * s, a.y * s, a.z * s}; }                           \
  __device__ inline V operator/(V a, S s) { return {a.x / s, a.y / s, a.z / s}; }                           \
  __device__ inline V operator+(S s, V a) { return {s + a.x, s + a.y, s + a.z}; }                           \
  __device__ inline V operator-(S s, V a) { return {s - a.x, s - a.y, s - a.z}; }                           \
  __device__ inline V operator*(S s, V a) { return {s * a.x, s * a.y, s * a.z}; }                           \
  __device__ inline V operator/(S s, V a) { return {s / a.x, s / a.y, s / a.z}; }                           \
  __device__ inline V operator-(V a) { return {-a.x, -a.y, -a.z}; }
#define KSBT_VOPS4(V, S)                                                                                     \
  __device__ inline V operator+(V a, V b) { return {a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w}; }          \
  __device__ inline V operator-(V a, V b) { return {a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w}; }          \
  __device__ inline V operator*(V a, V b) { return {a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w}; }          \
  __device__ inline V operator/(V a, V b) { return {a.x / b.x, a.y / b.y, a.z / b.z, a.w / b.w}; }          \
  __device__ inline V operator+(V a, S s) { return {a.x + s, a.y + s, a.z + s, a.w + s}; }                  \
  __device__ inline V operator-(V a, S s) { return {a.x - s, a.y - s, a.z - s, a.w - s}; }                  \
  __device__ inline V operator*(V a, S s) { return {a.x * s, a.y * s, a.z * s, a.w * s}; }                  \
  __device__ inline V operator/(V a, S s) { return {a.x / s, a.y / s, a.z / s, a.w / s}; }                  \
  __device__ inline V operator+(S s, V a) { return {s + a.x, s + a.y, s + a.z, s + a.w}; }                  \
  __device__ inline V operator-(S s, V a) { return {s - a.x, s - a.y, s - a.z, s - a.w}; }                  \
  __device__ inline V operator*(S s, V a) { return {s * a.x, s * a.y, s * a.z, s * a.w}; }                  \
  __device__ inline V operator/(S s, V a) { return {s / a.x, s / a.y, s / a.z, s / a.w}; }                  \
  __device__ inline V operator-(V a) { return {-a.x, -a.y, -a.z, -a.w}; }
#define KSBT_VASSIGN(V, S)                                                                                   \
  __device__ inline V& operator+=(V& a, V b) { return a = a + b; }                                         \
  __device__ inline V& operator-=(V& a, V b) { return a = a - b; }                                         \
  __device__ inline V& operator*=(V& a, V b) { return a = a * b; }                                         \
  __device__ inline V& operator/=(V& a, V b) { return a = a / b; }                                         \
  __device__ inline V& operator+=(V& a, S s) { return a = a + s; }                                         \
  __device__ inline V& operator-=(V& a, S s) { return a = a - s; }                                         \
  __device__ inline V& operator*=(V& a, S s) { return a = a * s; }                                         \
  __device__ inline V& operator/=(V& a, S s) { return a = a / s; }
KSBT_VOPS2(float2, float) KSBT_VOPS3(float3, float) KSBT_VOPS4(float4, float)
KSBT_VOPS2(int2, int) KSBT_VOPS3(int3, int) KSBT_VOPS4(int4, int)
KSBT_VOPS2(uint2, uint) KSBT_VOPS3(uint3, uint) KSBT_VOPS4(uint4, uint)
KSBT_VASSIGN(float2, float) KSBT_VASSIGN(float3, float) KSBT_VASSIGN(float4, float)
KSBT_VASSIGN(int2, int) KSBT_VASSIGN(int3, int) KSBT_VASSIGN(int4, int)
KSBT_VASSIGN(uint2, uint) KSBT_VASSIGN(uint3, uint) KSBT_VASSIGN(uint4, uint)

// ---- half / bfloat with float: Metal computes in float; CUDA finds `h * 2.0f` ambiguous -----------------
// Templates restricted to float and double operands: better matches than CUDA's (__half, __half) operators,
// and never a redefinition of any operator a CUDA or MLX header may declare.
template <class F> struct ksbt_real {};
template <> struct ksbt_real<float> { typedef float type; typedef bool test; };
template <> struct ksbt_real<double> { typedef float type; typedef bool test; };
#define KSBT_HALF_FLOAT_OP(H, TOF, OP)                                                                       \
  template <class F> __device__ inline typename ksbt_real<F>::type operator OP(H a, F b) {                 \
    return TOF(a) OP float(b);                                                                              \
  }                                                                                                         \
  template <class F> __device__ inline typename ksbt_real<F>::type operator OP(F a, H b) {                 \
    return float(a) OP TOF(b);                                                                              \
  }
#define KSBT_HALF_FLOAT_CMP(H, TOF, OP)                                                                      \
  template <class F> __device__ inline typename ksbt_real<F>::test operator OP(H a, F b) {                 \
    return TOF(a) OP float(b);                                                                              \
  }                                                                                                         \
  template <class F> __device__ inline typename ksbt_real<F>::test operator OP(F a, H b) {                 \
    return float(a) OP TOF(b);                                                                              \
  }
#define KSBT_HALF_FLOAT(H, TOF)                                                                              \
  KSBT_HALF_FLOAT_OP(H, TOF, +) KSBT_HALF_FLOAT_OP(H, TOF, -) KSBT_HALF_FLOAT_OP(H, TOF, *)                   \
  KSBT_HALF_FLOAT_OP(H, TOF, /) KSBT_HALF_FLOAT_CMP(H, TOF, <) KSBT_HALF_FLOAT_CMP(H, TOF, >)                 \
  KSBT_HALF_FLOAT_CMP(H, TOF, <=) KSBT_HALF_FLOAT_CMP(H, TOF, >=)
KSBT_HALF_FLOAT(__half, __half2float)
KSBT_HALF_FLOAT(__nv_bfloat16, __bfloat162float)

namespace ksbt {

// ---- vector traits, constructors (`float4(a, b, c, d)` becomes `ksbt::make_float4(a, b, c, d)`), swizzles --
template <class S, int N> struct vec;
template <class V> struct elem { typedef V type; static constexpr int n = 1; };
#define KSBT_VEC(S, P)                                                                                       \
  template <> struct vec<S, 2> { typedef P##2 type; };                                                       \
  template <> struct vec<S, 3> { typedef P##3 type; };                                                       \
  template <> struct vec<S, 4> { typedef P##4 type; };                                                       \
  template <> struct elem<P##2> { typedef S type; static constexpr int n = 2; };                             \
  template <> struct elem<P##3> { typedef S type; static constexpr int n = 3; };                             \
  template <> struct elem<P##4> { typedef S type; static constexpr int n = 4; };
KSBT_VEC(float, float) KSBT_VEC(int, int) KSBT_VEC(uint, uint)
template <> struct vec<float, 1> { typedef float type; };
template <> struct vec<int, 1> { typedef int type; };
template <> struct vec<uint, 1> { typedef uint type; };

template <class V> __device__ inline typename elem<V>::type get(const V& v, int i) {
  if constexpr (elem<V>::n == 1) {
    return v;
  } else if constexpr (elem<V>::n == 2) {
    return i == 0 ? v.x : v.y;
  } else if constexpr (elem<V>::n == 3) {
    return i == 0 ? v.x : (i == 1 ? v.y : v.z);
  } else {
    return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
  }
}
// `v.xy` (read only) becomes `ksbt::swizzle<0, 1>(v)`.
template <int A, int B, class V> __device__ inline typename vec<typename elem<V>::type, 2>::type swizzle(V v) {
  return {get(v, A), get(v, B)};
}
template <int A, int B, int C, class V>
__device__ inline typename vec<typename elem<V>::type, 3>::type swizzle(V v) {
  return {get(v, A), get(v, B), get(v, C)};
}
template <int A, int B, int C, int D, class V>
__device__ inline typename vec<typename elem<V>::type, 4>::type swizzle(V v) {
  return {get(v, A), get(v, B), get(v, C), get(v, D)};
}

#define KSBT_CTORS(S, P)                                                                                     \
  __device__ inline P##2 make_##P##2(S a) { return {a, a}; }                                                 \
  __device__ inline P##2 make_##P##2(S a, S b) { return {a, b}; }                                            \
  __device__ inline P##3 make_##P##3(S a) { return {a, a, a}; }                                              \
  __device__ inline P##3 make_##P##3(S a, S b, S c) { return {a, b, c}; }                                    \
  __device__ inline P##3 make_##P##3(P##2 a, S c) { return {a.x, a.y, c}; }                                  \
  __device__ inline P##3 make_##P##3(S a, P##2 b) { return {a, b.x, b.y}; }                                  \
  __device__ inline P##4 make_##P##4(S a) { return {a, a, a, a}; }                                           \
  __device__ inline P##4 make_##P##4(S a, S b, S c, S d) { return {a, b, c, d}; }                            \
  __device__ inline P##4 make_##P##4(P##2 a, P##2 b) { return {a.x, a.y, b.x, b.y}; }                       \
  __device__ inline P##4 make_##P##4(P##2 a, S c, S d) { return {a.x, a.y, c, d}; }                          \
  __device__ inline P##4 make_##P##4(P##3 a, S d) { return {a.x, a.y, a.z, d}; }                             \
  __device__ inline P##4 make_##P##4(S a, P##3 b) { return {a, b.x, b.y, b.z}; }
KSBT_CTORS(float, float) KSBT_CTORS(int, int) KSBT_CTORS(uint, uint)
// ulong2: simdgroup_load / store origins (the wider 64-bit vectors are deprecated in CUDA 13)
__device__ inline ulong2 make_ulong2(ulong a) { return {a, a}; }
__device__ inline ulong2 make_ulong2(ulong a, ulong b) { return {a, b}; }
// conversions between vector types of the same length: float4(int4), uint2(float2), ...
#define KSBT_CONV(P, S, Q)                                                                                   \
  __device__ inline P##2 make_##P##2(Q##2 v) { return {S(v.x), S(v.y)}; }                                    \
  __device__ inline P##3 make_##P##3(Q##3 v) { return {S(v.x), S(v.y), S(v.z)}; }                            \
  __device__ inline P##4 make_##P##4(Q##4 v) { return {S(v.x), S(v.y), S(v.z), S(v.w)}; }
KSBT_CONV(float, float, float) KSBT_CONV(float, float, int) KSBT_CONV(float, float, uint)
KSBT_CONV(int, int, float) KSBT_CONV(int, int, int) KSBT_CONV(int, int, uint)
KSBT_CONV(uint, uint, float) KSBT_CONV(uint, uint, int) KSBT_CONV(uint, uint, uint)

// ---- math: `metal::f`, `fast::f`, `precise::f` and unqualified Metal-only names become `ksbt::f` ----------
// float versions; __half / __nv_bfloat16 arguments compute in float and convert back; vectors element-wise.
#define KSBT_UN(name, fexpr)                                                                                 \
  __device__ inline float name(float x) { return fexpr; }                                                    \
  __device__ inline __half name(__half x) { return __float2half(name(__half2float(x))); }                    \
  __device__ inline __nv_bfloat16 name(__nv_bfloat16 x) { return __float2bfloat16(name(__bfloat162float(x))); } \
  __device__ inline float2 name(float2 v) { return {name(v.x), name(v.y)}; }                                 \
  __device__ inline float3 name(float3 v) { return {name(v.x), name(v.y), name(v.z)}; }                      \
  __device__ inline float4 name(float4 v) { return {name(v.x), name(v.y), name(v.z), name(v.w)}; }
KSBT_UN(exp, expf(x)) KSBT_UN(exp2, exp2f(x)) KSBT_UN(exp10, exp10f(x)) KSBT_UN(log, logf(x))
KSBT_UN(log2, log2f(x)) KSBT_UN(log10, log10f(x)) KSBT_UN(sqrt, sqrtf(x)) KSBT_UN(rsqrt, rsqrtf(x))
KSBT_UN(sin, sinf(x)) KSBT_UN(cos, cosf(x)) KSBT_UN(tan, tanf(x)) KSBT_UN(asin, asinf(x))
KSBT_UN(acos, acosf(x)) KSBT_UN(atan, atanf(x)) KSBT_UN(sinh, sinhf(x)) KSBT_UN(cosh, coshf(x))
KSBT_UN(tanh, tanhf(x)) KSBT_UN(fabs, fabsf(x)) KSBT_UN(floor, floorf(x)) KSBT_UN(ceil, ceilf(x))
KSBT_UN(round, roundf(x)) KSBT_UN(rint, rintf(x)) KSBT_UN(trunc, truncf(x)) KSBT_UN(erf, erff(x))
KSBT_UN(fract, fminf(x - floorf(x), 0x1.fffffep-1f)) KSBT_UN(saturate, fminf(fmaxf(x, 0.0f), 1.0f))
KSBT_UN(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f))
KSBT_UN(log1p, log1pf(x)) KSBT_UN(expm1, expm1f(x)) KSBT_UN(asinh, asinhf(x)) KSBT_UN(acosh, acoshf(x))
KSBT_UN(atanh, atanhf(x)) KSBT_UN(cbrt, cbrtf(x))

__device__ inline float abs(float x) { return fabsf(x); }
__device__ inline int abs(int x) { return x < 0 ? -x : x; }
__device__ inline __half abs(__half x) { return __habs(x); }
__device__ inline float2 abs(float2 v) { return {fabsf(v.x), fabsf(v.y)}; }
__device__ inline float4 abs(float4 v) { return {fabsf(v.x), fabsf(v.y), fabsf(v.z), fabsf(v.w)}; }

#define KSBT_BIN(name, fexpr)                                                                                \
  __device__ inline float name(float x, float y) { return fexpr; }                                           \
  __device__ inline __half name(__half x, __half y) { return __float2half(name(__half2float(x), __half2float(y))); } \
  __device__ inline __nv_bfloat16 name(__nv_bfloat16 x, __nv_bfloat16 y) {                                   \
    return __float2bfloat16(name(__bfloat162float(x), __bfloat162float(y)));                                 \
  }                                                                                                          \
  __device__ inline float2 name(float2 a, float2 b) { return {name(a.x, b.x), name(a.y, b.y)}; }             \
  __device__ inline float4 name(float4 a, float4 b) {                                                        \
    return {name(a.x, b.x), name(a.y, b.y), name(a.z, b.z), name(a.w, b.w)};                                 \
  }
KSBT_BIN(pow, powf(x, y)) KSBT_BIN(powr, powf(x, y)) KSBT_BIN(atan2, atan2f(x, y)) KSBT_BIN(fmod, fmodf(x, y))
KSBT_BIN(fmin, fminf(x, y)) KSBT_BIN(fmax, fmaxf(x, y)) KSBT_BIN(copysign, copysignf(x, y))
KSBT_BIN(step, y < x ? 0.0f : 1.0f) KSBT_BIN(hypot, hypotf(x, y))

// min / max: Metal's float versions ignore a NaN operand (fmin / fmax); integers compare.
__device__ inline float min(float a, float b) { return fminf(a, b); }
__device__ inline float max(float a, float b) { return fmaxf(a, b); }
__device__ inline __half min(__half a, __half b) { return __float2half(fminf(__half2float(a), __half2float(b))); }
__device__ inline __half max(__half a, __half b) { return __float2half(fmaxf(__half2float(a), __half2float(b))); }
__device__ inline __nv_bfloat16 min(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16(fminf(__bfloat162float(a), __bfloat162float(b)));
}
__device__ inline __nv_bfloat16 max(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16(fmaxf(__bfloat162float(a), __bfloat162float(b)));
}
template <class A, class B> __device__ inline auto min(A a, B b) -> decltype(a + b) { return b < a ? b : a; }
template <class A, class B> __device__ inline auto max(A a, B b) -> decltype(a + b) { return a < b ? b : a; }
__device__ inline float2 min(float2 a, float2 b) { return {fminf(a.x, b.x), fminf(a.y, b.y)}; }
__device__ inline float2 max(float2 a, float2 b) { return {fmaxf(a.x, b.x), fmaxf(a.y, b.y)}; }
__device__ inline float4 min(float4 a, float4 b) {
  return {fminf(a.x, b.x), fminf(a.y, b.y), fminf(a.z, b.z), fminf(a.w, b.w)};
}
__device__ inline float4 max(float4 a, float4 b) {
  return {fmaxf(a.x, b.x), fmaxf(a.y, b.y), fmaxf(a.z, b.z), fmaxf(a.w, b.w)};
}
template <class T, class L, class H> __device__ inline T clamp(T x, L lo, H hi) { return min(max(x, T(lo)), T(hi)); }
__device__ inline float fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ inline __half fma(__half a, __half b, __half c) { return __hfma(a, b, c); }
__device__ inline float2 fma(float2 a, float2 b, float2 c) { return {fmaf(a.x, b.x, c.x), fmaf(a.y, b.y, c.y)}; }
__device__ inline float4 fma(float4 a, float4 b, float4 c) {
  return {fmaf(a.x, b.x, c.x), fmaf(a.y, b.y, c.y), fmaf(a.z, b.z, c.z), fmaf(a.w, b.w, c.w)};
}
__device__ inline float mix(float x, float y, float a) { return x + (y - x) * a; }
__device__ inline float2 mix(float2 x, float2 y, float a) { return x + (y - x) * a; }
__device__ inline float4 mix(float4 x, float4 y, float a) { return x + (y - x) * a; }
__device__ inline float smoothstep(float e0, float e1, float x) {
  float t = fminf(fmaxf((x - e0) / (e1 - e0), 0.0f), 1.0f);
  return t * t * (3.0f - 2.0f * t);
}
// select(a, b, c) is c ? b : a.
template <class T> __device__ inline T select(T a, T b, bool c) { return c ? b : a; }
__device__ inline float dot(float2 a, float2 b) { return a.x * b.x + a.y * b.y; }
__device__ inline float dot(float3 a, float3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
__device__ inline float dot(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
template <class V> __device__ inline float length(V v) { return sqrtf(dot(v, v)); }
template <class V> __device__ inline V normalize(V v) { return v * rsqrtf(dot(v, v)); }
__device__ inline bool isnan(float x) { return x != x; }
__device__ inline bool isinf(float x) { return fabsf(x) == __int_as_float(0x7f800000); }
__device__ inline bool isfinite(float x) { return fabsf(x) <= 3.402823466e+38f; }
__device__ inline bool signbit(float x) { return __float_as_int(x) < 0; }
__device__ inline uint popcount(uint x) { return __popc(x); }
__device__ inline uint clz(uint x) { return __clz(x); }
__device__ inline uint ctz(uint x) { return x == 0 ? 32u : __ffs(x) - 1; }
__device__ inline uint mulhi(uint a, uint b) { return __umulhi(a, b); }
__device__ inline int mulhi(int a, int b) { return __mulhi(a, b); }
template <class T, class U> __device__ inline T as_type(U u) {
  static_assert(sizeof(T) == sizeof(U), "as_type: sizes differ");
  return *reinterpret_cast<const T*>(&u);
}
__device__ inline float divide(float a, float b) { return a / b; }
template <class T> __device__ inline T max3(T a, T b, T c) { return max(max(a, b), c); }
template <class T> __device__ inline T min3(T a, T b, T c) { return min(min(a, b), c); }
template <class A, class B> __device__ inline auto ceildiv(A a, B b) -> decltype(a + b) { return (a + b - 1) / b; }

// metal::numeric_limits<T> (functions) and MLX's Metal Limits<T> (values: max, min, finite_max, finite_min).
// For __half and __nv_bfloat16 the values are floats, converted where they are used.
template <class T> struct numeric_limits;
template <> struct numeric_limits<float> {
  __device__ static constexpr float max() { return 3.402823466e+38f; }
  __device__ static constexpr float min() { return 1.175494351e-38f; }
  __device__ static constexpr float lowest() { return -3.402823466e+38f; }
  __device__ static constexpr float epsilon() { return 1.192092896e-07f; }
  __device__ static float infinity() { return __int_as_float(0x7f800000); }
  __device__ static float quiet_NaN() { return __int_as_float(0x7fffffff); }
};
template <> struct numeric_limits<__half> {
  __device__ static constexpr float max() { return 65504.0f; }
  __device__ static constexpr float min() { return 6.103515625e-05f; }
  __device__ static constexpr float lowest() { return -65504.0f; }
  __device__ static constexpr float epsilon() { return 0.0009765625f; }
  __device__ static float infinity() { return __int_as_float(0x7f800000); }
  __device__ static float quiet_NaN() { return __int_as_float(0x7fffffff); }
};
template <> struct numeric_limits<__nv_bfloat16> {
  __device__ static constexpr float max() { return 3.38953139e+38f; }
  __device__ static constexpr float min() { return 1.175494351e-38f; }
  __device__ static constexpr float lowest() { return -3.38953139e+38f; }
  __device__ static constexpr float epsilon() { return 0.0078125f; }
  __device__ static float infinity() { return __int_as_float(0x7f800000); }
  __device__ static float quiet_NaN() { return __int_as_float(0x7fffffff); }
};
template <> struct numeric_limits<int> {
  __device__ static constexpr int max() { return 2147483647; }
  __device__ static constexpr int min() { return -2147483647 - 1; }
  __device__ static constexpr int lowest() { return -2147483647 - 1; }
};
template <> struct numeric_limits<uint> {
  __device__ static constexpr uint max() { return 4294967295u; }
  __device__ static constexpr uint min() { return 0u; }
  __device__ static constexpr uint lowest() { return 0u; }
};
// A constant-expression infinity: NVRTC has no __builtin_huge_valf but folds 1/0; host compilers the reverse.
#if defined(__CUDACC_RTC__)
#define KSBT_INF (1.0f / 0.0f)
#else
#define KSBT_INF __builtin_huge_valf()
#endif
template <class T> struct Limits;
template <> struct Limits<float> {
  static constexpr float max = KSBT_INF, min = -KSBT_INF;
  static constexpr float finite_max = 3.402823466e+38f, finite_min = -3.402823466e+38f;
};
template <> struct Limits<__half> {
  static constexpr float max = KSBT_INF, min = -KSBT_INF;
  static constexpr float finite_max = 65504.0f, finite_min = -65504.0f;
};
template <> struct Limits<__nv_bfloat16> {
  static constexpr float max = KSBT_INF, min = -KSBT_INF;
  static constexpr float finite_max = 3.38953139e+38f, finite_min = -3.38953139e+38f;
};
template <> struct Limits<int> {
  static constexpr int max = 2147483647, min = -2147483647 - 1, finite_max = 2147483647, finite_min = -2147483647 - 1;
};
template <> struct Limits<uint> {
  static constexpr uint max = 4294967295u, min = 0u, finite_max = 4294967295u, finite_min = 0u;
};

// fast:: and precise:: spellings map to the same functions (CUDA's accurate versions).
namespace fast { using namespace ::ksbt; }
namespace precise { using namespace ::ksbt; }

// ---- barriers ---------------------------------------------------------------------------------------
namespace mem_flags {
constexpr int mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8;
}
// threadgroup_barrier waits for the block; with mem_device it also orders global memory (as __syncthreads does).
__device__ inline void threadgroup_barrier(int = 0) { __syncthreads(); }

// ---- simdgroups = warps ---------------------------------------------------------------------------------
// Metal simdgroups are 32 consecutive threads of the linear thread index, like CUDA warps. The lanes that
// take part are those of the warp that exist in the CUDA block (a block whose size is not a multiple of 32
// has a partial last warp, as Metal has a partial last simdgroup).
__device__ inline uint linear_tid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ inline uint lane_id() { return linear_tid() & 31u; }
__device__ inline uint lanes() {
  const uint n = blockDim.x * blockDim.y * blockDim.z;
  const uint base = linear_tid() & ~31u;
  const uint cnt = n - base >= 32u ? 32u : n - base;
  return cnt == 32u ? 0xffffffffu : ((1u << cnt) - 1u);
}
__device__ inline void simdgroup_barrier(int = 0) { __syncwarp(lanes()); }

// One shuffle for any trivially copyable type: every lane reads `v` of lane `src`.
template <class T> __device__ inline T shfl(T v, uint src) {
  const uint m = lanes();
  if constexpr (sizeof(T) % 4 == 0) {
    int* w = reinterpret_cast<int*>(&v);  // every such type here is 4-byte aligned
#pragma unroll
    for (int i = 0; i < int(sizeof(T) / 4); ++i) w[i] = __shfl_sync(m, w[i], int(src));
  } else {
    static_assert(sizeof(T) == 2, "shuffle of a type of 1 or 3 bytes");
    unsigned short* h = reinterpret_cast<unsigned short*>(&v);
    *h = (unsigned short)__shfl_sync(m, int(*h), int(src));
  }
  return v;
}
template <class T> __device__ inline T simd_shuffle(T v, uint src) { return shfl(v, src & 31u); }
template <class T> __device__ inline T simd_broadcast(T v, uint src) { return shfl(v, src & 31u); }
template <class T> __device__ inline T simd_shuffle_xor(T v, uint mask) { return shfl(v, (lane_id() ^ mask) & 31u); }
// Lanes with no source lane keep their own value.
template <class T> __device__ inline T simd_shuffle_up(T v, uint d) {
  const uint l = lane_id();
  return shfl(v, l >= d ? l - d : l);
}
template <class T> __device__ inline T simd_shuffle_down(T v, uint d) {
  const uint l = lane_id();
  return shfl(v, l + d < 32u ? l + d : l);
}
template <class T> __device__ inline T simd_shuffle_rotate_up(T v, uint d) { return shfl(v, (lane_id() - d) & 31u); }
template <class T> __device__ inline T simd_shuffle_rotate_down(T v, uint d) { return shfl(v, (lane_id() + d) & 31u); }
template <class T> __device__ inline T simd_shuffle_and_fill_up(T v, T fill, uint d) {
  const uint l = lane_id();
  const T a = shfl(v, l >= d ? l - d : l);
  const T b = shfl(fill, (l + 32u - d) & 31u);
  return l >= d ? a : b;
}
template <class T> __device__ inline T simd_shuffle_and_fill_down(T v, T fill, uint d) {
  const uint l = lane_id();
  const T a = shfl(v, l + d < 32u ? l + d : l);
  const T b = shfl(fill, (l + d) & 31u);
  return l + d < 32u ? a : b;
}
template <class T> __device__ inline T simd_broadcast_first(T v) { return shfl(v, uint(__ffs(lanes()) - 1)); }
__device__ inline bool simd_is_first() { return lane_id() == uint(__ffs(__activemask()) - 1); }

// Reductions: a butterfly over the whole warp; a partial warp sums its lanes one by one (correct, slow).
template <class T, class F> __device__ inline T reduce(T v, F op) {
  const uint m = lanes();
  if (m == 0xffffffffu) {
#pragma unroll
    for (uint o = 16; o > 0; o >>= 1) v = op(v, shfl(v, lane_id() ^ o));
    return v;
  }
  T acc = shfl(v, 0u);
  for (uint s = 1; s < 32u; ++s) {
    if ((m >> s) & 1u) acc = op(acc, shfl(v, s));
  }
  return acc;
}
struct add_op { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
struct mul_op { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };
struct max_op { template <class T> __device__ T operator()(T a, T b) const { return ::ksbt::max(a, b); } };
struct min_op { template <class T> __device__ T operator()(T a, T b) const { return ::ksbt::min(a, b); } };
struct and_op { template <class T> __device__ T operator()(T a, T b) const { return a & b; } };
struct or_op { template <class T> __device__ T operator()(T a, T b) const { return a | b; } };
struct xor_op { template <class T> __device__ T operator()(T a, T b) const { return a ^ b; } };
template <class T> __device__ inline T simd_sum(T v) { return reduce(v, add_op()); }
template <class T> __device__ inline T simd_product(T v) { return reduce(v, mul_op()); }
template <class T> __device__ inline T simd_max(T v) { return reduce(v, max_op()); }
template <class T> __device__ inline T simd_min(T v) { return reduce(v, min_op()); }
template <class T> __device__ inline T simd_and(T v) { return reduce(v, and_op()); }
template <class T> __device__ inline T simd_or(T v) { return reduce(v, or_op()); }
template <class T> __device__ inline T simd_xor(T v) { return reduce(v, xor_op()); }
// Prefix scans (Hillis-Steele over shuffles).
template <class T, class F> __device__ inline T inclusive_scan(T v, F op) {
  const uint l = lane_id();
#pragma unroll
  for (uint d = 1; d < 32u; d <<= 1) {
    const T o = shfl(v, l >= d ? l - d : l);
    if (l >= d) v = op(o, v);
  }
  return v;
}
template <class T> __device__ inline T simd_prefix_inclusive_sum(T v) { return inclusive_scan(v, add_op()); }
template <class T> __device__ inline T simd_prefix_inclusive_product(T v) { return inclusive_scan(v, mul_op()); }
template <class T> __device__ inline T simd_prefix_exclusive_sum(T v) {
  const T inc = inclusive_scan(v, add_op());
  const uint l = lane_id();
  const T prev = shfl(inc, l > 0 ? l - 1 : 0u);
  return l > 0 ? prev : T(0);
}
template <class T> __device__ inline T simd_prefix_exclusive_product(T v) {
  const T inc = inclusive_scan(v, mul_op());
  const uint l = lane_id();
  const T prev = shfl(inc, l > 0 ? l - 1 : 0u);
  return l > 0 ? prev : T(1);
}
// Quadgroups: 4 consecutive lanes.
template <class T> __device__ inline T quad_shuffle(T v, uint q) { return shfl(v, (lane_id() & ~3u) | (q & 3u)); }
template <class T> __device__ inline T quad_broadcast(T v, uint q) { return quad_shuffle(v, q); }
template <class T> __device__ inline T quad_shuffle_xor(T v, uint m) { return shfl(v, lane_id() ^ (m & 3u)); }
template <class T> __device__ inline T quad_shuffle_up(T v, uint d) {
  const uint l = lane_id();
  return shfl(v, (l & 3u) >= d ? l - d : l);
}
template <class T> __device__ inline T quad_shuffle_down(T v, uint d) {
  const uint l = lane_id();
  return shfl(v, (l & 3u) + d < 4u ? l + d : l);
}
template <class T> __device__ inline T quad_sum(T v) {
  v = v + quad_shuffle_xor(v, 1u);
  return v + quad_shuffle_xor(v, 2u);
}
template <class T> __device__ inline T quad_max(T v) {
  v = max(v, quad_shuffle_xor(v, 1u));
  return max(v, quad_shuffle_xor(v, 2u));
}
template <class T> __device__ inline T quad_min(T v) {
  v = min(v, quad_shuffle_xor(v, 1u));
  return min(v, quad_shuffle_xor(v, 2u));
}

// Votes. simd_ballot's bits as a 64-bit value (Metal's simd_vote converts to vote_t = uint64).
__device__ inline unsigned long long simd_ballot(bool p) { return __ballot_sync(lanes(), p); }
__device__ inline bool simd_any(bool p) { return __any_sync(lanes(), p); }
__device__ inline bool simd_all(bool p) { return __all_sync(lanes(), p); }

// ---- atomics (outputs are plain pointers on MLX-CUDA; `atomic<T>` becomes T) ------------------------------
enum memory_order { memory_order_relaxed = 0 };
template <class T> struct same { typedef T type; };  // keeps the value argument out of template deduction
template <class T> __device__ inline T atomic_fetch_add_explicit(T* p, typename same<T>::type v, memory_order = memory_order_relaxed) {
  return atomicAdd(p, v);
}
template <class T> __device__ inline T atomic_fetch_sub_explicit(T* p, typename same<T>::type v, memory_order = memory_order_relaxed) {
  return atomicAdd(p, T(0) - v);
}
__device__ inline int atomic_fetch_max_explicit(int* p, int v, memory_order = memory_order_relaxed) { return atomicMax(p, v); }
__device__ inline uint atomic_fetch_max_explicit(uint* p, uint v, memory_order = memory_order_relaxed) { return atomicMax(p, v); }
__device__ inline int atomic_fetch_min_explicit(int* p, int v, memory_order = memory_order_relaxed) { return atomicMin(p, v); }
__device__ inline uint atomic_fetch_min_explicit(uint* p, uint v, memory_order = memory_order_relaxed) { return atomicMin(p, v); }
// float max / min through a compare-and-swap loop on the bits.
__device__ inline float atomic_fetch_max_explicit(float* p, float v, memory_order = memory_order_relaxed) {
  int* q = reinterpret_cast<int*>(p);
  int old = *q;
  while (__int_as_float(old) < v) {
    const int seen = atomicCAS(q, old, __float_as_int(v));
    if (seen == old) break;
    old = seen;
  }
  return __int_as_float(old);
}
__device__ inline float atomic_fetch_min_explicit(float* p, float v, memory_order = memory_order_relaxed) {
  int* q = reinterpret_cast<int*>(p);
  int old = *q;
  while (__int_as_float(old) > v) {
    const int seen = atomicCAS(q, old, __float_as_int(v));
    if (seen == old) break;
    old = seen;
  }
  return __int_as_float(old);
}
template <class T> __device__ inline T atomic_exchange_explicit(T* p, typename same<T>::type v, memory_order = memory_order_relaxed) {
  return atomicExch(p, v);
}
template <class T> __device__ inline T atomic_load_explicit(T* p, memory_order = memory_order_relaxed) {
  return *(volatile T*)p;
}
template <class T> __device__ inline void atomic_store_explicit(T* p, typename same<T>::type v, memory_order = memory_order_relaxed) {
  *(volatile T*)p = v;
}
template <class T>
__device__ inline bool atomic_compare_exchange_weak_explicit(T* p, T* expected, T desired, memory_order = memory_order_relaxed,
                                                             memory_order = memory_order_relaxed) {
  const T seen = atomicCAS(p, *expected, desired);
  const bool ok = seen == *expected;
  *expected = seen;
  return ok;
}

// ---- simdgroup_matrix<T, 8, 8>: 64 elements held 2 per lane in Apple's documented-by-use layout ----------
// Lane l holds row (l / 4 & 4) + (l / 2 % 4), columns (l / 4 & 2) * 2 + (l % 2) * 2 and the next one, so
// code that reads thread_elements() sees the same elements as on an Apple GPU. Multiplication gathers rows
// and columns with shuffles: correct, not fast.
__device__ inline uint sg_row(uint l) { return ((l / 4u) & 4u) + ((l / 2u) % 4u); }
__device__ inline uint sg_col(uint l) { return ((l / 4u) & 2u) * 2u + (l % 2u) * 2u; }
// the lane holding element (r, c) and which of its two elements it is
__device__ inline uint sg_lane_of(uint r, uint c) {
  // invert sg_row / sg_col: r = 4*b2 + (l/2 % 4), c = 4*b1 + 2*b0 (+1), with l = 16*b2 + 8*b1 + 2*(r%4) + b0
  return ((r / 4u) << 4) | ((c / 4u) << 3) | ((r % 4u) << 1) | ((c / 2u) % 2u);
}
// A lane's two elements, readable as [0] / [1] and .x / .y like Metal's vec<T, 2>.
template <class T> struct pair2 {
  T x, y;
  __device__ T& operator[](int i) { return i ? y : x; }
  __device__ const T& operator[](int i) const { return i ? y : x; }
};
template <class T, int R = 8, int C = 8> struct simdgroup_matrix {
  static_assert(R == 8 && C == 8, "only 8x8 simdgroup matrices exist before M5");
  pair2<T> e;
  __device__ pair2<T>& thread_elements() { return e; }
  __device__ const pair2<T>& thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<__half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<__nv_bfloat16, 8, 8> simdgroup_bfloat8x8;
template <class T, int R, int C> __device__ inline simdgroup_matrix<T, R, C> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, R, C> m;
  m.e[0] = v;
  m.e[1] = v;
  return m;
}
// simdgroup_load(m, src, elements_per_row, origin (column, row), transpose)
template <class T, class U>
__device__ inline void simdgroup_load(simdgroup_matrix<T, 8, 8>& m, const U* src, ulong epr = 8, ulong2 origin = {0, 0},
                                      bool transpose = false) {
  const uint l = lane_id(), r = sg_row(l), c = sg_col(l);
#pragma unroll
  for (uint i = 0; i < 2; ++i) {
    const ulong rr = transpose ? c + i : r, cc = transpose ? r : c + i;
    m.e[i] = T(src[(rr + origin.y) * epr + cc + origin.x]);
  }
}
template <class T, class U>
__device__ inline void simdgroup_store(const simdgroup_matrix<T, 8, 8>& m, U* dst, ulong epr = 8, ulong2 origin = {0, 0},
                                       bool transpose = false) {
  const uint l = lane_id(), r = sg_row(l), c = sg_col(l);
#pragma unroll
  for (uint i = 0; i < 2; ++i) {
    const ulong rr = transpose ? c + i : r, cc = transpose ? r : c + i;
    dst[(rr + origin.y) * epr + cc + origin.x] = U(m.e[i]);
  }
}
template <class T> __device__ inline T sg_at(const simdgroup_matrix<T, 8, 8>& m, uint r, uint c) {
  const uint src = sg_lane_of(r, c);
  const T a = shfl(m.e[0], src), b = shfl(m.e[1], src);
  return (c % 2u) ? b : a;
}
// d = a * b + c, accumulated in float
template <class TD, class TA, class TB, class TC>
__device__ inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                                     const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c) {
  const uint l = lane_id(), r = sg_row(l), c0 = sg_col(l);
  float acc[2] = {float(c.e[0]), float(c.e[1])};
  for (uint k = 0; k < 8; ++k) {
    const float av = float(sg_at(a, r, k));
    // every lane takes part in both shuffles, whatever its own row and column
    const float b0 = float(sg_at(b, k, c0)), b1 = float(sg_at(b, k, c0 + 1));
    acc[0] = fmaf(av, b0, acc[0]);
    acc[1] = fmaf(av, b1, acc[1]);
  }
  d.e[0] = TD(acc[0]);
  d.e[1] = TD(acc[1]);
}
template <class TD, class TA, class TB>
__device__ inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b) {
  simdgroup_matrix<TD, 8, 8> z = make_filled_simdgroup_matrix<TD, 8, 8>(TD(0));
  simdgroup_multiply_accumulate(d, a, b, z);
}

}  // namespace ksbt
