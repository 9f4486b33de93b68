// What MLX puts in front of every `mx.fast.metal_kernel` source (its `utils.h`), as declarations written
// for ksearch's checker: the Metal library in scope, MLX's dtype names and its small helpers. A header or
// body that defines one of these names again fails on a Mac too.
#pragma once
#include "metal_shim.h"
using namespace metal;

typedef half float16_t;
typedef bfloat bfloat16_t;
struct complex64_t {
  float real;
  float imag;
  complex64_t() = default;
  complex64_t(float r, float i);
  complex64_t(float r);
};
complex64_t operator+(complex64_t a, complex64_t b);
complex64_t operator-(complex64_t a, complex64_t b);
complex64_t operator*(complex64_t a, complex64_t b);
complex64_t operator/(complex64_t a, complex64_t b);

template <typename T> struct Limits {
  static const T max;
  static const T min;
  static const T finite_max;
  static const T finite_min;
};

template <typename T, typename U> T ceildiv(T n, U m);

template <typename IdxT = int64_t, typename E>
IdxT elem_to_loc(E elem, constant int* shape, constant int64_t* strides, int ndim);
template <typename IdxT = int64_t>
IdxT elem_to_loc(uint3 elem, constant int* shape, constant int64_t* strides, int ndim);
template <typename IdxT = int64_t, typename E>
IdxT elem_to_loc_1(E elem, constant int64_t& stride);
template <typename IdxT = int64_t>
IdxT elem_to_loc_2(uint2 elem, constant int64_t strides[2]);
template <typename IdxT = int64_t>
IdxT elem_to_loc_3(uint3 elem, constant int64_t strides[3]);
