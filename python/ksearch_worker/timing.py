"""Timing: warm-up, several calls per sample, candidate and baselines interleaved, caches rotated."""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Call = Callable[[], object]

MAX_COPIES = 64
MAX_COPY_BYTES = 256 << 20
MAX_REPS = 1_000_000


@dataclass(frozen=True)
class TimingConfig:
    enabled: bool = True
    warmup_s: float = 0.05
    min_samples: int = 5
    max_samples: int = 25
    budget_s: float = 1.0
    min_sample_s: float = 0.0002

    @staticmethod
    def from_json(obj: Mapping[str, Any] | None) -> TimingConfig:
        if obj is None:
            return TimingConfig(enabled=False)
        fields = TimingConfig.__dataclass_fields__
        return TimingConfig(**{k: v for k, v in obj.items() if k in fields})


def copies_for(working_set_bytes: int, cache_bytes: int) -> int:
    """How many copies of one call's arrays to rotate through so that each call starts with cold caches.

    A working set that fits the last-level cache twice over would otherwise be timed hot, as no real
    program calls a kernel back to back on the same data.
    """
    if working_set_bytes <= 0 or working_set_bytes >= 2 * cache_bytes:
        return 1
    wanted = math.ceil(2 * cache_bytes / working_set_bytes)
    return max(1, min(wanted, MAX_COPIES, MAX_COPY_BYTES // working_set_bytes))


def _warm_up(calls: Sequence[Call], warmup_s: float) -> float:
    """Calls until warmup_s has passed (at least twice); returns the median seconds per call."""
    times: list[float] = []
    start = time.perf_counter()
    i = 0
    while True:
        t0 = time.perf_counter()
        calls[i % len(calls)]()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        i += 1
        if i >= 2 and t1 - start >= warmup_s:
            break
    return float(np.median(times[1:]))  # the first call pays page faults and lazy binding


def _stats(samples: list[float], reps: int, copies: int) -> dict[str, Any]:
    q25, q50, q75 = np.percentile(samples, [25, 50, 75])
    return {
        "median_s": float(q50), "iqr_s": float(q75 - q25), "min_s": min(samples), "max_s": max(samples),
        "samples": len(samples), "reps": reps, "copies": copies,
    }


def measure(entries: Sequence[Sequence[Call]], cfg: TimingConfig) -> list[dict[str, Any]]:
    """Times each entry (its calls are the same work on rotated copies), in the order given.

    Every round takes one sample of each entry, in a shuffled order, so drifts in clock speed or load
    hit candidate and baselines alike. A sample is `reps` back-to-back calls, enough to last
    min_sample_s, divided by reps. Sampling stops at max_samples, or once past budget_s with at least
    min_samples.
    """
    start = time.perf_counter()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside a sample would be charged to whichever entry it hit
    try:
        reps = [
            min(MAX_REPS, max(1, math.ceil(cfg.min_sample_s / max(_warm_up(calls, cfg.warmup_s), 1e-9))))
            for calls in entries
        ]
        samples: list[list[float]] = [[] for _ in entries]
        cursors = [0] * len(entries)
        order = list(range(len(entries)))
        shuffle = random.Random(0x5EED)
        max_samples = max(cfg.min_samples, cfg.max_samples, 1)
        for rounds in range(max_samples):
            if rounds >= max(cfg.min_samples, 1) and time.perf_counter() - start >= cfg.budget_s:
                break
            shuffle.shuffle(order)
            for e in order:
                calls, n, c = entries[e], reps[e], cursors[e]
                # A call with `prepare` (MLX: build the lazy graph) does that part before the clock.
                runs = [getattr(calls[k % len(calls)], "prepare", None) for k in range(c, c + n)]
                runs = [p() if p is not None else calls[k % len(calls)] for p, k in zip(runs, range(c, c + n))]
                t0 = time.perf_counter()
                for run in runs:
                    run()
                samples[e].append((time.perf_counter() - t0) / n)
                cursors[e] = (c + n) % len(calls)
    finally:
        if gc_was_enabled:
            gc.enable()
    return [_stats(s, r, len(calls)) for s, r, calls in zip(samples, reps, entries, strict=True)]
