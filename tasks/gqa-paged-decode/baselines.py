"""Baselines timed next to every gqa-paged-decode candidate on the MLX targets.

Each receives q (B, Hq, D), k_cache and v_cache (P, 1, Hkv, D) in T, kv_indptr (B + 1) and kv_indices (N)
in int32, as mx.arrays, and returns o (B, Hq, D) in T and lse (B, Hq) in float32.

- mlx_gather_sdpa: what an MLX program does today, MLX having no paged attention: gather the pages of
  every sequence into one contiguous array (`mx.take`), then per sequence MLX's fused attention
  (`mx.fast.scaled_dot_product_attention`, GQA native) on its keys and values, and its log-sum-exp from
  the scores. The sequence lengths are read on the host (a serving loop has them there).

On the cuda target each receives the same inputs as torch.Tensors on the device in their real dtypes, and
returns torch tensors:

- flashinfer_decode: FlashInfer's own paged decode (`flashinfer.BatchDecodeWithPagedKVCacheWrapper`, the kernel
  FlashInfer-Bench's definition stands for; the caches are its NHD layout with pages of one token), planned and
  run at every call (each input set brings its own page lists; a serving engine plans once per step for all its
  layers). Raises ImportError when FlashInfer is not installed.
- torch_gather_sdpa: what a PyTorch program does without such a kernel: every sequence's rows gathered into one
  padded batch (the lengths read on the host), then PyTorch's fused attention with a padding mask, and the
  log-sum-exp from float32 scores.

Each framework is imported by the baselines that use it: a worker of one target needs only its own.
"""
import math
from typing import Any

import numpy as np

_WORKSPACE_BYTES = 128 * 1024 * 1024
_wrappers: dict[Any, Any] = {}


def mlx_gather_sdpa(inputs: dict[str, Any], dims: dict[str, int]) -> dict[str, Any]:
    import mlx.core as mx

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


def _flashinfer_wrapper(device: Any) -> Any:
    """One decode wrapper (and its 128 MiB workspace) per device, made at the first call: allocating the
    workspace is no part of attention."""
    try:
        import flashinfer
    except ImportError as e:
        raise ImportError("the flashinfer_decode baseline needs FlashInfer (`pip install flashinfer-python`); "
                          f"`import flashinfer` failed: {e}") from e
    import torch

    if device not in _wrappers:
        workspace = torch.zeros(_WORKSPACE_BYTES, dtype=torch.int8, device=device)
        _wrappers[device] = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    return _wrappers[device]


def flashinfer_decode(inputs: dict[str, Any], dims: dict[str, int]) -> dict[str, Any]:
    import torch

    q = inputs["q"]
    wrapper = _flashinfer_wrapper(q.device)
    B = dims["B"]
    wrapper.plan(inputs["kv_indptr"], inputs["kv_indices"], torch.ones(B, dtype=torch.int32, device=q.device),
                 dims["Hq"], dims["Hkv"], dims["D"], 1, q_data_type=q.dtype, kv_data_type=inputs["k_cache"].dtype)
    o, lse = wrapper.run(q, (inputs["k_cache"], inputs["v_cache"]), return_lse=True)
    return {"o": o, "lse": lse}


def torch_gather_sdpa(inputs: dict[str, Any], dims: dict[str, int]) -> dict[str, Any]:
    import torch

    B, Hq, Hkv, D = dims["B"], dims["Hq"], dims["Hkv"], dims["D"]
    indptr = inputs["kv_indptr"].long()
    lengths = indptr[1:] - indptr[:-1]
    longest = int(lengths.max().item())
    pos = torch.arange(longest, device=indptr.device)
    valid = pos[None, :] < lengths[:, None]  # (B, Lmax)
    slot = torch.clamp(indptr[:-1, None] + pos[None, :], max=inputs["kv_indices"].numel() - 1)
    pages = inputs["kv_indices"].long()[slot]  # (B, Lmax); padding reads some page, masked below
    k = inputs["k_cache"].reshape(-1, Hkv, D)[pages].transpose(1, 2)  # (B, Hkv, Lmax, D)
    v = inputs["v_cache"].reshape(-1, Hkv, D)[pages].transpose(1, 2)
    q = inputs["q"][:, :, None, :]  # (B, Hq, 1, D)
    mask = valid[:, None, None, :]
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)[:, :, 0, :]
    s = (q.reshape(B, Hkv, Hq // Hkv, D).float() @ k.float().transpose(-1, -2)) / math.sqrt(D)
    s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1).reshape(B, Hq) / math.log(2.0)
    return {"o": o, "lse": lse}
