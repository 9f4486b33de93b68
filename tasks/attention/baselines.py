"""Baselines timed next to every attention candidate on the MLX targets.

Each receives q (B, Hq, Tq, D), k and v (B, Hkv, Tk, D) as mx.arrays in T and returns o (B, Hq, Tq, D) in T.

- mlx_sdpa: MLX's own fused attention, `mx.fast.scaled_dot_product_attention`, with GQA handled natively
  (K/V are not repeated) and mask="causal" (aligned bottom-right) when CAUSAL = 1. What it runs depends on
  the back-end: on Metal the "vector" kernel for Tq <= 8 and the steel flash-attention kernel above; on
  CUDA cuDNN's fused attention for fp16/bf16 (prefill, and decode too: a flash kernel then a reduction
  kernel under ncu with MLX 0.32.4 on the H200), MLX's sdpa_vector kernel where cuDNN is not used for
  Tq < 4, or the unfused matmul + softmax + matmul fallback (fp32 prefill).
- mlx_naive: the textbook composition: K and V repeated to Hq heads, scores = (q * scale) k^T in T, the
  mask added, softmax in float32, the probabilities cast back to T, then a matmul with v.
"""
import math

import mlx.core as mx


def mlx_sdpa(inputs: dict[str, mx.array], dims: dict[str, int]) -> dict[str, mx.array]:
    o = mx.fast.scaled_dot_product_attention(
        inputs["q"], inputs["k"], inputs["v"], scale=1.0 / math.sqrt(dims["D"]),
        mask="causal" if dims["CAUSAL"] else None,
    )
    return {"o": o}


def mlx_naive(inputs: dict[str, mx.array], dims: dict[str, int]) -> dict[str, mx.array]:
    Hq, Hkv, Tq, Tk, D = (dims[n] for n in ("Hq", "Hkv", "Tq", "Tk", "D"))
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    if Hq != Hkv:
        k = mx.repeat(k, Hq // Hkv, axis=1)
        v = mx.repeat(v, Hq // Hkv, axis=1)
    s = (q * (1.0 / math.sqrt(D))).astype(q.dtype) @ mx.swapaxes(k, -1, -2)  # (B, Hq, Tq, Tk) in T
    s = s.astype(mx.float32)
    if dims["CAUSAL"]:
        visible = mx.arange(Tk)[None, :] <= mx.arange(Tq)[:, None] + (Tk - Tq)
        s = mx.where(visible, s, -math.inf)
    p = mx.softmax(s, axis=-1).astype(q.dtype)
    return {"o": p @ v}
