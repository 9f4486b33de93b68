"""Reference for mla-paged-decode, in float64: DeepSeek-style multi-head latent attention in its absorbed form,
one decode step. Each sequence's query token attends, in every query head, to the compressed rows and the
rope rows of the pages its page list names (page size 1); the compressed rows are the keys' first part and
the values too.

q_nope (B, H, Dckv), q_pe (B, H, Dkpe); ckv_cache (P, 1, Dckv), kpe_cache (P, 1, Dkpe); kv_indptr (B + 1),
kv_indices (N), int32. Sequence b reads the pages kv_indices[kv_indptr[b] : kv_indptr[b + 1]] in that order.
With s_j = (q_nope[b, h] . ckv_cache[page_j, 0] + q_pe[b, h] . kpe_cache[page_j, 0]) * SM_SCALE:
  output[b, h] = sum_j softmax(s)_j ckv_cache[page_j, 0]
  lse[b, h]    = log2(sum_j exp(s_j))          (base 2, as FlashInfer reports it)
"""
import math

import numpy as np

# FlashInfer-Bench's mla_paged_decode_h16_ckv512_kpe64_ps1 names 1 / sqrt(128 + 64) as its default softmax
# scale: the head dimension before the weights are absorbed (128 of no-rope part, 64 of rope part).
SM_SCALE = 1.0 / math.sqrt(128 + 64)


def make_inputs(dims: dict[str, int], dtypes: dict[str, str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """q_nope, q_pe and the caches normal(0, 1). The N pages read are split among the B sequences at random
    (at least one each, some several times longer than others) and scattered over the P pages of the cache:
    no two sequences share a page, and a sequence's pages are in no particular order."""
    B, H, Dckv, Dkpe, N, P = (dims[n] for n in ("B", "H", "Dckv", "Dkpe", "N", "P"))
    if N < B or P < N:
        raise ValueError(f"need B <= N <= P (got B = {B}, N = {N}, P = {P})")

    def normal(shape: tuple[int, ...], name: str) -> np.ndarray:
        x = rng.standard_normal(shape, dtype=np.float32).astype(dtypes[name])
        x[x == 0] = np.finfo(x.dtype).tiny  # the format promises no exact zeros in float draws
        return x

    weights = rng.gamma(2.0, size=B)
    lengths = 1 + rng.multinomial(N - B, weights / weights.sum())
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = rng.permutation(P)[:N].astype(np.int32)
    return {
        "q_nope": normal((B, H, Dckv), "q_nope"),
        "q_pe": normal((B, H, Dkpe), "q_pe"),
        "ckv_cache": normal((P, 1, Dckv), "ckv_cache"),
        "kpe_cache": normal((P, 1, Dkpe), "kpe_cache"),
        "kv_indptr": indptr,
        "kv_indices": indices,
    }


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    B, H, Dckv, Dkpe = (dims[n] for n in ("B", "H", "Dckv", "Dkpe"))
    indptr = inputs["kv_indptr"].astype(np.int64)
    indices = inputs["kv_indices"].astype(np.int64)
    q_nope = inputs["q_nope"].astype(np.float64)
    q_pe = inputs["q_pe"].astype(np.float64)
    ckv = inputs["ckv_cache"].reshape(-1, Dckv)
    kpe = inputs["kpe_cache"].reshape(-1, Dkpe)
    output = np.empty((B, H, Dckv))
    lse = np.empty((B, H))
    for b in range(B):
        pages = indices[indptr[b]:indptr[b + 1]]
        if len(pages) == 0:
            raise ValueError(f"sequence {b} reads no page")
        kc = ckv[pages].astype(np.float64)  # (L, Dckv): keys' first part and the values
        kp = kpe[pages].astype(np.float64)  # (L, Dkpe)
        s = (q_nope[b] @ kc.T + q_pe[b] @ kp.T) * SM_SCALE  # (H, L)
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - m)
        total = e.sum(axis=-1, keepdims=True)
        output[b] = (e / total) @ kc
        lse[b] = ((m + np.log(total)) / np.log(2.0))[:, 0]
    return {"output": output, "lse": lse}


def dense(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """The same attention written plainly, one (sequence, head) at a time: the key row is the compressed row
    and the rope row end to end, the query likewise, a full softmax; for checking `reference` at small sizes."""
    B, H, Dckv = (dims[n] for n in ("B", "H", "Dckv"))
    output = np.zeros((B, H, Dckv))
    lse = np.zeros((B, H))
    for b in range(B):
        rows = [int(p) for p in inputs["kv_indices"][inputs["kv_indptr"][b]:inputs["kv_indptr"][b + 1]]]
        for h in range(H):
            q = np.concatenate([inputs["q_nope"][b, h], inputs["q_pe"][b, h]]).astype(np.float64)
            keys = [np.concatenate([inputs["ckv_cache"][p, 0], inputs["kpe_cache"][p, 0]]).astype(np.float64)
                    for p in rows]
            s = np.array([float(np.dot(q, k)) for k in keys]) / math.sqrt(192.0)
            w = np.exp(s) / np.exp(s).sum()
            output[b, h] = sum(wj * inputs["ckv_cache"][p, 0].astype(np.float64) for wj, p in zip(w, rows))
            lse[b, h] = np.log2(np.exp(s).sum())
    return {"output": output, "lse": lse}
