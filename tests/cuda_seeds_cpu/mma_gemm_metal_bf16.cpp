// The bf16 variant of mma_gemm_metal.cpp (the fixture with bf16 operands: mma.sync ...f32.bf16.bf16.f32).
#define KS_T __nv_bfloat16
#include "mma_gemm_metal.cpp"
