"""Stand-ins for shipped cuda seeds' kernels on fake_cupy's device (numpy), for end-to-end runs of the cuda target
through the ksearch binary on a machine without an NVIDIA GPU (tests/testsuite/cuda_target.rs): what those runs
check is the plumbing (the compile request with the candidate's files, the real NVRTC modules, launches with
the plan's arguments, the worker's checks and timing, the result the Rust side reads), not the kernels.
Importing this module registers them."""

from __future__ import annotations

from typing import Any

import fake_cupy
import numpy as np


def _floats(a: np.ndarray) -> np.ndarray:
    """A device array's values as float32 (bfloat16 held as its 16-bit patterns)."""
    return (a.astype(np.uint32) << 16).view(np.float32) if a.dtype == np.uint16 else a.astype(np.float32)


def _store(dst: np.ndarray, values: np.ndarray) -> None:
    if dst.dtype == np.uint16:  # bfloat16: round to nearest even, as __float2bfloat16 does
        bits = values.astype(np.float32).view(np.uint32)
        dst[...] = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).reshape(dst.shape)
    else:
        dst[...] = values.astype(dst.dtype).reshape(dst.shape)


def paged_decode_naive(args: list[Any], grid: Any, block: Any, shared: int) -> None:
    """gqa-paged-decode's naive seed: (q, k_cache, v_cache, kv_indptr, kv_indices, o, lse, B, Hq, Hkv, D)."""
    q, k, v, indptr, indices, o, lse = (a.a for a in args[:7])
    B, Hq, Hkv, D = (int(x) for x in args[7:])
    assert tuple(grid) == (-(-32 * B * Hq // block[0]), 1, 1), (grid, block)
    qf = _floats(q).reshape(B, Hkv, Hq // Hkv, D)
    kf, vf = _floats(k).reshape(-1, Hkv, D), _floats(v).reshape(-1, Hkv, D)
    out = np.empty((B, Hkv, Hq // Hkv, D), dtype=np.float32)
    lses = np.empty((B, Hkv, Hq // Hkv), dtype=np.float32)
    for b in range(B):
        pages = indices[indptr[b]:indptr[b + 1]]
        for g in range(Hkv):
            s = qf[b, g] @ kf[pages, g].T / np.sqrt(D)
            m = s.max(axis=-1, keepdims=True)
            e = np.exp(s - m)
            out[b, g] = (e / e.sum(axis=-1, keepdims=True)) @ vf[pages, g]
            lses[b, g] = ((m[:, 0] + np.log(e.sum(axis=-1))) / np.log(2.0))
    _store(o, out)
    lse[...] = lses.reshape(lse.shape)


fake_cupy.KERNELS["paged_decode_naive"] = paged_decode_naive
