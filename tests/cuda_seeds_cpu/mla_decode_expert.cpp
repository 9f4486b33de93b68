// The cuda target's mla-paged-decode expert (tasks/mla-paged-decode/seeds/cuda/expert: mla.cuh, split.cu then
// merge.cu, as the worker launches them) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h: output and
// the base-2 lse must match the absorbed-form attention computed here in double. Its PTX primitives are emulated
// below with mma.sync m16n8k16's fragment layout (cp.async as plain copies, zeros where the seed asks for them),
// its dynamic shared memory from the emulation's per-block arena. Cases: sequences of one page, of fewer pages
// than a tile, of exactly a tile, of several chunks with a short last one, of more chunks than a merge block has
// threads; batches of more than 32 sequences (the prefix sum's second round); bf16 and fp16; chunks of 32 to 512.
#include "cuda_cpu.h"
#include "device_names.h"
#include "mla_case.h"
#include "mma_host.h"

#define KSMLA_HOST_PRIMITIVES
namespace ksmla {
template <typename T> struct Mma {
  static void run(float* c, const unsigned* a, unsigned b0, unsigned b1) { mma16816_host<T>(c, a, b0, b1); }
};
inline void cp16(void* dst, const void* src, bool ok) { cp16_host(dst, ok ? src : dst, ok ? 16 : 0); }
inline void cp_commit() {}
template <int N> inline void cp_wait() {}
}  // namespace ksmla
#define KSMLA_DYNAMIC_SHARED(name) \
  unsigned char* name = static_cast<unsigned char*>(cpu_block_shared(ksmla::kSharedBytes))

#include "split.cu"
#include "merge.cu"

static std::mt19937 rng(7);
constexpr int H = MLA_H, DC = MLA_DC;

template <typename T, int CH>
int check(const char* what, const std::vector<int>& lens, int P) {
  std::vector<std::pair<int, int>> seqs;
  for (int n : lens) seqs.push_back({1, n});
  MlaCase<T> c(seqs, P, rng);
  const int B = c.B, items = (c.N + CH - 1) / CH + B;
  std::vector<float> part((size_t)items * H * (DC + 2), NAN);
  // The plan's launches: 128 ((N + CH - 1) / CH + B) threads in blocks of 128; then DC B H threads in blocks of DC.
  cpu_launch({(unsigned)(128 * items), 1, 1}, {128, 1, 1}, [&] {
    mla_decode_split<CH, T>(c.qn.data(), c.qp.data(), c.ckv.data(), c.kpe.data(), c.kv.data(), c.indices.data(),
                            part.data(), B);
  });
  cpu_launch({(unsigned)(DC * B * H), 1, 1}, {DC, 1, 1}, [&] {
    mla_decode_merge<CH, T>(part.data(), c.kv.data(), c.out.data(), c.lse.data(), B);
  });
  return c.compare(what);
}

int main() {
  using bf = __nv_bfloat16;
  int bad = 0;
  bad += check<bf, 64>("defaults: lengths 1, 7, 16, 150", {1, 7, 16, 150}, 300);
  bad += check<__half, 64>("fp16", {33, 64, 2}, 120);
  bad += check<bf, 32>("chunks of 32, 40 sequences", std::vector<int>(40, 9), 400);
  bad += check<bf, 32>("600 chunks (more than a merge block has threads)", {19200, 3}, 19300);
  bad += check<bf, 512>("chunks of 512", {700, 40}, 800);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("mla decode expert agrees with the reference\n");
  return 0;
}
