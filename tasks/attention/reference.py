"""Reference for attention: softmax(q k^T * scale + mask) v per (batch, query head), in float64.

q (B, Hq, Tq, D), k and v (B, Hkv, Tk, D), o (B, Hq, Tq, D); scale = 1 / sqrt(D).
GQA: query head h reads key/value head h // (Hq // Hkv).
CAUSAL = 1: the mask is aligned bottom-right (MLX's mask="causal"): query row i sees keys j <= i + (Tk - Tq),
so the last query row sees every key and a single query (decode) sees all of them.

The work is done in blocks of query rows for all the query heads that share a key/value head, so that
memory stays bounded (one block's scores) and, with CAUSAL = 1, the keys no row of a block can see are
never touched: the blocks are an exact rearrangement of the same sums, not an approximation.
"""
import numpy as np

_ROWS = 512  # query rows per block


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    B, Hq, Hkv, Tq, Tk, D = (dims[n] for n in ("B", "Hq", "Hkv", "Tq", "Tk", "D"))
    causal = bool(dims["CAUSAL"])
    if Hq % Hkv:
        raise ValueError(f"Hq = {Hq} is no multiple of Hkv = {Hkv}")
    if causal and Tq > Tk:
        raise ValueError(f"CAUSAL = 1 needs Tq <= Tk (got Tq = {Tq}, Tk = {Tk}): earlier rows would see no key")
    group = Hq // Hkv
    q = inputs["q"].reshape(B, Hkv, group, Tq, D)
    k = inputs["k"].reshape(B, Hkv, Tk, D)
    v = inputs["v"].reshape(B, Hkv, Tk, D)
    o = np.empty((B, Hkv, group, Tq, D))
    scale = 1.0 / np.sqrt(D)
    offset = Tk - Tq  # row i sees keys j <= i + offset
    for b in range(B):
        for g in range(Hkv):
            for r0 in range(0, Tq, _ROWS):
                r1 = min(Tq, r0 + _ROWS)
                kend = min(Tk, r1 - 1 + offset + 1) if causal else Tk  # keys any row of the block sees
                s = (q[b, g, :, r0:r1] * scale) @ k[b, g, :kend].T  # (group, rows, kend)
                if causal:
                    rows = np.arange(r0, r1)[:, None]
                    keys = np.arange(kend)[None, :]
                    s = np.where(keys <= rows + offset, s, -np.inf)
                s -= s.max(axis=-1, keepdims=True)
                np.exp(s, out=s)
                s /= s.sum(axis=-1, keepdims=True)
                o[b, g, :, r0:r1] = s @ v[b, g, :kend]
    return {"o": o.reshape(B, Hq, Tq, D)}


def dense(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """The same attention written plainly (full score matrices, K and V repeated for GQA); for checking
    `reference` at small sizes."""
    B, Hq, Hkv, Tq, Tk, D = (dims[n] for n in ("B", "Hq", "Hkv", "Tq", "Tk", "D"))
    k = np.repeat(inputs["k"].reshape(B, Hkv, Tk, D), Hq // Hkv, axis=1)
    v = np.repeat(inputs["v"].reshape(B, Hkv, Tk, D), Hq // Hkv, axis=1)
    s = inputs["q"].reshape(B, Hq, Tq, D) @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    if dims["CAUSAL"]:
        visible = np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + (Tk - Tq)
        s = np.where(visible, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return {"o": (p / p.sum(axis=-1, keepdims=True)) @ v}
