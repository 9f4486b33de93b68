// The cuda target's trimul expert (tasks/trimul/seeds/cuda/expert: trimul.cuh, project.cu, triangle.cu and
// output.cu, with its plan's launches and fp16 buffers) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h:
// out must match GPU MODE's outgoing triangle multiplicative update computed here in double, within the task's
// 2e-2. Its PTX primitives are emulated below (mma.sync m16n8k16 in fp16 with its fragment layout; cp.async as
// copies of the bytes asked for, zeros after), its dynamic shared memory from the emulation's per-block arena.
// Cases: an S that is no multiple of the 128 x 128 tiles nor of the K step, a random 0/1 mask, D 64 and 128, a
// batch whose pair rows end inside a block.
#include "cuda_cpu.h"
#include "device_names.h"
#include "mma_host.h"
#include "trimul_case.h"

#define KSTRI_HOST_PRIMITIVES
namespace kstri {
inline void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) { mma16816_host<__half>(c, a, b0, b1); }
inline void cp16(void* dst, const void* src, int bytes) { cp16_host(dst, src, bytes); }
inline void cp_commit() {}
template <int N> inline void cp_wait() {}
}  // namespace kstri
#define KSTRI_DYNAMIC_SHARED(name, bytes) unsigned char* name = static_cast<unsigned char*>(cpu_block_shared(bytes))

#include "project.cu"
#include "triangle.cu"
#include "output.cu"

static std::mt19937 rng(3);
constexpr int H = 64;

template <int D>
int check(const char* what, int B, int S, bool masked) {
  TrimulCase<D, H> c(B, S, masked, rng);
  const size_t plane = c.plane;
  std::vector<__half> left(B * H * plane, __half(NAN)), right(B * H * plane, __half(NAN)),
      gate(B * H * plane, __half(NAN));
  std::vector<float> tri(B * H * plane, NAN);
  // The plan's launches: 256 ceil(B S S / 128) threads in blocks of 256; 256 ceil(S / 128) x ceil(S / 128) x B H;
  // then as the first.
  const unsigned rows = (unsigned)((B * plane + 127) / 128), tiles = (unsigned)((S + 127) / 128);
  cpu_launch({256 * rows, 1, 1}, {256, 1, 1}, [&] {
    trimul_project<D, H>(c.x.data(), c.mask.data(), c.nw.data(), c.nb.data(), c.lp.data(), c.rp.data(), c.lg.data(),
                         c.rg.data(), c.og.data(), left.data(), right.data(), gate.data(), B, S);
  });
  cpu_launch({256 * tiles, tiles, (unsigned)(B * H)}, {256, 1, 1},
             [&] { trimul_triangle(left.data(), right.data(), tri.data(), S); });
  cpu_launch({256 * rows, 1, 1}, {256, 1, 1}, [&] {
    trimul_output<D, H>(tri.data(), gate.data(), c.onw.data(), c.onb.data(), c.to.data(), c.out.data(), B, S);
  });
  return c.compare(what, 1.0);  // fp16 operands: the task's tolerance alone
}

int main() {
  int bad = 0;
  bad += check<64>("B 2, S 40, D 64, no mask", 2, 40, false);
  bad += check<128>("B 1, S 72, D 128, random mask", 1, 72, true);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("trimul expert agrees with the reference\n");
  return 0;
}
