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
  FlashInfer-Bench's definition stands for; the caches are its NHD layout with pages of one token), planned once
  per input set (a serving engine plans once per step for all its layers), so the timed call is the run. Raises
  ImportError when FlashInfer is not installed.
- torch_gather_sdpa: what a PyTorch program does without such a kernel: every sequence's rows gathered into one
  padded batch (the lengths read on the host), then PyTorch's fused attention with a padding mask, and the
  log-sum-exp from float32 scores.

Each framework is imported by the baselines that use it: a worker of one target needs only its own.
"""
import math
from typing import Any

import numpy as np

_WORKSPACE_BYTES = 128 * 1024 * 1024
# One planned decode wrapper per input set (keyed by its page-list tensors themselves), the oldest dropped past
# _MOST_PLANNED: the baselines' sets (at most 16) are planned once each.
_wrappers: dict[Any, Any] = {}
_MOST_PLANNED = 24
_kept: dict[Any, Any] = {}  # the tensors each key was made from (alive while planned: ids stay theirs)


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


def _flashinfer_wrapper(tensors: tuple[Any, Any], device: Any) -> tuple[Any, bool]:
    """The decode wrapper of one input set (`tensors`: its page lists), and whether it is new (then to be planned): made, with its
    128 MiB workspace, at the set's first call, since allocating and planning are no part of attention."""
    try:
        import flashinfer
    except ImportError as e:
        raise ImportError("the flashinfer_decode baseline needs FlashInfer (`pip install flashinfer-python`); "
                          f"`import flashinfer` failed: {e}") from e
    import torch

    # The set's own page-list tensors: a later set at a reused address, or another object, is planned afresh.
    key = (id(tensors[0]), id(tensors[1]))
    kept = _kept.get(key)
    fresh = kept is None or kept[0] is not tensors[0] or kept[1] is not tensors[1]
    _kept[key] = tensors
    if key not in _wrappers:
        workspace = torch.zeros(_WORKSPACE_BYTES, dtype=torch.int8, device=device)
        _wrappers[key] = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
        while len(_wrappers) > _MOST_PLANNED:
            old = next(iter(_wrappers))
            del _wrappers[old]
            _kept.pop(old, None)
    return _wrappers[key], fresh


def flashinfer_decode(inputs: dict[str, Any], dims: dict[str, int]) -> dict[str, Any]:
    import torch

    q = inputs["q"]
    wrapper, fresh = _flashinfer_wrapper((inputs["kv_indptr"], inputs["kv_indices"]), q.device)
    B = dims["B"]
    if fresh:
        # The options after page_size by name: 0.6.18 and 0.7.4 deprecate them by position (0.2.14 takes both).
        wrapper.plan(inputs["kv_indptr"], inputs["kv_indices"], torch.ones(B, dtype=torch.int32, device=q.device),
                     dims["Hq"], dims["Hkv"], dims["D"], 1, q_data_type=q.dtype,
                     kv_data_type=inputs["k_cache"].dtype)
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
