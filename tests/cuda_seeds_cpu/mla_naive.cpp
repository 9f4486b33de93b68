// The cuda target's naive MLA seeds (tasks/mla-paged-decode/seeds/cuda/naive, tasks/mla-paged-prefill/seeds/cuda/
// naive) on the CPU emulation of tests/back_translate_cpu/cuda_cpu.h, with the plans' launches (one warp per
// output row, blocks of TG threads): output and the base-2 lse must match the absorbed-form attention computed
// here in double (mla_case.h). Page lists scattered over the cache,
// sequences of one page and of many, a prefill as long as its pages and one of a single query; bf16 and fp16.
#include "cuda_cpu.h"
#include "device_names.h"
#include "mla_case.h"

#include "../../tasks/mla-paged-decode/seeds/cuda/naive/mla_decode.cu"
#include "../../tasks/mla-paged-prefill/seeds/cuda/naive/mla_prefill.cu"

#ifdef KSEARCH_MLX_BODY
// The decode seed as `ksearch translate --to mlx-cuda` writes it (its body, found on the include path), wrapped
// as MLX wraps a body: scalars arrive as pointers, the type argument as `using T`.
namespace mlxbody {
template <typename T_>
void mla_decode_naive(const T_* q_nope, const T_* q_pe, const T_* ckv_cache, const T_* kpe_cache,
                      const int* kv_indptr, const int* kv_indices, T_* output, float* lse, const int* B, const int* H,
                      const int* Dckv, const int* Dkpe) {
  using T = T_;
#include "mla_decode_naive.cu"
}
}  // namespace mlxbody
#endif

static std::mt19937 rng(11);
constexpr int H = MLA_H, DC = MLA_DC, DP = MLA_DP, TG = 128;

// Sequences of (queries, pages); decode when every sequence has one query.
template <typename T>
int check(const char* what, const std::vector<std::pair<int, int>>& seqs, int P, bool decode) {
  MlaCase<T> c(seqs, P, rng);
  const int B = c.B, Q = c.Q;
  cpu_launch({(unsigned)(32 * Q * H), 1, 1}, {TG, 1, 1}, [&] {
#ifdef KSEARCH_MLX_BODY
    const int sB = B, sH = H, sDC = DC, sDP = DP;
    if (decode)
      mlxbody::mla_decode_naive<T>(c.qn.data(), c.qp.data(), c.ckv.data(), c.kpe.data(), c.kv.data(),
                                   c.indices.data(), c.out.data(), c.lse.data(), &sB, &sH, &sDC, &sDP);
#else
    if (decode)
      mla_decode_naive<T>(c.qn.data(), c.qp.data(), c.ckv.data(), c.kpe.data(), c.kv.data(), c.indices.data(),
                          c.out.data(), c.lse.data(), B, H, DC, DP);
#endif
    else
      mla_prefill_naive<T>(c.qn.data(), c.qp.data(), c.ckv.data(), c.kpe.data(), c.qo.data(), c.kv.data(),
                           c.indices.data(), c.out.data(), c.lse.data(), B, Q, H, DC, DP);
  });
  return c.compare(what);
}

int main() {
  using bf = __nv_bfloat16;
  int bad = 0;
  bad += check<bf>("decode: lengths 1, 37, 200", {{1, 1}, {1, 37}, {1, 200}}, 300, true);
  bad += check<__half>("decode fp16", {{1, 90}, {1, 3}}, 120, true);
  bad += check<bf>("prefill: whole, chunked, single query", {{9, 9}, {5, 40}, {1, 17}}, 80, false);
  bad += check<__half>("prefill fp16", {{12, 30}}, 40, false);
  if (bad) { std::printf("%d mismatches\n", bad); return 1; }
  std::printf("mla naive seeds agree with the reference\n");
  return 0;
}
