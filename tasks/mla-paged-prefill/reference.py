"""Reference for mla-paged-prefill, in float64: DeepSeek-style multi-head latent attention in its absorbed form,
incremental prefill with a causal mask. Each sequence brings a run of query tokens and attends, in every query
head, to the compressed rows and rope rows of the pages its page list names (page size 1); the compressed
rows are the keys' first part and the values too.

q_nope (Q, H, Dckv), q_pe (Q, H, Dkpe); ckv_cache (P, 1, Dckv), kpe_cache (P, 1, Dkpe); qo_indptr (B + 1),
kv_indptr (B + 1), kv_indices (N), int32. Sequence b owns the query tokens qo_indptr[b] : qo_indptr[b + 1]
(Lq of them) and reads the pages kv_indices[kv_indptr[b] : kv_indptr[b + 1]] (Lkv of them, Lkv >= Lq) in that
order. Its queries are its last Lq tokens: query i (0-based within the sequence) sees keys j <= Lkv - Lq + i,
so the last query sees every key. With s_j = (q_nope[t, h] . ckv_cache[page_j, 0] + q_pe[t, h] .
kpe_cache[page_j, 0]) * SM_SCALE over the keys token t sees:
  output[t, h] = sum_j softmax(s)_j ckv_cache[page_j, 0]
  lse[t, h]    = log2(sum_j exp(s_j))          (base 2, as FlashInfer reports it)

The work is done in blocks of query rows, so that memory stays bounded (one block's logits) and the keys no
row of a block can see are never touched: an exact rearrangement of the same sums.
"""
import math

import numpy as np

# FlashInfer-Bench's mla_paged_prefill_causal_h16_ckv512_kpe64_ps1 names 1 / sqrt(128 + 64) as its default
# softmax scale: the head dimension before the weights are absorbed (128 of no-rope part, 64 of rope part).
SM_SCALE = 1.0 / math.sqrt(128 + 64)
_ROWS = 128  # query rows per block


def make_inputs(dims: dict[str, int], dtypes: dict[str, str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """q_nope, q_pe and the caches normal(0, 1). The Q query tokens are split among the B sequences at random
    (at least one each, some several times longer than others); each sequence reads its queries' own pages
    plus a cached prefix, the N - Q prefix pages split among the sequences at random too (none for some: a
    plain prefill; most of a sequence for others: a chunk of a long prompt, or a decode when Lq = 1). The
    pages are scattered over the P pages of the cache: no two sequences share a page, and a sequence's pages
    are in no particular order."""
    B, H, Dckv, Dkpe, Q, N, P = (dims[n] for n in ("B", "H", "Dckv", "Dkpe", "Q", "N", "P"))
    if not B <= Q <= N <= P:
        raise ValueError(f"need B <= Q <= N <= P (got B = {B}, Q = {Q}, N = {N}, P = {P})")

    def normal(shape: tuple[int, ...], name: str) -> np.ndarray:
        x = rng.standard_normal(shape, dtype=np.float32).astype(dtypes[name])
        x[x == 0] = np.finfo(x.dtype).tiny  # the format promises no exact zeros in float draws
        return x

    def split(total: int, at_least: int) -> np.ndarray:
        weights = rng.gamma(2.0, size=B)
        return at_least + rng.multinomial(total - at_least * B, weights / weights.sum())

    q_lengths = split(Q, 1)
    kv_lengths = q_lengths + split(N - Q, 0)
    return {
        "q_nope": normal((Q, H, Dckv), "q_nope"),
        "q_pe": normal((Q, H, Dkpe), "q_pe"),
        "ckv_cache": normal((P, 1, Dckv), "ckv_cache"),
        "kpe_cache": normal((P, 1, Dkpe), "kpe_cache"),
        "qo_indptr": np.concatenate([[0], np.cumsum(q_lengths)]).astype(np.int32),
        "kv_indptr": np.concatenate([[0], np.cumsum(kv_lengths)]).astype(np.int32),
        "kv_indices": rng.permutation(P)[:N].astype(np.int32),
    }


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    B, H, Dckv, Dkpe, Q = (dims[n] for n in ("B", "H", "Dckv", "Dkpe", "Q"))
    qo_indptr = inputs["qo_indptr"].astype(np.int64)
    kv_indptr = inputs["kv_indptr"].astype(np.int64)
    indices = inputs["kv_indices"].astype(np.int64)
    q_nope = inputs["q_nope"].astype(np.float64)
    q_pe = inputs["q_pe"].astype(np.float64)
    ckv = inputs["ckv_cache"].reshape(-1, Dckv)
    kpe = inputs["kpe_cache"].reshape(-1, Dkpe)
    output = np.empty((Q, H, Dckv))
    lse = np.empty((Q, H))
    for b in range(B):
        q0, q1 = qo_indptr[b], qo_indptr[b + 1]
        pages = indices[kv_indptr[b]:kv_indptr[b + 1]]
        lq, lkv = q1 - q0, len(pages)
        if lq < 1 or lkv < lq:
            raise ValueError(f"sequence {b} has {lq} query tokens and {lkv} pages: need 1 <= queries <= pages")
        offset = lkv - lq  # query i sees keys j <= i + offset
        kc = ckv[pages].astype(np.float64)  # (Lkv, Dckv): keys' first part and the values
        kp = kpe[pages].astype(np.float64)  # (Lkv, Dkpe)
        for r0 in range(0, lq, _ROWS):
            r1 = min(lq, r0 + _ROWS)
            kend = r1 - 1 + offset + 1  # keys the block's last row sees, and so every key any row sees
            rows = r1 - r0
            qn = q_nope[q0 + r0:q0 + r1].reshape(rows * H, Dckv)
            qp = q_pe[q0 + r0:q0 + r1].reshape(rows * H, Dkpe)
            s = ((qn @ kc[:kend].T + qp @ kp[:kend].T) * SM_SCALE).reshape(rows, H, kend)
            visible = np.arange(kend)[None, :] <= np.arange(r0, r1)[:, None] + offset  # (rows, kend)
            s = np.where(visible[:, None, :], s, -np.inf)
            m = s.max(axis=-1, keepdims=True)
            e = np.exp(s - m)
            total = e.sum(axis=-1, keepdims=True)
            output[q0 + r0:q0 + r1] = ((e / total).reshape(rows * H, kend) @ kc[:kend]).reshape(rows, H, Dckv)
            lse[q0 + r0:q0 + r1] = ((m + np.log(total)) / np.log(2.0))[..., 0]
    return {"output": output, "lse": lse}


def dense(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """The same attention written plainly, one (query token, head) at a time: the token's position found by
    walking the sequences, its visible keys listed one by one (the first Lkv - Lq + i + 1 of the sequence's
    pages), the key row being the compressed row and the rope row end to end, a full softmax; for checking
    `reference` at small sizes."""
    B, H, Dckv, Q = (dims[n] for n in ("B", "H", "Dckv", "Q"))
    output = np.zeros((Q, H, Dckv))
    lse = np.zeros((Q, H))
    qo, kv, idx = inputs["qo_indptr"], inputs["kv_indptr"], inputs["kv_indices"]
    for t in range(Q):
        b = next(b for b in range(B) if qo[b] <= t < qo[b + 1])
        i = t - int(qo[b])
        lq, lkv = int(qo[b + 1] - qo[b]), int(kv[b + 1] - kv[b])
        rows = [int(p) for p in idx[kv[b]:kv[b] + (lkv - lq + i + 1)]]
        for h in range(H):
            q = np.concatenate([inputs["q_nope"][t, h], inputs["q_pe"][t, h]]).astype(np.float64)
            keys = [np.concatenate([inputs["ckv_cache"][p, 0], inputs["kpe_cache"][p, 0]]).astype(np.float64)
                    for p in rows]
            s = np.array([float(np.dot(q, k)) for k in keys]) / math.sqrt(192.0)
            w = np.exp(s) / np.exp(s).sum()
            output[t, h] = sum(wj * inputs["ckv_cache"][p, 0].astype(np.float64) for wj, p in zip(w, rows))
            lse[t, h] = np.log2(np.exp(s).sum())
    return {"output": output, "lse": lse}
