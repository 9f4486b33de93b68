// Inline PTX that `ksearch translate` emulates in Metal (translate/ptx.rs): what the CUDA computed, not how
// fast it did it. A search replaces these with Metal's own (simdgroup_matrix, plain loads).

// cp.async of `bytes` (4, 8 or 16) from device to threadgroup memory, zeros past `src_bytes` (nothing is read
// there). Synchronous: the commit and wait groups that follow have nothing left to wait for.
inline void ksearch_cp_async(threadgroup uchar* dst, const device uchar* src, int bytes, int src_bytes) {
  if (bytes == 16 && src_bytes >= 16) {
    *((threadgroup uint4*)(dst)) = *((const device uint4*)(src));
    return;
  }
  for (int i = 0; i < bytes; ++i) dst[i] = i < src_bytes ? src[i] : uchar(0);
}

// The two 16-bit values of a fragment register (the first in the low half), as floats.
inline float2 ksearch_f16x2(uint r) {
  return float2(float(as_type<half>(ushort(r & 0xffffu))), float(as_type<half>(ushort(r >> 16))));
}
inline float2 ksearch_bf16x2(uint r) {
  return float2(as_type<float>(r << 16), as_type<float>(r & 0xffff0000u));
}
inline float ksearch_dot2(float2 x, float2 y) { return x.x * y.x + x.y * y.y; }

// mma.sync.aligned.m16n8k16.row.col, f32 += f16 x f16 or bf16 x bf16: D (16 x 8) = A (16 x 16) B (16 x 8) + C,
// each lane holding PTX's fragments (lane l, g = l / 4, t = l % 4: A rows g and g + 8 at k 2t, 2t + 1 and
// 2t + 8, 2t + 9; B column g at the same k; C and D rows g and g + 8, columns 2t and 2t + 1). Row g's k
// values are in lanes 4g .. 4g + 3 and column n's in lanes 4n .. 4n + 3: each lane gathers them by shuffles.
template <bool BF16>
inline float4 ksearch_mma_m16n8k16(uint4 a, uint2 b, float4 c, uint lane) {
  const uint g = lane / 4, t = lane % 4;
  float4 d = c;
  for (uint q = 0; q < 4; ++q) {
    const ushort la = ushort(g * 4 + q), lb0 = ushort((t * 2) * 4 + q), lb1 = ushort((t * 2 + 1) * 4 + q);
    const uint a0 = simd_shuffle(a.x, la), a1 = simd_shuffle(a.y, la);
    const uint a2 = simd_shuffle(a.z, la), a3 = simd_shuffle(a.w, la);
    const uint b00 = simd_shuffle(b.x, lb0), b01 = simd_shuffle(b.y, lb0);
    const uint b10 = simd_shuffle(b.x, lb1), b11 = simd_shuffle(b.y, lb1);
    const float2 x0 = BF16 ? ksearch_bf16x2(a0) : ksearch_f16x2(a0), x1 = BF16 ? ksearch_bf16x2(a1) : ksearch_f16x2(a1);
    const float2 x2 = BF16 ? ksearch_bf16x2(a2) : ksearch_f16x2(a2), x3 = BF16 ? ksearch_bf16x2(a3) : ksearch_f16x2(a3);
    const float2 y00 = BF16 ? ksearch_bf16x2(b00) : ksearch_f16x2(b00), y01 = BF16 ? ksearch_bf16x2(b01) : ksearch_f16x2(b01);
    const float2 y10 = BF16 ? ksearch_bf16x2(b10) : ksearch_f16x2(b10), y11 = BF16 ? ksearch_bf16x2(b11) : ksearch_f16x2(b11);
    d.x += ksearch_dot2(x0, y00) + ksearch_dot2(x2, y01);
    d.y += ksearch_dot2(x0, y10) + ksearch_dot2(x2, y11);
    d.z += ksearch_dot2(x1, y00) + ksearch_dot2(x3, y01);
    d.w += ksearch_dot2(x1, y10) + ksearch_dot2(x3, y11);
  }
  return d;
}
