// The tensor-core primitives the cuda experts leave to their host (KS*_HOST_PRIMITIVES), emulated with the PTX
// instructions' own layouts, for the drivers of this folder (blocks run one at a time, so one warp table).
#pragma once
#include <array>
#include <cstring>
#include <vector>

// c += a (16x16, row-major) * b (16x8, col-major), warp-wide, as mma.sync.m16n8k16 with 16-bit T: lane (g, t)
// holds a0 (row g, k 2t, 2t+1), a1 (row g+8), a2 (row g, k +8), a3 (row g+8, k +8), b0 (k 2t, 2t+1, n g),
// b1 (k +8) and c (rows g, g+8, n 2t, 2t+1). Every lane posts its fragments, then computes its own c.
inline std::vector<std::array<unsigned, 6>> g_mma_frag(1024);
template <typename T>
inline void mma16816_host(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  const unsigned l = cpu_lin(), w = l / 32, g = (l % 32) / 4, t4 = l % 4;
  g_mma_frag[l] = {a[0], a[1], a[2], a[3], b0, b1};
  __syncwarp();
  auto half = [&](int lane, int reg, int hi) {
    T x;
    x.b = (unsigned short)(g_mma_frag[w * 32 + lane][reg] >> (16 * hi));
    return (float)x;
  };
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t4 + (e & 1);
    float acc = c[e];
    for (int k = 0; k < 16; ++k)
      acc += half((row % 8) * 4 + (k % 8) / 2, (row >= 8) + 2 * (k >= 8), k % 2) *
             half(col * 4 + (k % 8) / 2, 4 + (k >= 8), k % 2);
    c[e] = acc;
  }
  __syncwarp();
}

// cp.async of `bytes` (0 to 16): a copy of them now, zeros after.
inline void cp16_host(void* dst, const void* src, int bytes) {
  std::memcpy(dst, src, bytes);
  std::memset(static_cast<char*>(dst) + bytes, 0, 16 - bytes);
}
