// ksearch's Metal shim: enough of the Metal Shading Language, as C++17 declarations, for Clang (or g++)
// to check a kernel's syntax and types on a machine without Metal (`ksearch check`).
//
// Nothing here runs: functions are declared, not defined (`-fsyntax-only`). What matters is that a
// misuse fails here the way it fails in Apple's compiler: vector types do not convert implicitly into one
// another, `uint3` attributes need `.x`, `simdgroup_matrix` is 8x8 of float/half/bfloat, atomics exist
// only for int/uint/float/bool, and there is no `std::` or C library. Address-space qualifiers expand to
// nothing but `constant`, which is read-only and so reads as `const` (C++ has no address spaces);
// `ksearch check` tracks them with a rule instead. crates/ksearch-kernels/src/check/compile.rs rewrites the few spots where
// that would change what the Metal means (shim_dialect).
#pragma once

#define device
// The constant address space is read-only: a pointer into it is a pointer to const.
#define constant const
#define threadgroup
#define threadgroup_imageblock
#define thread
#define ray_data
#define object_data
#define kernel
#define METAL_FUNC inline __attribute__((always_inline))
// Metal 3.2's coherence qualifier on a pointer (`volatile coherent(system) device uint* p`).
#define coherent(scope)
// What Metal's compiler predefines: the language version (3.1, the first with bfloat; MLX needs macOS 14)
// and the math modes its builtins take.
#define __METAL_VERSION__ 310
#define __METAL__ 1
#define __HAVE_BFLOAT__ 1
#define __METAL_FAST_MATH__ 1
#define __METAL_PRECISE_MATH__ 0
#define __METAL_MAYBE_FAST_MATH__ 1
#define vertex
#define fragment

#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define MAXFLOAT 3.402823466e+38f
#define HUGE_VALF __builtin_huge_valf()
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define FLT_MAX 3.402823466e+38f
#define FLT_MIN 1.175494351e-38f
#define FLT_EPSILON 1.192092896e-07f
#define HALF_MAX ((half)65504.0f)
#define MAXHALF ((half)65504.0f)
#define HUGE_VALH ((half)__builtin_huge_valf())
#define HALF_MIN ((half)6.103515625e-05f)
#define HALF_EPSILON ((half)0.0009765625f)
#define CHAR_BIT 8
#define SCHAR_MAX 127
#define SCHAR_MIN (-128)
#define UCHAR_MAX 255
#define SHRT_MAX 32767
#define SHRT_MIN (-32768)
#define USHRT_MAX 65535
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295u
#define LONG_MAX 9223372036854775807l
#define LONG_MIN (-9223372036854775807l - 1)
#define ULONG_MAX 18446744073709551615ul

// Scalars. `half` is a real 16-bit float type (_Float16), so mixed arithmetic and `?:` type-check as in
// Metal. `bfloat` is a class (defined below, after the traits it needs), so that a conversion into it ranks
// below a conversion between C++'s own floating types: Metal converts `half` to `float` rather than to
// `bfloat` when both overloads exist.
typedef _Float16 half;
struct bfloat;
// Metal's half literals: 1.0h, 2h.
constexpr half operator""h(long double v) { return (half)v; }
constexpr half operator""h(unsigned long long v) { return (half)v; }
constexpr half operator""H(long double v) { return (half)v; }
constexpr half operator""H(unsigned long long v) { return (half)v; }
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef unsigned long size_t;
typedef long ptrdiff_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;

// What the compiler builds a braced list into (`uint4 v = {a, b, c};`); no other part of C++'s library.
namespace std {
template <typename E> class initializer_list {
  const E* _M_array;
  size_t _M_len;
  constexpr initializer_list(const E* a, size_t n) : _M_array(a), _M_len(n) {}

 public:
  constexpr initializer_list() : _M_array(0), _M_len(0) {}
  constexpr size_t size() const { return _M_len; }
  constexpr const E* begin() const { return _M_array; }
  constexpr const E* end() const { return _M_array + _M_len; }
};
}  // namespace std

namespace metal {

template <bool B, typename T = void> struct enable_if {};
template <typename T> struct enable_if<true, T> { typedef T type; };
template <bool B, typename T = void> using enable_if_t = typename enable_if<B, T>::type;
template <typename A, typename B> struct is_same { static constexpr bool value = false; };
template <typename A> struct is_same<A, A> { static constexpr bool value = true; };
template <typename A, typename B> constexpr bool is_same_v = is_same<A, B>::value;
template <typename T, T v> struct integral_constant {
  static constexpr T value = v;
  typedef T value_type;
  constexpr operator T() const { return v; }
  constexpr T operator()() const { return v; }
};
template <bool B> using bool_constant = integral_constant<bool, B>;
typedef bool_constant<true> true_type;
typedef bool_constant<false> false_type;
template <typename T> T&& ks_declval();
// Whether a From converts implicitly to a To (the compiler's own test: a call that passes one as the other).
template <typename To> void ks_take(To);
template <typename From, typename To, typename = void> struct is_convertible : false_type {};
template <typename From, typename To>
struct is_convertible<From, To, decltype(ks_take<To>(ks_declval<From>()))> : true_type {};
template <typename From, typename To> constexpr bool is_convertible_v = is_convertible<From, To>::value;
template <bool B, typename T, typename F> struct conditional { typedef T type; };
template <typename T, typename F> struct conditional<false, T, F> { typedef F type; };
template <bool B, typename T, typename F> using conditional_t = typename conditional<B, T, F>::type;
template <typename T> struct remove_cv { typedef T type; };
template <typename T> struct remove_cv<const T> { typedef T type; };
template <typename T> struct remove_cv<volatile T> { typedef T type; };
template <typename T> struct remove_cv<const volatile T> { typedef T type; };
template <typename T> using remove_cv_t = typename remove_cv<T>::type;
// Address spaces are erased in the shim, so removing one leaves the type as it is.
template <typename T> struct remove_addrspace { typedef T type; };
template <typename T> using remove_addrspace_t = typename remove_addrspace<T>::type;
template <typename T> struct remove_reference { typedef T type; };
template <typename T> struct remove_reference<T&> { typedef T type; };
template <typename T> using remove_reference_t = typename remove_reference<T>::type;
template <typename T> using decay_t = remove_cv_t<remove_reference_t<T>>;

template <typename T> struct ks_scalar { static constexpr bool value = false; };
#define KS_SCALAR(T) \
  template <> struct ks_scalar<T> { static constexpr bool value = true; };
KS_SCALAR(bool)
KS_SCALAR(char)
KS_SCALAR(signed char)
KS_SCALAR(unsigned char)
KS_SCALAR(short)
KS_SCALAR(unsigned short)
KS_SCALAR(int)
KS_SCALAR(unsigned int)
KS_SCALAR(long)
KS_SCALAR(unsigned long)
KS_SCALAR(long long)
KS_SCALAR(unsigned long long)
KS_SCALAR(half)
KS_SCALAR(bfloat)
KS_SCALAR(float)
KS_SCALAR(double)
#undef KS_SCALAR
template <typename T> struct is_scalar { static constexpr bool value = ks_scalar<remove_cv_t<T>>::value; };
template <typename T> constexpr bool is_scalar_v = is_scalar<T>::value;
template <typename T> struct is_floating_point {
  static constexpr bool value = is_same_v<remove_cv_t<T>, float> || is_same_v<remove_cv_t<T>, half> ||
                                is_same_v<remove_cv_t<T>, bfloat>;
};
template <typename T> constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <typename T> struct is_integral {
  static constexpr bool value = is_scalar_v<T> && !is_floating_point_v<T> && !is_same_v<remove_cv_t<T>, double>;
};
template <typename T> constexpr bool is_integral_v = is_integral<T>::value;
template <typename T> struct is_signed { static constexpr bool value = T(-1) < T(0); };
template <typename T> constexpr bool is_signed_v = is_signed<T>::value;
template <typename T> struct is_unsigned { static constexpr bool value = !is_signed<T>::value; };
template <typename T> constexpr bool is_unsigned_v = is_unsigned<T>::value;
template <typename T> struct is_arithmetic { static constexpr bool value = is_scalar_v<T>; };
template <typename T> constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
// A scalar type of C++ itself (every scalar but bfloat).
template <typename T> constexpr bool ks_builtin_v = is_scalar_v<T> && !is_same_v<remove_cv_t<T>, bfloat>;

}  // namespace metal

// Metal's 16-bit brain float: 2 bytes (its bits are a float's upper half), converting implicitly from and to
// every scalar type. Every conversion into it is a user-defined one, so an overload on `float` wins over
// one on `bfloat` for a `half` argument, and a struct converting to both `float` and `bfloat` converts to
// `half` through `float`, as on a Mac. Arithmetic follows Metal's usual conversions: bfloat with bfloat or
// an integer stays bfloat; with float (or half) it is float.
struct bfloat {
  unsigned short ks_bits_;
  bfloat() = default;
  template <typename S, typename = metal::enable_if_t<metal::ks_builtin_v<S>>>
  constexpr bfloat(S v) : ks_bits_((unsigned short)(__builtin_bit_cast(unsigned int, float(v)) >> 16)) {}
  // A struct that converts to a scalar (a mask's `operator bool()`) converts on to bfloat, as it would to
  // a built-in floating type.
  template <typename S, typename = metal::enable_if_t<!metal::is_scalar_v<metal::decay_t<S>> &&
                                                      metal::is_convertible_v<S&&, float>>,
            typename = void>
  constexpr bfloat(S&& v) : bfloat(float(v)) {}
  constexpr operator float() const { return __builtin_bit_cast(float, (unsigned int)ks_bits_ << 16); }
  constexpr bfloat operator-() const { return bfloat(-float(*this)); }
  constexpr bfloat operator+() const { return *this; }
  template <typename S> constexpr bfloat& operator+=(S s) { return *this = bfloat(float(*this) + float(s)); }
  template <typename S> constexpr bfloat& operator-=(S s) { return *this = bfloat(float(*this) - float(s)); }
  template <typename S> constexpr bfloat& operator*=(S s) { return *this = bfloat(float(*this) * float(s)); }
  template <typename S> constexpr bfloat& operator/=(S s) { return *this = bfloat(float(*this) / float(s)); }
  constexpr bfloat& operator++() { return *this += 1; }
  constexpr bfloat& operator--() { return *this -= 1; }
  constexpr bfloat operator++(int) { bfloat o = *this; *this += 1; return o; }
  constexpr bfloat operator--(int) { bfloat o = *this; *this -= 1; return o; }
};
// The type of `a op b` when one side is bfloat and the other bfloat or a C++ scalar.
template <typename A, typename B, typename = void> struct ks_bf_res {};
template <> struct ks_bf_res<bfloat, bfloat> { typedef bfloat type; };
template <typename S> struct ks_bf_res<bfloat, S, metal::enable_if_t<metal::ks_builtin_v<S>>> {
  typedef metal::conditional_t<metal::is_integral_v<S>, bfloat, float> type;
};
template <typename S> struct ks_bf_res<S, bfloat, metal::enable_if_t<metal::ks_builtin_v<S>>> {
  typedef metal::conditional_t<metal::is_integral_v<S>, bfloat, float> type;
};
template <typename A, typename B>
using ks_bf_t = typename ks_bf_res<metal::decay_t<A>, metal::decay_t<B>>::type;
#define KS_BF_OP(op)                                                          \
  template <typename A, typename B> constexpr ks_bf_t<A, B> operator op(A a, B b) { \
    return ks_bf_t<A, B>(float(a) op float(b));                               \
  }
KS_BF_OP(+)
KS_BF_OP(-)
KS_BF_OP(*)
KS_BF_OP(/)
#undef KS_BF_OP
#define KS_BF_CMP(op)                                                               \
  template <typename A, typename B, typename = ks_bf_t<A, B>> constexpr bool operator op(A a, B b) { \
    return float(a) op float(b);                                                     \
  }
KS_BF_CMP(==)
KS_BF_CMP(!=)
KS_BF_CMP(<)
KS_BF_CMP(>)
KS_BF_CMP(<=)
KS_BF_CMP(>=)
#undef KS_BF_CMP

namespace metal {

// Defined (with stand-in values) so that `constexpr T lo = numeric_limits<T>::min();` is a constant.
// Metal's numeric_limits is built on _numeric_limits_impl, which libraries specialize for their own types.
template <typename T> struct _numeric_limits_impl {
  static constexpr bool is_specialized = true;
  static constexpr T min() { return T(0); }
  static constexpr T max() { return T(1); }
  static constexpr T lowest() { return T(0); }
  static constexpr T epsilon() { return T(0); }
  static constexpr T infinity() { return T(1); }
  static constexpr T quiet_NaN() { return T(0); }
  static constexpr T denorm_min() { return T(0); }
  static constexpr int digits = 0;
};
template <typename T> struct numeric_limits : _numeric_limits_impl<T> {};

// ---- vectors -----------------------------------------------------------------------------------------
template <typename T, int N> struct vec;
template <typename T, int N> struct packed_vec;
template <typename T, int M, int... I> struct ks_swz;

// The vector type an operand stands for: a vector, a swizzle or a packed vector.
template <typename X> struct ks_vof { static constexpr bool ok = false; };
template <typename T, int N> struct ks_vof<vec<T, N>> {
  static constexpr bool ok = true;
  typedef vec<T, N> type;
};
template <typename T, int M, int... I> struct ks_vof<ks_swz<T, M, I...>> {
  static constexpr bool ok = true;
  typedef vec<T, int(sizeof...(I))> type;
};
template <typename T, int N> struct ks_vof<packed_vec<T, N>> {
  static constexpr bool ok = true;
  typedef vec<T, N> type;
};
// A swizzle such as `v.xz`: reads as a vector, assigns from one.
template <typename T, int M, int... I> struct ks_swz {
  T ks_storage_[M];
  operator vec<T, int(sizeof...(I))>() const;
  ks_swz& operator=(const vec<T, int(sizeof...(I))>& v);
  template <typename S, typename = enable_if_t<is_scalar_v<S>>> ks_swz& operator=(S s);
  ks_swz& operator+=(const vec<T, int(sizeof...(I))>& v);
  ks_swz& operator-=(const vec<T, int(sizeof...(I))>& v);
  ks_swz& operator*=(const vec<T, int(sizeof...(I))>& v);
  ks_swz& operator/=(const vec<T, int(sizeof...(I))>& v);
  T operator[](int i) const;
};

#define KS_IX_x 0
#define KS_IX_y 1
#define KS_IX_z 2
#define KS_IX_w 3
#define KS_IX_r 0
#define KS_IX_g 1
#define KS_IX_b 2
#define KS_IX_a 3
#define KS_CAT(a, b) a##b
#define KS_IX(c) KS_CAT(KS_IX_, c)
// A swizzle shorter than its vector is a plain vector member (so `auto p = v.xy; p.x` works); the others
// (same length or longer, whose vector type is not complete yet) are proxies.
template <typename T, int M, int... I>
using ks_swz_t = conditional_t<(int(sizeof...(I)) < M), vec<T, int(sizeof...(I))>, ks_swz<T, M, I...>>;
#define KS_SW2(M, a, b) ks_swz_t<T, M, KS_IX(a), KS_IX(b)> a##b;
#define KS_SW3(M, a, b, c) ks_swz_t<T, M, KS_IX(a), KS_IX(b), KS_IX(c)> a##b##c;
#define KS_SW4(M, a, b, c, d) ks_swz_t<T, M, KS_IX(a), KS_IX(b), KS_IX(c), KS_IX(d)> a##b##c##d;
// all two-letter swizzles over 2, 3 or 4 components
#define KS_SW2_2(M, a) KS_SW2(M, a, x) KS_SW2(M, a, y)
#define KS_SW2_3(M, a) KS_SW2_2(M, a) KS_SW2(M, a, z)
#define KS_SW2_4(M, a) KS_SW2_3(M, a) KS_SW2(M, a, w)
#define KS_SW3_2(M, a, b) KS_SW3(M, a, b, x) KS_SW3(M, a, b, y)
#define KS_SW3_3(M, a, b) KS_SW3_2(M, a, b) KS_SW3(M, a, b, z)
#define KS_SW3_4(M, a, b) KS_SW3_3(M, a, b) KS_SW3(M, a, b, w)
#define KS_SW4_4(M, a, b, c) KS_SW4(M, a, b, c, x) KS_SW4(M, a, b, c, y) KS_SW4(M, a, b, c, z) KS_SW4(M, a, b, c, w)
#define KS_ALL2_2 KS_SW2_2(2, x) KS_SW2_2(2, y)
#define KS_ALL2_3 KS_SW2_3(3, x) KS_SW2_3(3, y) KS_SW2_3(3, z)
#define KS_ALL2_4 KS_SW2_4(4, x) KS_SW2_4(4, y) KS_SW2_4(4, z) KS_SW2_4(4, w)
#define KS_ALL3_2A(a) KS_SW3_2(2, a, x) KS_SW3_2(2, a, y)
#define KS_ALL3_2 KS_ALL3_2A(x) KS_ALL3_2A(y)
#define KS_ALL3_3A(a) KS_SW3_3(3, a, x) KS_SW3_3(3, a, y) KS_SW3_3(3, a, z)
#define KS_ALL3_3 KS_ALL3_3A(x) KS_ALL3_3A(y) KS_ALL3_3A(z)
#define KS_ALL3_4A(a) KS_SW3_4(4, a, x) KS_SW3_4(4, a, y) KS_SW3_4(4, a, z) KS_SW3_4(4, a, w)
#define KS_ALL3_4 KS_ALL3_4A(x) KS_ALL3_4A(y) KS_ALL3_4A(z) KS_ALL3_4A(w)
#define KS_ALL4_4B(a, b) KS_SW4_4(4, a, b, x) KS_SW4_4(4, a, b, y) KS_SW4_4(4, a, b, z) KS_SW4_4(4, a, b, w)
#define KS_ALL4_4A(a) KS_ALL4_4B(a, x) KS_ALL4_4B(a, y) KS_ALL4_4B(a, z) KS_ALL4_4B(a, w)
#define KS_ALL4_4 KS_ALL4_4A(x) KS_ALL4_4A(y) KS_ALL4_4A(z) KS_ALL4_4A(w)
#define KS_ALL4_3 KS_SW4(3, x, y, z, x)

// How many elements a scalar (1) or vector type has.
template <typename T> struct vec_elements { static constexpr uint value = 1; };
template <typename T, int N> struct vec_elements<vec<T, N>> { static constexpr uint value = N; };
template <typename T> struct is_vector { static constexpr bool value = false; };
template <typename T, int N> struct is_vector<vec<T, N>> { static constexpr bool value = true; };
template <typename T> constexpr bool is_vector_v = is_vector<T>::value;

// A vector part of a constructor (`float4(v.xy, 0, 1)`): a vector, swizzle or packed vector of exactly that
// element type and width. A scalar does not broadcast into a part: `float4(v.xy, 1.0f)` has 3 components,
// which Metal refuses.
template <typename A, typename T, int K>
using ks_part_t = enable_if_t<is_same_v<typename ks_vof<decay_t<A>>::type, vec<T, K>>>;

// What every vector type shares: element access, constructors and conversions.
#define KS_VEC_COMMON(N)                                                                        \
  typedef T value_type;                                                                         \
  vec() = default;                                                                              \
  static constexpr T ks_at(std::initializer_list<T> l, size_t i) { return i < l.size() ? l.begin()[i] : T(0); } \
  /* a scalar broadcasts to every component (implicitly, as in Metal) */                        \
  vec(T s);                                                                                     \
  /* another element type converts only explicitly: float4(int4(...)) */                        \
  template <typename U, typename = enable_if_t<!is_same_v<U, T>>> explicit vec(const vec<U, N>& o); \
  /* and so does a packed vector of another element type: float4(packed_char4(...)) */         \
  template <typename U, typename = enable_if_t<!is_same_v<U, T>>> explicit vec(const packed_vec<U, N>& o); \
  T& operator[](int i);                                                                         \
  const T& operator[](int i) const;                                                             \
  vec& operator+=(const vec& o);                                                                \
  vec& operator-=(const vec& o);                                                                \
  vec& operator*=(const vec& o);                                                                \
  vec& operator/=(const vec& o);                                                                \
  vec& operator%=(const vec& o);                                                                \
  vec& operator&=(const vec& o);                                                                \
  vec& operator|=(const vec& o);                                                                \
  vec& operator^=(const vec& o);                                                                \
  vec& operator<<=(const vec& o);                                                               \
  vec& operator>>=(const vec& o);                                                               \
  vec& operator++();                                                                            \
  vec operator++(int);                                                                          \
  vec& operator--();                                                                            \
  vec operator--(int);

template <typename T> struct alignas(sizeof(T) * 2) vec<T, 2> {
  union {
    struct { T x, y; };
    struct { T r, g; };
    KS_ALL2_2
    KS_ALL3_2
  };
  KS_VEC_COMMON(2)
  // A braced list of scalars, as in C: `uint4 v = {a, b, c};` leaves the rest zero. Only braces:
  // `uint4(a, b, c)` is refused (the components of a call must total the width).
  constexpr vec(std::initializer_list<T> l) : x(ks_at(l, 0)), y(ks_at(l, 1)) {}
  constexpr vec(T a, T b) : x(a), y(b) {}
};
template <typename T> struct alignas(sizeof(T) * 4) vec<T, 3> {
  union {
    struct { T x, y, z; };
    struct { T r, g, b; };
    KS_ALL2_3
    KS_ALL3_3
  };
  KS_VEC_COMMON(3)
  // A braced list of scalars, as in C: `uint4 v = {a, b, c};` leaves the rest zero. Only braces:
  // `uint4(a, b, c)` is refused (the components of a call must total the width).
  constexpr vec(std::initializer_list<T> l) : x(ks_at(l, 0)), y(ks_at(l, 1)), z(ks_at(l, 2)) {}
  constexpr vec(T a, T b, T c) : x(a), y(b), z(c) {}
  template <typename A, typename = ks_part_t<A, T, 2>> vec(const A& a, T b);
  template <typename B, typename = ks_part_t<B, T, 2>> vec(T a, const B& b);
};
template <typename T> struct alignas(sizeof(T) * 4) vec<T, 4> {
  union {
    struct { T x, y, z, w; };
    struct { T r, g, b, a; };
    KS_ALL2_4
    KS_ALL3_4
    KS_ALL4_4
  };
  KS_VEC_COMMON(4)
  // A braced list of scalars, as in C: `uint4 v = {a, b, c};` leaves the rest zero. Only braces:
  // `uint4(a, b, c)` is refused (the components of a call must total the width).
  constexpr vec(std::initializer_list<T> l) : x(ks_at(l, 0)), y(ks_at(l, 1)), z(ks_at(l, 2)), w(ks_at(l, 3)) {}
  constexpr vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
  template <typename A, typename = ks_part_t<A, T, 2>> vec(const A& a, T b, T c);
  template <typename B, typename = ks_part_t<B, T, 2>> vec(T a, const B& b, T c);
  template <typename C, typename = ks_part_t<C, T, 2>> vec(T a, T b, const C& c);
  template <typename A, typename B, typename = ks_part_t<A, T, 2>, typename = ks_part_t<B, T, 2>>
  vec(const A& a, const B& b);
  template <typename A, typename = ks_part_t<A, T, 3>> vec(const A& a, T b);
  template <typename B, typename = ks_part_t<B, T, 3>> vec(T a, const B& b);
};

// Packed vectors: no swizzles, no padding; they convert to and from the ordinary vector of the same shape.
template <typename T, int N> struct packed_vec {
  T ks_e_[N];
  packed_vec() = default;
  packed_vec(const vec<T, N>& v);
  operator vec<T, N>() const;
  T& operator[](int i);
  const T& operator[](int i) const;
};
template <typename T> struct packed_vec<T, 2> {
  T x, y;
  packed_vec() = default;
  packed_vec(const vec<T, 2>& v);
  template <typename S, typename = enable_if_t<is_same_v<typename ks_vof<S>::type, vec<T, 2>>>>
  packed_vec(const S& v);
  packed_vec(T a, T b);
  operator vec<T, 2>() const;
  T& operator[](int i);
  const T& operator[](int i) const;
};
template <typename T> struct packed_vec<T, 3> {
  T x, y, z;
  packed_vec() = default;
  packed_vec(const vec<T, 3>& v);
  template <typename S, typename = enable_if_t<is_same_v<typename ks_vof<S>::type, vec<T, 3>>>>
  packed_vec(const S& v);
  packed_vec(T a, T b, T c);
  operator vec<T, 3>() const;
  T& operator[](int i);
  const T& operator[](int i) const;
};
template <typename T> struct packed_vec<T, 4> {
  T x, y, z, w;
  packed_vec() = default;
  packed_vec(const vec<T, 4>& v);
  template <typename S, typename = enable_if_t<is_same_v<typename ks_vof<S>::type, vec<T, 4>>>>
  packed_vec(const S& v);
  packed_vec(T a, T b, T c, T d);
  operator vec<T, 4>() const;
  T& operator[](int i);
  const T& operator[](int i) const;
};

// Result of a binary operation: vector op vector of the same type, or vector op scalar (either side).
template <typename A, typename B, typename = void> struct ks_bin {};
template <typename A, typename B>
struct ks_bin<A, B, enable_if_t<ks_vof<A>::ok && ks_vof<B>::ok &&
                                is_same_v<typename ks_vof<A>::type, typename ks_vof<B>::type>>> {
  typedef typename ks_vof<A>::type type;
};
template <typename A, typename B>
struct ks_bin<A, B, enable_if_t<ks_vof<A>::ok && is_scalar_v<B>>> {
  typedef typename ks_vof<A>::type type;
};
template <typename A, typename B>
struct ks_bin<A, B, enable_if_t<is_scalar_v<A> && ks_vof<B>::ok>> {
  typedef typename ks_vof<B>::type type;
};
template <typename V> struct ks_boolv;
template <typename T, int N> struct ks_boolv<vec<T, N>> { typedef vec<bool, N> type; };
template <typename A, typename B> using ks_bin_t = typename ks_bin<decay_t<A>, decay_t<B>>::type;
template <typename A, typename B> using ks_cmp_t = typename ks_boolv<ks_bin_t<A, B>>::type;

#define KS_BINOP(op)                                                      \
  template <typename A, typename B> ks_bin_t<A, B> operator op(const A& a, const B& b);
KS_BINOP(+)
KS_BINOP(-)
KS_BINOP(*)
KS_BINOP(/)
KS_BINOP(%)
KS_BINOP(&)
KS_BINOP(|)
KS_BINOP(^)
KS_BINOP(<<)
KS_BINOP(>>)
#undef KS_BINOP
#define KS_CMPOP(op)                                                      \
  template <typename A, typename B> ks_cmp_t<A, B> operator op(const A& a, const B& b);
KS_CMPOP(==)
KS_CMPOP(!=)
KS_CMPOP(<)
KS_CMPOP(>)
KS_CMPOP(<=)
KS_CMPOP(>=)
KS_CMPOP(&&)
KS_CMPOP(||)
#undef KS_CMPOP
template <typename A, typename V = typename ks_vof<A>::type> V operator-(const A& a);
template <typename A, typename V = typename ks_vof<A>::type> V operator+(const A& a);
template <typename A, typename V = typename ks_vof<A>::type> V operator~(const A& a);
template <typename A, typename V = typename ks_vof<A>::type> typename ks_boolv<V>::type operator!(const A& a);

// ---- matrices (rarely used in compute kernels) -------------------------------------------------------
template <typename T, int C, int R> struct matrix {
  vec<T, R> columns[C];
  matrix() = default;
  explicit matrix(T diagonal);
  // Columns, one per argument: float2x2(float2(...), float2(...)).
  template <typename... V, typename = enable_if_t<sizeof...(V) == C && (is_same_v<V, vec<T, R>> && ...)>>
  matrix(const V&... cols);
  // Another element type converts explicitly: half4x4(float4x4(...)).
  template <typename U, typename = enable_if_t<!is_same_v<U, T>>> explicit matrix(const matrix<U, C, R>& o);
  vec<T, R>& operator[](int i);
  const vec<T, R>& operator[](int i) const;
};
template <typename T, int C, int R> matrix<T, C, R> operator+(const matrix<T, C, R>&, const matrix<T, C, R>&);
template <typename T, int C, int R> matrix<T, C, R> operator*(const matrix<T, C, R>&, T);
template <typename T, int C, int R> vec<T, R> operator*(const matrix<T, C, R>&, const vec<T, C>&);
template <typename T, int K, int C, int R>
matrix<T, C, R> operator*(const matrix<T, K, R>&, const matrix<T, C, K>&);

}  // namespace metal

#define KS_VEC_TYPES(T, name)                          \
  typedef metal::vec<T, 2> name##2;                    \
  typedef metal::vec<T, 3> name##3;                    \
  typedef metal::vec<T, 4> name##4;                    \
  typedef metal::packed_vec<T, 2> packed_##name##2;    \
  typedef metal::packed_vec<T, 3> packed_##name##3;    \
  typedef metal::packed_vec<T, 4> packed_##name##4;
KS_VEC_TYPES(float, float)
KS_VEC_TYPES(half, half)
KS_VEC_TYPES(bfloat, bfloat)
KS_VEC_TYPES(int, int)
KS_VEC_TYPES(uint, uint)
KS_VEC_TYPES(short, short)
KS_VEC_TYPES(ushort, ushort)
KS_VEC_TYPES(char, char)
KS_VEC_TYPES(uchar, uchar)
KS_VEC_TYPES(long, long)
KS_VEC_TYPES(ulong, ulong)
KS_VEC_TYPES(bool, bool)
#undef KS_VEC_TYPES
#define KS_MAT_TYPES(T, name)                                                           \
  typedef metal::matrix<T, 2, 2> name##2x2;                                             \
  typedef metal::matrix<T, 2, 3> name##2x3;                                             \
  typedef metal::matrix<T, 2, 4> name##2x4;                                             \
  typedef metal::matrix<T, 3, 2> name##3x2;                                             \
  typedef metal::matrix<T, 3, 3> name##3x3;                                             \
  typedef metal::matrix<T, 3, 4> name##3x4;                                             \
  typedef metal::matrix<T, 4, 2> name##4x2;                                             \
  typedef metal::matrix<T, 4, 3> name##4x3;                                             \
  typedef metal::matrix<T, 4, 4> name##4x4;
KS_MAT_TYPES(float, float)
KS_MAT_TYPES(half, half)
#undef KS_MAT_TYPES

namespace metal {

// ---- math: scalars and vectors of floats, element by element -----------------------------------------
template <typename X> struct ks_elem { typedef X type; };
template <typename T, int N> struct ks_elem<vec<T, N>> { typedef T type; };
template <typename X> using ks_elem_t = typename ks_elem<X>::type;
// Whether simd_sum and friends take a T: arithmetic scalars and vectors of them.
template <typename T> struct __is_valid_simdgroup_type {
  static constexpr bool value = ks_scalar<remove_cv_t<ks_elem_t<T>>>::value;
};
// A float-like argument: a floating scalar or a vector of them (swizzles and packed vectors read as vectors).
template <typename X> struct ks_fv {
  typedef conditional_t<ks_vof<X>::ok, typename ks_vof<conditional_t<ks_vof<X>::ok, X, vec<float, 2>>>::type, X>
      type;
};
// Metal has no double: an unsuffixed literal such as `0.5` is a float there.
template <> struct ks_fv<double> { typedef float type; };
template <typename X> using ks_fv_t = typename ks_fv<decay_t<X>>::type;
template <typename X>
using ks_float_t = enable_if_t<is_floating_point_v<ks_elem_t<ks_fv_t<X>>>, ks_fv_t<X>>;
template <typename X> using ks_num_t = enable_if_t<is_scalar_v<ks_elem_t<ks_fv_t<X>>>, ks_fv_t<X>>;
template <typename X> using ks_int_t = enable_if_t<is_integral_v<ks_elem_t<ks_fv_t<X>>>, ks_fv_t<X>>;

#define KS_F1(name) template <typename X> ks_float_t<X> name(X x);
#define KS_F2(name)                                               \
  template <typename X> ks_float_t<X> name(X x, ks_float_t<X> y); \
  /* an integer first argument converts to the second's type: fmax(0, x) */ \
  template <typename X, typename Y, typename = enable_if_t<is_integral_v<X>>> ks_float_t<Y> name(X x, Y y);
#define KS_F3(name) template <typename X> ks_float_t<X> name(X x, ks_float_t<X> y, ks_float_t<X> z);
#define KS_MATH                                                                                     \
  KS_F1(acos) KS_F1(acosh) KS_F1(asin) KS_F1(asinh) KS_F1(atan) KS_F1(atanh) KS_F1(cbrt) KS_F1(ceil) \
  KS_F1(cos) KS_F1(cosh) KS_F1(cospi) KS_F1(exp) KS_F1(exp2) KS_F1(exp10) KS_F1(fabs) KS_F1(floor)  \
  KS_F1(fract) KS_F1(log) KS_F1(log2) KS_F1(log10) KS_F1(rint) KS_F1(round) KS_F1(rsqrt) KS_F1(sin)  \
  KS_F1(sinh) KS_F1(sinpi) KS_F1(sqrt) KS_F1(tan) KS_F1(tanh) KS_F1(tanpi) KS_F1(trunc)            \
  KS_F1(saturate) KS_F1(logb)                                                                     \
  KS_F2(atan2) KS_F2(copysign) KS_F2(fdim) KS_F2(fmax) KS_F2(fmin) KS_F2(fmod) KS_F2(pow)            \
  KS_F2(powr) KS_F2(nextafter) KS_F2(step) KS_F3(fma) KS_F3(mix) KS_F3(smoothstep)                 \
  KS_F3(fmax3) KS_F3(fmin3) KS_F3(fmedian3)
KS_MATH
template <typename X> ks_float_t<X> pown(X x, int n);
template <typename X> ks_float_t<X> rootn(X x, int n);
template <typename X> ks_float_t<X> ldexp(X x, int n);
template <typename X> ks_float_t<X> frexp(X x, thread int& e);
template <typename X> ks_float_t<X> modf(X x, thread ks_float_t<X>& i);
template <typename X> ks_float_t<X> sincos(X x, thread ks_float_t<X>& c);
template <typename X> ks_float_t<X> sign(X x);
template <typename X> ks_float_t<X> divide(X x, ks_float_t<X> y);

namespace fast {
KS_MATH
template <typename X> ks_float_t<X> divide(X x, ks_float_t<X> y);
template <typename X> ks_float_t<X> min(X x, ks_float_t<X> y);
template <typename X> ks_float_t<X> max(X x, ks_float_t<X> y);
}  // namespace fast
namespace precise {
KS_MATH
template <typename X> ks_float_t<X> divide(X x, ks_float_t<X> y);
}  // namespace precise
#undef KS_MATH
#undef KS_F1
#undef KS_F2
#undef KS_F3

// Integer and mixed functions.
template <typename X> ks_num_t<X> abs(X x);
template <typename X> ks_num_t<X> min(X x, ks_num_t<X> y);
template <typename X> ks_num_t<X> max(X x, ks_num_t<X> y);
template <typename X> ks_num_t<X> min3(X x, ks_num_t<X> y, ks_num_t<X> z);
template <typename X> ks_num_t<X> max3(X x, ks_num_t<X> y, ks_num_t<X> z);
template <typename X> ks_num_t<X> median3(X x, ks_num_t<X> y, ks_num_t<X> z);
template <typename X> ks_num_t<X> clamp(X x, ks_num_t<X> lo, ks_num_t<X> hi);
template <typename X> ks_int_t<X> absdiff(X x, ks_int_t<X> y);
template <typename X> ks_int_t<X> addsat(X x, ks_int_t<X> y);
template <typename X> ks_int_t<X> subsat(X x, ks_int_t<X> y);
template <typename X> ks_int_t<X> hadd(X x, ks_int_t<X> y);
template <typename X> ks_int_t<X> rhadd(X x, ks_int_t<X> y);
template <typename X> ks_int_t<X> mulhi(X x, ks_int_t<X> y);
template <typename X> ks_int_t<X> mad24(X x, ks_int_t<X> y, ks_int_t<X> z);
template <typename X> ks_int_t<X> mul24(X x, ks_int_t<X> y);
template <typename X> ks_int_t<X> madhi(X x, ks_int_t<X> y, ks_int_t<X> z);
template <typename X> ks_int_t<X> madsat(X x, ks_int_t<X> y, ks_int_t<X> z);
template <typename X> ks_int_t<X> clz(X x);
template <typename X> ks_int_t<X> ctz(X x);
template <typename X> ks_int_t<X> popcount(X x);
template <typename X> ks_int_t<X> reverse_bits(X x);
template <typename X> ks_int_t<X> rotate(X x, ks_int_t<X> n);
template <typename X> ks_int_t<X> extract_bits(X x, uint offset, uint bits);
template <typename X> ks_int_t<X> insert_bits(X base, ks_int_t<X> ins, uint offset, uint bits);

// Predicates: a bool for a scalar, a bool vector for a vector.
template <typename X> struct ks_pred { typedef bool type; };
template <typename T, int N> struct ks_pred<vec<T, N>> { typedef vec<bool, N> type; };
template <typename X> typename ks_pred<ks_float_t<X>>::type isnan(X x);
template <typename X> typename ks_pred<ks_float_t<X>>::type isinf(X x);
template <typename X> typename ks_pred<ks_float_t<X>>::type isfinite(X x);
template <typename X> typename ks_pred<ks_float_t<X>>::type isnormal(X x);
template <typename X> typename ks_pred<ks_float_t<X>>::type signbit(X x);
template <int N> bool all(vec<bool, N> v);
template <int N> bool any(vec<bool, N> v);
bool all(bool b);
bool any(bool b);
template <typename X, typename C> ks_num_t<X> select(X a, ks_num_t<X> b, C c);

// Geometric functions.
// (Arguments may be swizzles or packed vectors; both must stand for the same vector type.)
template <typename A, typename B, typename V = typename ks_vof<decay_t<A>>::type,
          typename = enable_if_t<is_same_v<V, typename ks_vof<decay_t<B>>::type>>>
typename V::value_type dot(const A& a, const B& b);
template <typename A, typename B, typename V = typename ks_vof<decay_t<A>>::type,
          typename = enable_if_t<is_same_v<V, typename ks_vof<decay_t<B>>::type>>>
typename V::value_type distance(const A& a, const B& b);
template <typename A, typename B, typename V = typename ks_vof<decay_t<A>>::type,
          typename = enable_if_t<is_same_v<V, typename ks_vof<decay_t<B>>::type>>>
V cross(const A& a, const B& b);
template <typename A, typename V = typename ks_vof<decay_t<A>>::type> typename V::value_type length(const A& a);
template <typename A, typename V = typename ks_vof<decay_t<A>>::type>
typename V::value_type length_squared(const A& a);
template <typename A, typename V = typename ks_vof<decay_t<A>>::type> V normalize(const A& a);

// Reinterpretation: the sizes must agree.
template <typename To, typename From> To as_type(From f) {
  static_assert(sizeof(To) == sizeof(From) || is_vector_v<To> || is_vector_v<From>,
                "as_type: source and destination must have the same size");
  return To();
}

// ---- synchronisation ---------------------------------------------------------------------------------
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8, mem_object_data = 16 };
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }
void threadgroup_barrier(mem_flags flags);
void simdgroup_barrier(mem_flags flags);
enum class thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
void atomic_thread_fence(mem_flags flags, int order, thread_scope scope = thread_scope::thread_scope_device);

// ---- SIMD-group and quad-group functions -------------------------------------------------------------
// T: a scalar or vector of any arithmetic type (lane arguments take a ushort, so any integer converts).
template <typename X> using ks_any_t = ks_num_t<X>;
#define KS_S1(name) template <typename X> ks_any_t<X> simd_##name(X x); template <typename X> ks_any_t<X> quad_##name(X x);
KS_S1(sum) KS_S1(product) KS_S1(max) KS_S1(min) KS_S1(and) KS_S1(or) KS_S1(xor)
KS_S1(prefix_inclusive_sum) KS_S1(prefix_exclusive_sum) KS_S1(prefix_inclusive_product)
KS_S1(prefix_exclusive_product) KS_S1(broadcast_first)
#undef KS_S1
#define KS_S2(name) template <typename X> ks_any_t<X> simd_##name(X x, ushort lane); template <typename X> ks_any_t<X> quad_##name(X x, ushort lane);
KS_S2(shuffle) KS_S2(shuffle_up) KS_S2(shuffle_down) KS_S2(shuffle_xor) KS_S2(broadcast)
KS_S2(shuffle_rotate_up) KS_S2(shuffle_rotate_down)
#undef KS_S2
template <typename X> ks_any_t<X> simd_shuffle_and_fill_up(X x, ks_any_t<X> fill, ushort delta);
template <typename X> ks_any_t<X> simd_shuffle_and_fill_down(X x, ks_any_t<X> fill, ushort delta);
template <typename X> ks_any_t<X> simd_shuffle_and_fill_up(X x, ks_any_t<X> fill, ushort delta, ushort modulo);
template <typename X> ks_any_t<X> simd_shuffle_and_fill_down(X x, ks_any_t<X> fill, ushort delta, ushort modulo);
struct simd_vote {
  typedef ulong vote_t;
  explicit simd_vote(vote_t v = 0);
  explicit operator vote_t() const;
  bool all() const;
  bool any() const;
};
simd_vote simd_ballot(bool b);
simd_vote simd_active_threads_mask();
bool simd_all(bool b);
bool simd_any(bool b);
bool simd_is_first();
bool simd_is_helper_thread();
struct quad_vote {
  typedef ushort vote_t;
  explicit quad_vote(vote_t v = 0);
  explicit operator vote_t() const;
  bool all() const;
  bool any() const;
};
quad_vote quad_ballot(bool b);
quad_vote quad_active_threads_mask();
bool quad_all(bool b);
bool quad_any(bool b);
bool quad_is_first();

// ---- atomics -----------------------------------------------------------------------------------------
// The atomic functions take memory_order_relaxed only; Metal 3.2's memory_order_seq_cst orders a fence
// (atomic_thread_fence takes either), so it is a type of its own that no atomic function takes.
enum memory_order { memory_order_relaxed };
enum ks_fence_order { memory_order_seq_cst = 5 };
template <typename T> struct atomic {
  static_assert(is_same_v<T, int> || is_same_v<T, uint> || is_same_v<T, float> || is_same_v<T, bool> ||
                    is_same_v<T, ulong>,
                "Metal atomics exist only for int, uint, float, bool (and ulong min/max)");
  T ks_value_;
  atomic() = default;
  atomic(const atomic&) = delete;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
template <typename T> struct ks_atom_arg { typedef T type; };
template <typename T> using ks_atom_t = typename ks_atom_arg<T>::type;  // not deduced from the value
template <typename T> void atomic_store_explicit(volatile atomic<T>* obj, ks_atom_t<T> v, memory_order o);
template <typename T> T atomic_load_explicit(const volatile atomic<T>* obj, memory_order o);
template <typename T> T atomic_exchange_explicit(volatile atomic<T>* obj, ks_atom_t<T> v, memory_order o);
template <typename T>
bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* obj, thread T* expected, ks_atom_t<T> desired,
                                           memory_order succ, memory_order fail);
template <typename T>
bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* obj, thread T* expected, ks_atom_t<T> desired,
                                             memory_order succ, memory_order fail);
#define KS_AT(op)                                                                                    \
  template <typename T> T atomic_fetch_##op##_explicit(volatile atomic<T>* obj, ks_atom_t<T> v, memory_order o);
KS_AT(add) KS_AT(sub) KS_AT(and) KS_AT(or) KS_AT(xor) KS_AT(min) KS_AT(max)
#undef KS_AT
template <typename T> void atomic_max_explicit(volatile atomic<T>* obj, ks_atom_t<T> v, memory_order o);
template <typename T> void atomic_min_explicit(volatile atomic<T>* obj, ks_atom_t<T> v, memory_order o);

// ---- simdgroup matrices: 8x8 of float, half or bfloat -------------------------------------------------
template <typename T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(is_same_v<T, float> || is_same_v<T, half> || is_same_v<T, bfloat>,
                "simdgroup_matrix holds float, half or bfloat");
  static_assert(Cols == 8 && Rows == 8, "simdgroup_matrix is 8x8 on Apple GPUs");
  simdgroup_matrix() = default;
  simdgroup_matrix(T diagonal);
  vec<T, 2>& thread_elements();
  const vec<T, 2>& thread_elements() const;
};
template <typename T, int C, int R = C> simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T v);
template <typename T> struct ks_same { typedef T type; };
template <typename T, int C, int R>
void simdgroup_load(thread simdgroup_matrix<T, C, R>& d, const typename ks_same<T>::type* src,
                    ulong elements_per_row = C, vec<ulong, 2> origin = vec<ulong, 2>(0), bool transpose = false);
template <typename T, int C, int R>
void simdgroup_store(const thread simdgroup_matrix<T, C, R>& a, typename ks_same<T>::type* dst,
                     ulong elements_per_row = C, vec<ulong, 2> origin = vec<ulong, 2>(0), bool transpose = false);
template <typename T, typename U, typename V, int K, int M, int N>
void simdgroup_multiply(thread simdgroup_matrix<T, K, M>& d, const thread simdgroup_matrix<U, N, M>& a,
                        const thread simdgroup_matrix<V, K, N>& b);
template <typename T, typename U, typename V, typename W, int K, int M, int N>
void simdgroup_multiply_accumulate(thread simdgroup_matrix<T, K, M>& d, const thread simdgroup_matrix<U, N, M>& a,
                                   const thread simdgroup_matrix<V, K, N>& b,
                                   const thread simdgroup_matrix<W, K, M>& c);

// Metal's internal traits (behind `#pragma METAL internals : enable`, which MLX's atomics use).
template <typename... B> struct _disjunction { static constexpr bool value = (B::value || ... || false); };
template <typename... B> struct _conjunction { static constexpr bool value = (B::value && ... && true); };
// A product of simdgroup matrices (A is M rows by K columns, B is K by N).
template <typename T, int K, int M, int N>
simdgroup_matrix<T, N, M> operator*(const simdgroup_matrix<T, K, M>& a, const simdgroup_matrix<T, N, K>& b);

// ---- uniform values and arrays ------------------------------------------------------------------------
// A value the compiler may assume equal across the threads; it reads as its value type.
template <typename T> struct uniform {
  T value_;
  uniform() = default;
  constexpr uniform(T v) : value_(v) {}
  constexpr operator T() const { return value_; }
};
template <typename T> constexpr uniform<T> make_uniform(T v) { return uniform<T>(v); }
template <typename T, size_t N> struct array {
  T elems_[N];
  constexpr size_t size() const { return N; }
  T& operator[](size_t i);
  constexpr const T& operator[](size_t i) const { return elems_[i]; }
};

}  // namespace metal

typedef metal::simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef metal::simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef metal::simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

// A function constant (`constant bool HAS_MASK [[function_constant(0)]];`) is set when the pipeline is
// made; shim_dialect gives it this initializer, which converts to any type, so the declaration is a
// definition (even `constexpr`, as MLX's `STEEL_CONST` writes it). Its value, 1, divides.
struct ks_function_constant {
  template <typename T> constexpr operator T() const { return T(1); }
};

// For `ksearch check`: naming a member this struct lacks makes the compiler print a threadgroup variable's
// size, after template substitution, in its message.
template <int Line, unsigned long Bytes> struct ks_tg_probe {};
// Bytes as Metal lays them out (the shim's `bfloat` has Metal's 2 bytes; its vectors are counted here too).
template <typename T> struct ks_sizeof { static constexpr unsigned long value = sizeof(T); };
template <> struct ks_sizeof<bfloat> { static constexpr unsigned long value = 2; };
template <typename T> struct ks_sizeof<const T> : ks_sizeof<T> {};
template <typename T, unsigned long N> struct ks_sizeof<T[N]> {
  static constexpr unsigned long value = N * ks_sizeof<T>::value;
};
template <int N> struct ks_sizeof<metal::vec<bfloat, N>> { static constexpr unsigned long value = 2 * (N == 3 ? 4 : N); };
template <int N> struct ks_sizeof<metal::packed_vec<bfloat, N>> { static constexpr unsigned long value = 2 * N; };

// Metal's compiler builtins (`__metal_fma(x, y, z, mode)`), which libraries such as MLX call from their own
// math and simd overloads: each returns its first argument's type.
#define KS_BUILTIN(name) \
  template <typename T, typename... A> T name(T x, A... rest);
KS_BUILTIN(__metal_fabs) KS_BUILTIN(__metal_acos) KS_BUILTIN(__metal_acosh) KS_BUILTIN(__metal_asin)
KS_BUILTIN(__metal_asinh) KS_BUILTIN(__metal_atan) KS_BUILTIN(__metal_atanh) KS_BUILTIN(__metal_atan2)
KS_BUILTIN(__metal_cbrt) KS_BUILTIN(__metal_ceil) KS_BUILTIN(__metal_copysign) KS_BUILTIN(__metal_cos)
KS_BUILTIN(__metal_cosh) KS_BUILTIN(__metal_cospi) KS_BUILTIN(__metal_exp) KS_BUILTIN(__metal_exp10)
KS_BUILTIN(__metal_exp2) KS_BUILTIN(__metal_fdim) KS_BUILTIN(__metal_floor) KS_BUILTIN(__metal_fma)
KS_BUILTIN(__metal_fmax) KS_BUILTIN(__metal_fmax3) KS_BUILTIN(__metal_fmedian3) KS_BUILTIN(__metal_fmin)
KS_BUILTIN(__metal_fmin3) KS_BUILTIN(__metal_fmod) KS_BUILTIN(__metal_fract) KS_BUILTIN(__metal_frexp)
KS_BUILTIN(__metal_ilogb) KS_BUILTIN(__metal_ldexp) KS_BUILTIN(__metal_log) KS_BUILTIN(__metal_log10)
KS_BUILTIN(__metal_log2) KS_BUILTIN(__metal_max) KS_BUILTIN(__metal_max3) KS_BUILTIN(__metal_median3)
KS_BUILTIN(__metal_min) KS_BUILTIN(__metal_min3) KS_BUILTIN(__metal_nextafter) KS_BUILTIN(__metal_pow)
KS_BUILTIN(__metal_powr) KS_BUILTIN(__metal_remainder) KS_BUILTIN(__metal_rint) KS_BUILTIN(__metal_round)
KS_BUILTIN(__metal_rsqrt) KS_BUILTIN(__metal_sin) KS_BUILTIN(__metal_sincos) KS_BUILTIN(__metal_sinh)
KS_BUILTIN(__metal_sinpi) KS_BUILTIN(__metal_sqrt) KS_BUILTIN(__metal_tan) KS_BUILTIN(__metal_tanh)
KS_BUILTIN(__metal_tanpi) KS_BUILTIN(__metal_trunc) KS_BUILTIN(__metal_divide) KS_BUILTIN(__metal_modf) KS_BUILTIN(__metal_abs)
KS_BUILTIN(__metal_simd_broadcast) KS_BUILTIN(__metal_simd_shuffle) KS_BUILTIN(__metal_simd_shuffle_down)
KS_BUILTIN(__metal_simd_shuffle_up) KS_BUILTIN(__metal_simd_shuffle_xor)
KS_BUILTIN(__metal_simd_shuffle_and_fill_down) KS_BUILTIN(__metal_simd_shuffle_and_fill_up)
KS_BUILTIN(__metal_simd_shuffle_rotate_down) KS_BUILTIN(__metal_simd_shuffle_rotate_up)
KS_BUILTIN(__metal_simd_max) KS_BUILTIN(__metal_simd_min) KS_BUILTIN(__metal_simd_sum)
KS_BUILTIN(__metal_simd_product) KS_BUILTIN(__metal_simd_xor) KS_BUILTIN(__metal_simd_and)
KS_BUILTIN(__metal_simd_or) KS_BUILTIN(__metal_simd_prefix_exclusive_sum)
KS_BUILTIN(__metal_simd_prefix_inclusive_sum) KS_BUILTIN(__metal_simd_prefix_exclusive_product)
KS_BUILTIN(__metal_simd_prefix_inclusive_product) KS_BUILTIN(__metal_quad_broadcast)
KS_BUILTIN(__metal_quad_shuffle) KS_BUILTIN(__metal_quad_shuffle_down) KS_BUILTIN(__metal_quad_shuffle_up)
KS_BUILTIN(__metal_quad_shuffle_xor) KS_BUILTIN(__metal_quad_sum) KS_BUILTIN(__metal_quad_max)
KS_BUILTIN(__metal_quad_min)
#undef KS_BUILTIN
// The simdgroup width as a builtin (32 on Apple GPUs).
template <typename... A> ushort __metal_get_simdgroup_size(A...);
