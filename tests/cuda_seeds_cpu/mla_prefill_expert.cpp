// The cuda target's mla-paged-prefill expert (tasks/mla-paged-prefill/seeds/cuda/expert: prefill.cu over tiles of
// 4 query tokens, or for a step of one query per sequence the decode expert's split.cu then merge.cu, as the plan
// dispatches on Q == B) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h: output and the base-2 lse
// must match causal absorbed-form attention computed here in double (query i of Lq seeing the first
// Lkv - Lq + i + 1 of its sequence's Lkv pages). PTX primitives and dynamic shared memory as in
// mla_decode_expert.cpp. Cases: a whole prefill (Lq = Lkv), chunked prefills, token counts that are no multiple of
// a tile, one-token sequences inside a prefill batch, more than 32 sequences, a decode step; bf16 and fp16.
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
// The running kernel's dynamic shared memory (the decode split's or the prefill tiles'), set by the launcher.
static int g_shared_bytes = 0;
#define KSMLA_DYNAMIC_SHARED(name) unsigned char* name = static_cast<unsigned char*>(cpu_block_shared(g_shared_bytes))

#include "prefill.cu"
#include "split.cu"
#include "merge.cu"

static std::mt19937 rng(13);
constexpr int H = MLA_H, DC = MLA_DC, CH = 64;

// Sequences of (query tokens, pages).
template <typename T>
int check(const char* what, const std::vector<std::pair<int, int>>& seqs, int P) {
  MlaCase<T> c(seqs, P, rng);
  const int B = c.B, Q = c.Q;
  if (Q > B) {  // the plan's prefill launch: 256 ((Q + 3) / 4 + B) threads in blocks of 256
    g_shared_bytes = ksmla::kPrefillSharedBytes;
    cpu_launch({(unsigned)(256 * ((Q + 3) / 4 + B)), 1, 1}, {256, 1, 1}, [&] {
      mla_prefill_tiles<T>(c.qn.data(), c.qp.data(), c.ckv.data(), c.kpe.data(), c.qo.data(), c.kv.data(),
                           c.indices.data(), c.out.data(), c.lse.data(), B);
    });
  } else {  // Q == B: the decode expert's split and merge
    const int items = (c.N + CH - 1) / CH + B;
    std::vector<float> part((size_t)items * H * (DC + 2), NAN);
    g_shared_bytes = ksmla::kSharedBytes;
    cpu_launch({(unsigned)(128 * items), 1, 1}, {128, 1, 1}, [&] {
      mla_decode_split<CH, T>(c.qn.data(), c.qp.data(), c.ckv.data(), c.kpe.data(), c.kv.data(), c.indices.data(),
                              part.data(), B);
    });
    cpu_launch({(unsigned)(DC * B * H), 1, 1}, {DC, 1, 1},
               [&] { mla_decode_merge<CH, T>(part.data(), c.kv.data(), c.out.data(), c.lse.data(), B); });
  }
  return c.compare(what);
}

int main() {
  using bf = __nv_bfloat16;
  int bad = 0;
  bad += check<bf>("whole prefill (Lq = Lkv = 37)", {{37, 37}}, 64);
  bad += check<bf>("chunked: 6 of 70, 1 of 20, 9 of 9", {{6, 70}, {1, 20}, {9, 9}}, 120);
  bad += check<__half>("fp16, 13 of 50", {{13, 50}}, 64);
  std::vector<std::pair<int, int>> many(35, {1, 3});
  many[7] = {5, 8};
  bad += check<bf>("35 sequences, one-token ones among them", many, 160);
  bad += check<bf>("decode step (Q == B): 1 of 200, 1 of 3", {{1, 200}, {1, 3}}, 256);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("mla prefill expert agrees with the reference\n");
  return 0;
}
