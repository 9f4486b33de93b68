"""Comparing a kernel's outputs with the reference, and catching kernels that write where they must not."""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .arrays import Slot, as_float64, describe_poison, guard_intact, poison_mask, poison_scalar


@dataclass
class OutputCheck:
    name: str
    max_abs: float
    max_rel: float
    worst_index: list[int] | None
    mismatches: int
    unwritten: int
    problem: str | None  # this output's part of the `wrong` message; None when it passed

    def to_json(self) -> dict[str, Any]:
        return {
            "max_abs": self.max_abs, "max_rel": self.max_rel, "worst_index": self.worst_index,
            "mismatches": self.mismatches, "unwritten": self.unwritten,
        }


def _index(flat: int, shape: tuple[int, ...]) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def _passes_quickly(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> OutputCheck | None:
    """The common case in a few passes: float outputs of at most 32 bits against a reference kept in float32
    (pool.py), every element finite and within tolerance. Computed in float32, whose rounding of the
    difference (half an ulp) is far below any tolerance of such outputs; None when any element needs the
    full comparison (a NaN, an unwritten element, one out of tolerance)."""
    if got.dtype.kind != "f" or got.dtype.itemsize > 4 or np.asarray(expected).dtype != np.float32 or not got.size:
        return None
    # Flat views where the arrays allow it; each block is converted to float32 in its own thread (a half
    # output of 16M elements took 20 ms to convert in one pass, more than the comparison).
    val = got.reshape(-1)
    exp = np.asarray(expected).reshape(-1)
    if val.size != exp.size:
        return None
    # In blocks of a few MB on every core (numpy lets go of the GIL): a large output (an SSD's 33M elements)
    # is compared in a fraction of the time one pass over whole arrays takes.
    bounds = [(lo, min(lo + _BLOCK, val.size)) for lo in range(0, val.size, _BLOCK)]
    parts = list(_pool().map(lambda b: _block(val, exp, b[0], b[1], atol, rtol), bounds)) if len(bounds) > 1 \
        else [_block(val, exp, 0, val.size, atol, rtol)]
    if any(p is None for p in parts):
        return None  # NaN, or out of tolerance: the full comparison says where
    done = [p for p in parts if p is not None]
    worst_diff, first = max((p[0], -p[1]) for p in done)  # the first of equal differences, as argmax
    worst = -first
    significant = [p[2] for p in done if p[2] is not None]
    rel = max(significant) if significant else max(p[3] for p in done)
    return OutputCheck("", float(worst_diff), float(rel), _index(worst, got.shape), 0, 0, None)


_BLOCK = 1 << 20
_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = concurrent.futures.ThreadPoolExecutor(max(1, min(16, os.cpu_count() or 1)))
    return _POOL


def _block(val: np.ndarray, exp: np.ndarray, lo: int, hi: int, atol: float,
           rtol: float) -> tuple[float, int, float | None, float] | None:
    """One block of the quick comparison: None when an element fails (or is NaN); else the largest difference
    and its index, the largest relative error over elements above atol (None when there are none there), and
    over every nonzero one."""
    v, e = val[lo:hi].astype(np.float32, copy=False), exp[lo:hi]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(v - e)
        aexp = np.abs(e)
        if not bool(np.all(diff <= atol + rtol * aexp)):  # NaN anywhere fails this
            return None
        rel = diff / aexp  # inf or NaN where |e| is 0: masked below
    i = int(np.argmax(diff))
    significant = aexp > atol
    over = float(rel[significant].max()) if significant.any() else None
    nonzero = aexp > 0
    anywhere = float(rel[nonzero].max()) if nonzero.any() else 0.0
    return float(diff[i]), lo + i, over, anywhere


def compare(name: str, got: np.ndarray, expected: np.ndarray, atol: float, rtol: float,
            any_nan_is_poison: bool = False) -> OutputCheck:
    """Element-wise |got - expected| <= atol + rtol * |expected| (in float64, or in float32 for passing
    outputs of 32 bits or fewer); NaN matches NaN.

    `any_nan_is_poison`: the outputs were poisoned with a plain NaN (MLX fills them itself and keeps no
    payload), so every NaN where the reference has a number counts as unwritten."""
    quick = _passes_quickly(got, expected, atol, rtol)
    if quick is not None:
        quick.name = name
        return quick
    exp = np.asarray(expected, dtype=np.float64)
    val = as_float64(got)
    # Where the reference itself expects NaN or the integer poison, a poisoned element is a correct one.
    exp_poison = np.isnan(exp) if got.dtype.kind == "f" else exp == float(poison_scalar(got.dtype))
    plain_nan = any_nan_is_poison and got.dtype.kind == "f"
    unwritten = (np.isnan(val) if plain_nan else poison_mask(got)) & ~exp_poison
    written = ~unwritten
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(val - exp)
        tol = atol + rtol * np.abs(exp)
        ok = (val == exp) | (diff <= tol) | (np.isnan(val) & np.isnan(exp))
        bad = ~ok & written
        # How far past its tolerance each element is; NaN and inf differences count as infinitely far.
        excess = np.where(np.isnan(diff), np.inf, diff / np.where(tol > 0, tol, np.finfo(np.float64).tiny))
        rel = np.where(np.abs(exp) > 0, diff / np.abs(exp), 0.0)
    comparable = written & ~np.isnan(diff)
    max_abs = float(diff[comparable].max()) if comparable.any() else 0.0
    # Relative error means little where |expected| is below atol (a softmax tail, a sum that cancels):
    # it is reported over the elements above atol, or over every nonzero one when there are none.
    significant = comparable & (np.abs(exp) > atol)
    if not significant.any():
        significant = comparable
    max_rel = float(rel[significant].max()) if significant.any() else 0.0
    mismatches = int(bad.sum())
    n_unwritten = int(unwritten.sum())
    shape = got.shape
    worst: list[int] | None = None
    if mismatches:
        worst = _index(int(np.argmax(np.where(bad, excess, -1.0))), shape)
    elif comparable.any():
        worst = _index(int(np.argmax(np.where(comparable, diff, -1.0))), shape)
    problem: str | None = None
    if n_unwritten:
        first = _index(int(np.argmax(unwritten)), shape)
        still = "still NaN from the poison fill, or a NaN the kernel computed" if plain_nan else \
            f"still {describe_poison(got.dtype)}"
        problem = f"output {name}: {n_unwritten} of {got.size} elements unwritten ({still}); first at {first}"
    elif mismatches:
        assert worst is not None
        g, e = float(val[tuple(worst)]), float(exp[tuple(worst)])
        a = abs(g - e)
        r = a / abs(e) if e != 0 else float("inf")
        problem = (f"output {name}: {mismatches} elements outside atol={atol:g} rtol={rtol:g}; worst at {worst}: "
                   f"got {g:.7g}, expected {e:.7g} (abs {a:.3g}, rel {r:.3g})")
    return OutputCheck(name, max_abs, max_rel, worst, mismatches, n_unwritten, problem)


def _raw_bytes(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


def _element_bytes(arr: np.ndarray) -> np.ndarray:
    """One row of raw bytes per element: -0.0 differs from 0.0 and a NaN payload counts."""
    return _raw_bytes(arr).reshape(arr.size, arr.dtype.itemsize)


def modified(name: str, now: np.ndarray, pristine: np.ndarray) -> str | None:
    """Bytewise comparison of an input with its pristine copy; a message when the kernel changed it."""
    if now.size == 0 or np.array_equal(_raw_bytes(now), _raw_bytes(pristine)):
        return None  # the common case, at memcmp speed
    changed = np.any(_element_bytes(now) != _element_bytes(pristine), axis=1)
    count = int(changed.sum())  # at least one: the bytes differ
    first = _index(int(np.argmax(changed)), now.shape)
    return f"input {name} modified by the kernel: {count} of {now.size} elements changed; first at {first}"


def overruns(arrays: Mapping[str, np.ndarray]) -> list[str]:
    """Names of arrays whose guard bytes were overwritten (the kernel wrote past their end)."""
    if isinstance(arrays, Slot):
        return [name for name in arrays if not arrays.guard_intact(name)]
    return [name for name, arr in arrays.items() if not guard_intact(arr)]
