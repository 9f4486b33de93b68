"""Baselines timed next to every gqa-paged-decode candidate on the MLX targets.

Each receives q (B, Hq, D), k_cache and v_cache (P, 1, Hkv, D) in T, kv_indptr (B + 1) and kv_indices (N)
in int32, as mx.arrays, and returns o (B, Hq, D) in T and lse (B, Hq) in float32.

- mlx_gather_sdpa: what an MLX program does today, MLX having no paged attention: gather the pages of
  every sequence into one contiguous array (`mx.take`), then per sequence MLX's fused attention
  (`mx.fast.scaled_dot_product_attention`, GQA native) on its keys and values, and its log-sum-exp from
  the scores. The sequence lengths are read on the host (a serving loop has them there).
"""
import math

import mlx.core as mx
import numpy as np


def mlx_gather_sdpa(inputs: dict[str, mx.array], dims: dict[str, int]) -> dict[str, mx.array]:
    B, Hkv, D = dims["B"], dims["Hkv"], dims["D"]
    scale = 1.0 / math.sqrt(D)
    indptr = np.array(inputs["kv_indptr"]).tolist()
    q = inputs["q"]
    k = mx.take(inputs["k_cache"].reshape(-1, Hkv, D), inputs["kv_indices"], axis=0)  # (N, Hkv, D)
    v = mx.take(inputs["v_cache"].reshape(-1, Hkv, D), inputs["kv_indices"], axis=0)
    outs, lses = [], []
    for b in range(B):
        kb = mx.swapaxes(k[indptr[b]:indptr[b + 1]], 0, 1)[None]  # (1, Hkv, L, D)
        vb = mx.swapaxes(v[indptr[b]:indptr[b + 1]], 0, 1)[None]
        qb = q[b][None, :, None, :]  # (1, Hq, 1, D)
        outs.append(mx.fast.scaled_dot_product_attention(qb, kb, vb, scale=scale)[0, :, 0, :])
        group = qb.shape[1] // Hkv
        s = (qb.reshape(1, Hkv, group, D).astype(mx.float32) * scale) @ mx.swapaxes(kb, -1, -2).astype(mx.float32)
        lses.append(mx.logsumexp(s, axis=-1).reshape(-1) / math.log(2.0))
    return {"o": mx.stack(outs), "lse": mx.stack(lses)}
