"""Timing: warm-up, several calls per sample, candidate and baselines interleaved, caches rotated."""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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


MAX_CALLS_PER_EVAL = 64
# A call whose own cost reaches this is timed alone (one call per evaluation).
LONG_CALL_S = 1e-3
# Evaluations of one call longer than this are not probed with eight (a slow baseline would take seconds):
# their calls count as long.
PROBE_EIGHT_UNDER_S = 0.05


def own_cost(one_s: float, eight_s: float) -> float:
    """A call's own cost: the marginal time of one more call in an evaluation (noise that makes eight calls
    look cheaper than one is bounded below)."""
    return max((eight_s - one_s) / 7, one_s / 100, 1e-9)


def calls_per_eval(one_s: float, eight_s: float, share: float = 0.05) -> int:
    """Calls per evaluation for a runtime that pays a fixed cost per evaluation (MLX: building and launching
    its command graph, then synchronising), from the time of one evaluation of 1 call and of 8 calls.

    In a real program a kernel is one of many operations in an evaluation, so that cost is not the kernel's:
    enough calls share one evaluation that it falls under `share` of a call's own cost (at most
    MAX_CALLS_PER_EVAL). A call whose own cost is a millisecond or more is timed alone. Its own cost, not
    the evaluation of one call: on the H200 MLX's cost per evaluation of one call sometimes exceeded a
    millisecond by itself, which once timed a 78 µs kernel alone at 234 µs.
    """
    own = own_cost(one_s, eight_s)
    if own >= LONG_CALL_S:
        return 1
    fixed = max(one_s - own, 0.0)
    return max(1, min(MAX_CALLS_PER_EVAL, math.ceil(fixed / (share * own))))


def shared_calls_per_eval(probes: Sequence[tuple[float, float]]) -> list[int]:
    """Calls per evaluation for each entry of one workload, from each entry's (1 call, 8 calls) times.

    Entries whose calls are short share one count, the largest any of them needs: MLX may overlap the
    independent calls of an evaluation on the device, so the candidate and a baseline are compared at the
    same number of calls in flight, not each at its own. Entries of long calls are timed one call at a time.
    """
    wanted = [calls_per_eval(one, eight) for one, eight in probes]
    short = [own_cost(*p) < LONG_CALL_S for p in probes]
    shared = max((k for k, s in zip(wanted, short, strict=True) if s), default=1)
    return [shared if s else 1 for s in short]


def _stats(samples: list[float], reps: int, copies: int) -> dict[str, Any]:
    q25, q50, q75 = np.percentile(samples, [25, 50, 75])
    return {
        "median_s": float(q50), "iqr_s": float(q75 - q25), "min_s": min(samples), "max_s": max(samples),
        "samples": len(samples), "reps": reps, "copies": copies,
    }


@dataclass
class Batches:
    """One timed entry: `run(start, count)` makes calls start..start+count-1 over `copies` rotated copies
    in one go; `before` and `after` surround each sample, off the clock."""
    run: Callable[[int, int], object]
    copies: int
    before: Callable[[int, int], None] = field(default=lambda start, count: None)
    after: Callable[[int, int], None] = field(default=lambda start, count: None)
    # Fixed cost of one `run` however many calls it makes (a round trip to another process): a sample
    # lasts at least `overhead_factor` times it, so the cost is negligible. 0: not measured.
    overhead_factor: int = 0


def calls_as_batches(calls: Sequence[Call]) -> Batches:
    """A list of calls on rotated copies as an entry. A call with `prepare` (MLX: build the lazy graph)
    has that part done in `before`, off the clock, and only what `prepare` returned run on it."""
    ready: dict[tuple[int, int], list[Call]] = {}

    def pick(start: int, count: int) -> list[Call]:
        return [calls[k % len(calls)] for k in range(start, start + count)]

    def before(start: int, count: int) -> None:
        ready[(start, count)] = [getattr(c, "prepare")() if hasattr(c, "prepare") else c for c in pick(start, count)]

    def run(start: int, count: int) -> None:
        for call in ready.pop((start, count), None) or pick(start, count):
            call()

    return Batches(run, len(calls), before)


def reps_for(entry: Batches, cfg: TimingConfig) -> int:
    """Calls per sample: enough for min_sample_s (and for the entry's overhead factor), estimated with
    batches that double while warming up (the first calls pay page faults and lazy binding)."""
    overhead = 0.0
    if entry.overhead_factor:
        trips = []
        for _ in range(5):
            t0 = time.perf_counter()
            entry.run(0, 0)
            trips.append(time.perf_counter() - t0)
        overhead = float(np.median(trips))
    target = max(cfg.min_sample_s, entry.overhead_factor * overhead)
    start = time.perf_counter()
    count, done, per_call = 1, 0, 0.0
    while True:
        # The same before/after as a sample (poison and verify; graphs built off the clock), so that
        # the warm-up calls do the work the samples will.
        entry.before(done, count)
        t0 = time.perf_counter()
        entry.run(done, count)
        dt = time.perf_counter() - t0
        entry.after(done, count)
        done += count
        per_call = max((dt - overhead) / count, dt / count / 100, 1e-9)
        if done >= 2 and time.perf_counter() - start >= cfg.warmup_s:
            break
        if dt < target:
            count = min(2 * count, MAX_REPS)
    return min(MAX_REPS, max(1, math.ceil(target / per_call)))


def measure(entries: Sequence[Batches | Sequence[Call]], cfg: TimingConfig) -> list[dict[str, Any]]:
    """Times each entry (the same work on rotated copies), in the order given; a plain list of calls is
    taken as `calls_as_batches` of it.

    Every round takes one sample of each entry, in a shuffled order, so drifts in clock speed or load
    hit candidate and baselines alike. A sample is `reps` calls, enough to last min_sample_s, divided by
    reps. Sampling stops at max_samples, or once past budget_s with at least min_samples.
    """
    batches = [e if isinstance(e, Batches) else calls_as_batches(e) for e in entries]
    start = time.perf_counter()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside a sample would be charged to whichever entry it hit
    try:
        reps = [reps_for(b, cfg) for b in batches]
        samples: list[list[float]] = [[] for _ in batches]
        cursors = [0] * len(batches)
        order = list(range(len(batches)))
        shuffle = random.Random(0x5EED)
        for rounds in range(max(cfg.min_samples, cfg.max_samples, 1)):
            if rounds >= max(cfg.min_samples, 1) and time.perf_counter() - start >= cfg.budget_s:
                break
            shuffle.shuffle(order)
            for e in order:
                b, n, c = batches[e], reps[e], cursors[e]
                b.before(c, n)
                t0 = time.perf_counter()
                b.run(c, n)
                samples[e].append((time.perf_counter() - t0) / n)
                b.after(c, n)
                cursors[e] = (c + n) % b.copies
    finally:
        if gc_was_enabled:
            gc.enable()
    return [_stats(s, r, b.copies) for s, r, b in zip(samples, reps, batches, strict=True)]
