"""Baselines timed next to every mla-paged-decode candidate on the cuda target.

Contract of the cuda target's baselines: each receives the task's inputs as torch.Tensors on the CUDA device,
in their real dtypes (what a candidate receives), and `dims`; it returns a dict of output tensors by name
(on the device; output in T, lse in float32).

Here: q_nope (B, H, Dckv) and q_pe (B, H, Dkpe), ckv_cache (P, 1, Dckv) and kpe_cache (P, 1, Dkpe) in T,
kv_indptr (B + 1) and kv_indices (N) in int32; output (B, H, Dckv) in T and lse (B, H) in float32, base 2.

- flashinfer_mla: FlashInfer's own MLA kernel, `flashinfer.mla.BatchMLAPagedAttentionWrapper` (the kernel
  FlashInfer-Bench's definition stands for), planned once per input set (a serving engine plans once per
  step for all its layers), so the timed call is the run. Raises ImportError when FlashInfer is not
  installed.
- torch_gather_matmul: what a PyTorch program does without such a kernel: gather every sequence's rows into
  one padded batch (the lengths read on the host, as a serving loop has them), then the logits, a masked
  softmax and the weighted sum as float32 batched matmuls.

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
    B = dims["B"]
    if fresh:
        qo_indptr = torch.arange(B + 1, dtype=torch.int32, device=q_nope.device)  # one query token each
        wrapper.plan(
            qo_indptr=qo_indptr,
            kv_indptr=kv_indptr,
            kv_indices=inputs["kv_indices"],
            kv_len_arr=(kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32),
            num_heads=dims["H"],
            head_dim_ckv=dims["Dckv"],
            head_dim_kpe=dims["Dkpe"],
            page_size=1,
            causal=False,
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
    kv_indptr = inputs["kv_indptr"].long()
    device = kv_indptr.device
    lengths = kv_indptr[1:] - kv_indptr[:-1]
    longest = int(lengths.max().item())
    pos = torch.arange(longest, device=device)
    valid = pos[None, :] < lengths[:, None]  # (B, Lmax)
    slot = torch.clamp(kv_indptr[:-1, None] + pos[None, :], max=inputs["kv_indices"].numel() - 1)
    pages = inputs["kv_indices"].long()[slot]  # (B, Lmax); padding reads some page, masked below
    ckv = inputs["ckv_cache"].reshape(-1, Dckv)[pages].float()  # (B, Lmax, Dckv)
    kpe = inputs["kpe_cache"].reshape(-1, Dkpe)[pages].float()
    s = torch.bmm(inputs["q_nope"].float(), ckv.transpose(1, 2)) + torch.bmm(inputs["q_pe"].float(), kpe.transpose(1, 2))
    s = (s * SM_SCALE).masked_fill(~valid[:, None, :], float("-inf"))  # (B, H, Lmax)
    lse = torch.logsumexp(s, dim=-1)
    output = torch.bmm(torch.softmax(s, dim=-1), ckv)
    return {"output": output.to(inputs["q_nope"].dtype), "lse": lse / math.log(2.0)}
