// The cuda target's naive trimul seed (tasks/trimul/seeds/cuda/naive/trimul.cu) on the CPU emulation, with its
// plan's three launches and buffers: out must match GPU MODE's outgoing triangle multiplicative update computed
// here in double, with a random 0/1 mask and with none, on an S that is no multiple of the 16 x 16 tiles.
#include "cuda_cpu.h"
#include "device_names.h"
#include "trimul_case.h"

#include "../../tasks/trimul/seeds/cuda/naive/trimul.cu"

static std::mt19937 rng(3);
constexpr int D = 24, H = 32;

int check(const char* what, int B, int S, bool masked) {
  TrimulCase<D, H> c(B, S, masked, rng);
  const size_t plane = c.plane;
  std::vector<float> left(B * H * plane, NAN), right(B * H * plane, NAN), gate(B * H * plane, NAN),
      tri(B * H * plane, NAN);
  cpu_launch({(unsigned)(H * B * S * S), 1, 1}, {H, 1, 1}, [&] {
    trimul_project<D, H>(c.x.data(), c.mask.data(), c.nw.data(), c.nb.data(), c.lp.data(), c.rp.data(), c.lg.data(),
                         c.rg.data(), c.og.data(), left.data(), right.data(), gate.data(), S);
  });
  cpu_launch({(unsigned)S, (unsigned)S, (unsigned)(B * H)}, {16, 16, 1},
             [&] { trimul_triangle(left.data(), right.data(), tri.data(), S); });
  cpu_launch({(unsigned)(H * B * S * S), 1, 1}, {H, 1, 1}, [&] {
    trimul_output<D, H>(tri.data(), gate.data(), c.onw.data(), c.onb.data(), c.to.data(), c.out.data(), S);
  });
  return c.compare(what, 1e-3);  // float32 throughout: far inside the tolerance
}

int main() {
  int bad = 0;
  bad += check("B 2, S 20, no mask", 2, 20, false);
  bad += check("B 1, S 33, random mask", 1, 33, true);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("trimul naive seed agrees with the reference\n");
  return 0;
}
