"""Timing: warm-up, several calls per sample, entries interleaved round by round, verdicts that survive noise.

An entry is timed in samples. A sample is `reps` calls made in one go, timed from this process; a fixed
cost of asking for them that was measured where the candidate cannot reach it (`overhead_s`: the round trip
to a kernel host that never loaded candidate code) is taken off, and the rest divided by `reps`. Entries
take one sample each per round, in a shuffled order, so drifts in clock speed or load hit them alike.

Two entries timed as a pair (a candidate and the incumbent it is compared with) run on the same inputs in
every round; their verdict comes from the per-round ratios (`paired_verdict`), which cancel drift, and
sampling goes on while the verdict is still open, up to `max_rounds` or `compare_budget_s`.
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .log import say

MAX_REPS = 100_000
# A difference smaller than this is "within noise" however many rounds measured it.
MIN_EFFECT = 0.005
# A comparison still open is settled as "within noise" once the two are known to differ by less than this:
# more rounds would only tell apart what no search should act on.
EQUAL_BAND = 0.03
# Standard error of a median, in standard deviations of one sample over sqrt(n), for normal-like data.
MEDIAN_SE = 1.2533
IQR_PER_SIGMA = 1.349


@dataclass(frozen=True)
class TimingConfig:
    enabled: bool = True
    warmup_s: float = 0.05
    min_samples: int = 5
    max_samples: int = 25
    budget_s: float = 1.0
    min_sample_s: float = 0.0002
    # Spread (IQR over median) above which a figure is flagged `noisy`.
    noisy_iqr: float = 0.1
    # Standard errors a paired difference must exceed before it is called faster or slower.
    verdict_z: float = 3.0
    # ... and the relative difference it must exceed: below it, what tells two entries apart may be where
    # each runs (its process, its memory), not its code.
    min_effect: float = MIN_EFFECT
    # A comparison still within noise goes on to this many rounds, or this long.
    max_rounds: int = 60
    compare_budget_s: float = 3.0
    # Bytes of supply inputs timing may hold for one workload (beyond them sets repeat).
    supply_bytes: int = 256 << 20
    # MLX: also report the throughput of independent calls and one call alone, beside the chained latency.
    throughput: bool = False

    @staticmethod
    def from_json(obj: Mapping[str, Any] | None) -> TimingConfig:
        if obj is None:
            return TimingConfig(enabled=False)
        fields = TimingConfig.__dataclass_fields__
        return TimingConfig(**{k: v for k, v in obj.items() if k in fields})


@dataclass
class Batches:
    """One timed entry: `run(start, count)` makes calls start..start+count-1 in one go (call i on input set
    i mod `sets` of the entry's order); `before` and `after` surround each sample, off the clock (poison
    outputs; build a lazy graph; compare outputs)."""
    run: Callable[[int, int], object]
    sets: int
    before: Callable[[int, int], None] = field(default=lambda start, count: None)
    after: Callable[[int, int], None] = field(default=lambda start, count: None)
    # Fixed cost of one `run` however many calls it makes, measured out of the candidate's reach, taken
    # off every sample. 0: none.
    overhead_s: float = 0.0
    # A sample lasts at least this long (e.g. many round trips, so the overhead's own noise vanishes).
    min_sample_s: float = 0.0
    # Calls per sample fixed by the caller (a pair shares one count); None: chosen by `reps_for`.
    reps: int | None = None
    # `run` returns the seconds its calls took by the device's own clock (CUDA events around them), used
    # instead of this process's clock around `run`.
    clocked: bool = False

    def go(self, start: int, count: int) -> float:
        """Makes the calls; the seconds they took (the device's clock where the entry has one)."""
        t0 = time.perf_counter()
        got = self.run(start, count)
        host = time.perf_counter() - t0
        return float(got) if self.clocked and isinstance(got, (int, float)) else host


def calls_as_batches(calls: Sequence[Callable[[], object]]) -> Batches:
    """A list of calls on rotated input sets as an entry (call i runs calls[i % len])."""
    def run(start: int, count: int) -> None:
        for k in range(start, start + count):
            calls[k % len(calls)]()

    return Batches(run, len(calls))


def reps_for(entry: Batches, cfg: TimingConfig) -> tuple[int, int, float]:
    """Calls per sample: enough for the sample to last max(min_sample_s, the entry's own minimum), judged
    from warm-up batches that double (the first calls pay page faults, lazy binding and JIT). Bounded so
    that one sample never lasts more than a share of the budget, judged by the raw time per call (overhead
    included, an upper bound): a warm-up batch shorter than the overhead cannot make samples explode.
    Returns the calls per sample, the calls the warm-up made, and the raw time per call."""
    target = max(cfg.min_sample_s, entry.min_sample_s)
    sample_cap = max(cfg.budget_s / max(cfg.min_samples, 1), target)
    start = time.perf_counter()
    count, done = 1, 0
    per_call = raw = 1e-9
    while True:
        entry.before(done, count)
        dt = entry.go(done, count)
        entry.after(done, count)
        done += count
        raw = max(dt / count, 1e-9)
        per_call = max((dt - entry.overhead_s) / count, raw / 20)
        if done >= 2 and time.perf_counter() - start >= cfg.warmup_s:
            break
        if dt < target:
            count = max(1, min(2 * count, MAX_REPS, math.floor(sample_cap / raw)))
    reps = math.ceil(target / per_call)
    return max(1, min(reps, MAX_REPS, math.floor(sample_cap / raw))), done, raw


def stats(samples: Sequence[float], reps: int, sets: int, noisy_iqr: float) -> dict[str, Any]:
    q25, q50, q75 = np.percentile(samples, [25, 50, 75])
    calls = reps * len(samples)
    return {
        "median_s": float(q50), "iqr_s": float(q75 - q25), "min_s": float(min(samples)),
        "max_s": float(max(samples)), "samples": len(samples), "reps": reps,
        "distinct_inputs": min(sets, calls), "calls": calls,
        "noisy": bool(q50 > 0 and (q75 - q25) / q50 > noisy_iqr),
    }


def paired_verdict(challenger: Sequence[float], incumbent: Sequence[float], z: float,
                   min_effect: float = MIN_EFFECT) -> dict[str, Any]:
    """Faster, slower or within noise, from per-round ratios of two entries timed side by side.

    The median log-ratio must lie more than `z` standard errors (estimated from the ratios' IQR) from zero,
    and the difference must exceed `min_effect`. `speedup` is incumbent time over challenger time."""
    r = np.log(np.asarray(challenger, dtype=np.float64) / np.asarray(incumbent, dtype=np.float64))
    n = len(r)
    q25, m, q75 = (float(x) for x in np.percentile(r, [25, 50, 75]))
    se = max(MEDIAN_SE * ((q75 - q25) / IQR_PER_SIGMA) / math.sqrt(max(n, 1)), 1e-4)
    score = m / se
    if score < -z and m < -min_effect:
        verdict = "faster"
    elif score > z and m > min_effect:
        verdict = "slower"
    else:
        verdict = "within noise"
    # Settled: decided, or known to lie within EQUAL_BAND of equal.
    settled = verdict != "within noise" or abs(m) + z * se < max(EQUAL_BAND, min_effect)
    return {"verdict": verdict, "speedup": math.exp(-m), "z": score, "rounds": n, "log_ratio_iqr": q75 - q25,
            "settled": settled}


@dataclass
class Measurement:
    stats: list[dict[str, Any]]
    samples: list[list[float]]
    verdict: dict[str, Any] | None = None
    sampled_s: float = 0.0  # seconds the clock ran (every entry's samples), for the evaluation's time split
    # Where the measurement's wall time went: warm-up, `before` and `after` hooks, the clock, growing the
    # inputs, the untimed calls after sampling (a debug line; see `account`).
    parts: dict[str, float] = field(default_factory=dict)


def measure(entries: Sequence[Batches | Sequence[Callable[[], object]]], cfg: TimingConfig,
            paired: bool = False, grow: Callable[[int, int], int | None] | None = None) -> Measurement:
    """Times each entry in the order given; a plain list of calls is `calls_as_batches` of it.

    Each round takes one sample of every entry, in a shuffled order. Sampling stops at max_samples, or once
    past budget_s with at least min_samples; with `paired`, entries 0 and 1 (challenger and incumbent) make
    the same calls on the same inputs in every round, and sampling goes on past those limits while their
    verdict is open, up to max_rounds rounds or compare_budget_s.

    Sampling starts past the calls the warm-up made, so the warm-up's inputs are not met again. `grow(first,
    calls)` is told, before sampling, where it starts and how many calls it is expected to make (so that the
    inputs can be made to last, and checked calls spread over them); it may change the entries' `sets`, and
    returns the last call sampling must make before it may stop (the last checked one), if any. Sampling
    goes on to it, within twice the usual samples and three times the budget (half a second at least); the
    calls still ahead then are made untimed."""
    batches = [e if isinstance(e, Batches) else calls_as_batches(e) for e in entries]
    start = time.perf_counter()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside a sample would be charged to whichever entry it hit
    try:
        parts: dict[str, float] = dict.fromkeys(("warmup_s", "grow_s", "before_s", "clock_s", "after_s", "tail_s"), 0.0)
        warm = [(b.reps, 0, 0.0) if b.reps else reps_for(b, cfg) for b in batches]
        parts["warmup_s"] = time.perf_counter() - start
        reps = [r for r, _, _ in warm]
        if paired:
            reps[0] = reps[1] = max(reps[0], reps[1])
        first = max(used for _, used, _ in warm)
        # Rounds the budget allows, judged from the warm-up's raw times (hooks not counted).
        round_s = sum(r * raw for r, (_, _, raw) in zip(reps, warm, strict=True)) or 1e-9
        expected = max(cfg.min_samples, min(cfg.max_samples, int(cfg.budget_s / round_s)), 1)
        t_grow = time.perf_counter()
        must_reach = grow(first, max(reps) * expected) if grow is not None else None
        parts["grow_s"] = time.perf_counter() - t_grow
        samples: list[list[float]] = [[] for _ in batches]
        cursors = [first] * len(batches)
        order = list(range(len(batches)))
        shuffle = random.Random(0x5EED)
        verdict: dict[str, Any] | None = None
        rounds = 0
        sampled = 0.0

        def call(e: int) -> float:
            """Entry `e`'s next batch of calls (hooks around it); the seconds the batch itself took."""
            b, n, c = batches[e], reps[e], cursors[e]
            t_before = time.perf_counter()
            b.before(c, n)
            t0 = time.perf_counter()
            dt = b.go(c, n)
            t1 = time.perf_counter()
            b.after(c, n)
            parts["before_s"] += t0 - t_before
            parts["after_s"] += time.perf_counter() - t1
            cursors[e] = c + n
            return dt

        while True:
            elapsed = time.perf_counter() - start
            enough = rounds >= max(cfg.max_samples, 1) or (
                rounds >= max(cfg.min_samples, 1) and elapsed >= cfg.budget_s)
            if must_reach is not None and min(cursors) <= must_reach and rounds < 2 * max(cfg.max_samples, 1) \
                    and elapsed < max(3 * cfg.budget_s, 0.5):
                enough = False  # the last checked call is still ahead
            if enough and not paired:
                break
            if paired and rounds >= max(cfg.min_samples, 1):
                verdict = paired_verdict(samples[0], samples[1], cfg.verdict_z, cfg.min_effect)
                open_ = not verdict["settled"] and rounds < cfg.max_rounds and elapsed < cfg.compare_budget_s
                if enough and not open_:
                    break
            shuffle.shuffle(order)
            for e in order:
                dt = call(e)
                sampled += dt
                samples[e].append(max(dt - batches[e].overhead_s, 1e-12) / reps[e])
            rounds += 1
        if must_reach is not None:
            # A loaded machine stopped sampling before the last checked call: make the calls still ahead,
            # untimed but indistinguishable from timed ones, so every checked call is compared however slow
            # the machine (they are few: the calls the budget was expected to allow).
            t_tail = time.perf_counter()
            for e in range(len(batches)):
                while cursors[e] <= must_reach:
                    call(e)
            parts["tail_s"] = time.perf_counter() - t_tail
    finally:
        if gc_was_enabled:
            gc.enable()
    if paired:
        verdict = paired_verdict(samples[0], samples[1], cfg.verdict_z, cfg.min_effect)
    parts.update(clock_s=sampled, rounds=rounds, total_s=time.perf_counter() - start)
    return Measurement([stats(s, r, b.sets, cfg.noisy_iqr) for s, r, b in zip(samples, reps, batches, strict=True)],
                       samples, verdict, sampled, parts)


def account(m: Measurement, workload: str) -> None:
    """Where a measurement's wall time went, as a debug line on stderr (kept in `-vv` logs): the clock is
    what samples cost; the rest is the evaluator's (warm-up, building and checking calls, the tail)."""
    say(f"timing {workload} " + " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in m.parts.items()))


# -- MLX: calls per evaluation ---------------------------------------------------------------------------

MAX_CALLS_PER_EVAL = 64
# An evaluation of a chain lasts about this long (or holds MAX_CALLS_PER_EVAL calls), so that MLX's fixed cost
# of an evaluation (tens of microseconds, at times more) is a few percent of it before the null chain takes it
# off; a call that takes this long by itself is timed alone.
CHAIN_EVAL_S = 2e-3


def chain_length(one_s: float) -> int:
    """Dependent calls per evaluation for a call whose evaluation alone takes `one_s` (fixed cost included,
    so short calls are given fewer than they could take: never more than needed). Chained calls cannot
    overlap, so candidate and baselines need not share a count."""
    return max(1, min(MAX_CALLS_PER_EVAL, math.ceil(CHAIN_EVAL_S / max(one_s, 1e-9))))
