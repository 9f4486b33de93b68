"""Reference for gqa-paged-decode, in float64: each sequence's one query token attends to the key and value
rows of the pages its page list names (page size 1), over every query head.

q (B, Hq, D); k_cache, v_cache (P, 1, Hkv, D); kv_indptr (B + 1), kv_indices (N), int32. Sequence b reads
the pages kv_indices[kv_indptr[b] : kv_indptr[b + 1]] in that order; query head h reads key/value head
h // (Hq // Hkv). With s_j = (q[b, h] . k_cache[page_j, 0, g]) / sqrt(D):
  o[b, h]   = sum_j softmax(s)_j v_cache[page_j, 0, g]
  lse[b, h] = log2(sum_j exp(s_j))          (base 2, as FlashInfer reports it)
"""
import numpy as np


def make_inputs(dims: dict[str, int], dtypes: dict[str, str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """q and the caches normal(0, 1). The N pages read are split among the B sequences at random (at least
    one each, some several times longer than others) and scattered over the P pages of the cache: no two
    sequences share a page, and a sequence's pages are in no particular order."""
    B, Hq, Hkv, D, N, P = (dims[n] for n in ("B", "Hq", "Hkv", "D", "N", "P"))
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
        "q": normal((B, Hq, D), "q"),
        "k_cache": normal((P, 1, Hkv, D), "k_cache"),
        "v_cache": normal((P, 1, Hkv, D), "v_cache"),
        "kv_indptr": indptr,
        "kv_indices": indices,
    }


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    B, Hq, Hkv, D = (dims[n] for n in ("B", "Hq", "Hkv", "D"))
    if Hq % Hkv:
        raise ValueError(f"Hq = {Hq} is no multiple of Hkv = {Hkv}")
    group = Hq // Hkv
    indptr = inputs["kv_indptr"].astype(np.int64)
    indices = inputs["kv_indices"].astype(np.int64)
    q = inputs["q"].astype(np.float64).reshape(B, Hkv, group, D)
    k = inputs["k_cache"].reshape(-1, Hkv, D)
    v = inputs["v_cache"].reshape(-1, Hkv, D)
    o = np.empty((B, Hkv, group, D))
    lse = np.empty((B, Hkv, group))
    scale = 1.0 / np.sqrt(D)
    for b in range(B):
        pages = indices[indptr[b]:indptr[b + 1]]
        if len(pages) == 0:
            raise ValueError(f"sequence {b} reads no page")
        kb = k[pages].astype(np.float64)  # (L, Hkv, D)
        vb = v[pages].astype(np.float64)
        for g in range(Hkv):
            s = (q[b, g] @ kb[:, g].T) * scale  # (group, L)
            m = s.max(axis=-1, keepdims=True)
            e = np.exp(s - m)
            total = e.sum(axis=-1, keepdims=True)
            o[b, g] = (e / total) @ vb[:, g]
            lse[b, g] = ((m + np.log(total)) / np.log(2.0))[:, 0]
    return {"o": o.reshape(B, Hq, D), "lse": lse.reshape(B, Hq)}


def dense(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """The same attention written plainly, one (sequence, head) at a time with a full softmax; for checking
    `reference` at small sizes."""
    B, Hq, Hkv, D = (dims[n] for n in ("B", "Hq", "Hkv", "D"))
    o = np.zeros((B, Hq, D))
    lse = np.zeros((B, Hq))
    for b in range(B):
        for h in range(Hq):
            g = h // (Hq // Hkv)
            rows = [int(p) for p in inputs["kv_indices"][inputs["kv_indptr"][b]:inputs["kv_indptr"][b + 1]]]
            s = np.array([float(np.dot(inputs["q"][b, h].astype(np.float64),
                                       inputs["k_cache"][p, 0, g].astype(np.float64))) for p in rows]) / np.sqrt(D)
            w = np.exp(s) / np.exp(s).sum()
            o[b, h] = sum(wj * inputs["v_cache"][p, 0, g].astype(np.float64) for wj, p in zip(w, rows))
            lse[b, h] = np.log2(np.exp(s).sum())
    return {"o": o, "lse": lse}
