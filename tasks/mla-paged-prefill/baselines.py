"""Baselines timed next to every mla-paged-prefill candidate on the cuda target.

Contract of the cuda target's baselines: each receives the task's inputs as torch.Tensors on the CUDA device,
in their real dtypes (what a candidate receives), and `dims`; it returns a dict of output tensors by name
(on the device; output in T, lse in float32).

Here: q_nope (Q, H, Dckv) and q_pe (Q, H, Dkpe), ckv_cache (P, 1, Dckv) and kpe_cache (P, 1, Dkpe) in T,
qo_indptr and kv_indptr (B + 1) and kv_indices (N) in int32; output (Q, H, Dckv) in T and lse (Q, H) in
float32, base 2. Query i of a sequence with Lq queries and Lkv pages sees its keys 0 .. Lkv - Lq + i.

- flashinfer_mla: FlashInfer's own MLA kernel, `flashinfer.mla.BatchMLAPagedAttentionWrapper` with
  causal=True (the kernel FlashInfer-Bench's definition stands for; its causal mask is aligned bottom-right
  as the definition's), planned once per input set (a serving engine plans once per step for all its layers), so the
  timed call is the run. Raises ImportError when FlashInfer
  is not installed.
- torch_gather_matmul: what a PyTorch program does without such a kernel: per sequence (the lengths read on
  the host, as a serving loop has them), gather its rows, then the logits, the causal mask, a softmax and the
  weighted sum as float32 matmuls over all its query tokens and heads at once.

Each imports torch (and FlashInfer) when called, so the task loads, and its candidates run, where they are
missing; a baseline that cannot run says why.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# As reference.py: FlashInfer-Bench's default for this definition, 1 / sqrt(128 + 64).
SM_SCALE = 1.0 / math.sqrt(128 + 64)
_WORKSPACE_BYTES = 128 * 1024 * 1024
# One planned wrapper per input set (keyed by its page-list tensors themselves), the oldest dropped past
# _MOST_PLANNED: the baselines' sets (at most 16) are planned once each, and the timed call is the run.
_wrappers: dict[Any, tuple[Any, dict[str, str]]] = {}
_MOST_PLANNED = 24
_kept: dict[Any, Any] = {}  # the tensors each key was made from (alive while planned: ids stay theirs)


def _flashinfer_wrapper(tensors: tuple[Any, Any], device: torch.device) -> tuple[Any, dict[str, str], bool]:
    """The wrapper of one input set (`tensors`: its page lists), and whether it is new (then to be planned): made, with its 128 MiB
    workspace, at the set's first call, since allocating and planning are no part of attention (a serving
    engine plans once per step for all its layers). With it, what `plan` must be told besides the shapes: newer
    FlashInfer (0.7.4) fixes the log-sum-exp's form at `plan` (`lse_mode`; left out, a deprecated fallback) and base 2
    is asked for there; older releases (0.2.14, 0.6.18) take no `lse_mode` and give base 2 whenever `run` asks."""
    try:
        import flashinfer
    except ImportError as e:
        raise ImportError(
            "the flashinfer_mla baseline needs FlashInfer (`pip install flashinfer-python`); "
            f"`import flashinfer` failed: {e}") from e
    # The set's own page-list tensors: a later set at a reused address, or another object, is planned afresh.
    key = (id(tensors[0]), id(tensors[1]))
    kept = _kept.get(key)
    fresh = kept is None or kept[0] is not tensors[0] or kept[1] is not tensors[1]
    _kept[key] = tensors
    if key not in _wrappers:
        import inspect

        import torch

        workspace = torch.zeros(_WORKSPACE_BYTES, dtype=torch.int8, device=device)
        wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="auto")
        extra = {"lse_mode": "base2"} if "lse_mode" in inspect.signature(wrapper.plan).parameters else {}
        _wrappers[key] = (wrapper, extra)
        while len(_wrappers) > _MOST_PLANNED:
            old = next(iter(_wrappers))
            del _wrappers[old]
            _kept.pop(old, None)
    return (*_wrappers[key], fresh)


def flashinfer_mla(inputs: dict[str, torch.Tensor], dims: dict[str, int]) -> dict[str, torch.Tensor]:
    import torch

    q_nope, q_pe = inputs["q_nope"], inputs["q_pe"]
    kv_indptr = inputs["kv_indptr"]
    wrapper, extra, fresh = _flashinfer_wrapper((inputs["kv_indptr"], inputs["kv_indices"]), q_nope.device)
    if fresh:
        wrapper.plan(
            qo_indptr=inputs["qo_indptr"],
            kv_indptr=kv_indptr,
            kv_indices=inputs["kv_indices"],
            kv_len_arr=(kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32),
            num_heads=dims["H"],
            head_dim_ckv=dims["Dckv"],
            head_dim_kpe=dims["Dkpe"],
            page_size=1,
            causal=True,
            sm_scale=SM_SCALE,
            q_data_type=q_nope.dtype,
            kv_data_type=inputs["ckv_cache"].dtype,
            **extra,
        )
    # By name: 0.7.4 deprecates positional tensors here; the names are those of 0.2.14 to 0.7.4.
    output, lse = wrapper.run(q_nope=q_nope, q_pe=q_pe, ckv_cache=inputs["ckv_cache"], kpe_cache=inputs["kpe_cache"],
                              return_lse=True)
    return {"output": output, "lse": lse}


def torch_gather_matmul(inputs: dict[str, torch.Tensor], dims: dict[str, int]) -> dict[str, torch.Tensor]:
    import torch

    B, H, Dckv, Dkpe = (dims[n] for n in ("B", "H", "Dckv", "Dkpe"))
    q_nope, q_pe = inputs["q_nope"], inputs["q_pe"]
    device = q_nope.device
    qo = inputs["qo_indptr"].tolist()
    kv = inputs["kv_indptr"].tolist()
    indices = inputs["kv_indices"].long()
    ckv_all = inputs["ckv_cache"].reshape(-1, Dckv)
    kpe_all = inputs["kpe_cache"].reshape(-1, Dkpe)
    output = torch.empty_like(q_nope)
    lse = torch.empty(q_nope.shape[:2], dtype=torch.float32, device=device)
    for b in range(B):
        lq, lkv = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
        pages = indices[kv[b]:kv[b + 1]]
        ckv = ckv_all[pages].float()  # (Lkv, Dckv)
        kpe = kpe_all[pages].float()
        qn = q_nope[qo[b]:qo[b + 1]].float().reshape(lq * H, Dckv)
        qp = q_pe[qo[b]:qo[b + 1]].float().reshape(lq * H, Dkpe)
        s = ((qn @ ckv.T + qp @ kpe.T) * SM_SCALE).reshape(lq, H, lkv)
        hidden = torch.arange(lkv, device=device)[None, :] > (torch.arange(lq, device=device)[:, None] + (lkv - lq))
        s = s.masked_fill(hidden[:, None, :], float("-inf"))
        lse[qo[b]:qo[b + 1]] = torch.logsumexp(s, dim=-1) / math.log(2.0)
        p = torch.softmax(s, dim=-1).reshape(lq * H, lkv)
        output[qo[b]:qo[b + 1]] = (p @ ckv).reshape(lq, H, Dckv).to(output.dtype)
    return {"output": output, "lse": lse}
