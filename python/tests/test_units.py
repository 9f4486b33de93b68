"""Unit tests of the pieces the end-to-end tests cannot reach cheaply."""

from __future__ import annotations

import numpy as np
import pytest

from ksearch_worker.arrays import ArraySet, alloc, fill_poison, guard_intact, poison_mask
from ksearch_worker.check import compare, modified, overruns
from ksearch_worker.errors import WorkerError
from ksearch_worker.inputs import draw, parse_init
from ksearch_worker.timing import (
    MAX_CALLS_PER_EVAL,
    MAX_COPIES,
    TimingConfig,
    calls_per_eval,
    copies_for,
    measure,
    shared_calls_per_eval,
)

INITS = ["normal(0, 1)", "uniform(-1, 1)", "laplace(0, 1)", "lognormal(0, 1)", "randint(-1, 2)",
         "uniform(-1e-30, 1e-30)", None]


@pytest.mark.parametrize("init", INITS)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_draws_never_hold_zeros(init: str | None, dtype: str) -> None:
    for seed in range(5):
        x = draw(init, (64, 33), np.dtype(dtype), np.random.default_rng(seed))
        assert x.dtype == dtype and x.shape == (64, 33)
        assert np.count_nonzero(x == 0) == 0 and np.all(np.isfinite(x))


def test_distributions_have_their_shape() -> None:
    rng = np.random.default_rng(0)
    u = draw("uniform(2, 3)", (10000,), np.dtype("float64"), rng)
    assert u.min() >= 2 and u.max() < 3
    assert np.all(draw("lognormal(0, 1)", (1000,), np.dtype("float32"), rng) > 0)
    k = draw("randint(-3, 4)", (10000,), np.dtype("int16"), rng)
    assert k.dtype == np.int16 and set(np.unique(k)) == set(range(-3, 4))
    assert abs(draw(None, (20000,), np.dtype("float64"), rng).std() - 1) < 0.05


@pytest.mark.parametrize("bad", ["gauss(0, 1)", "normal(0)", "uniform(a, b)", "normal"])
def test_bad_init_is_bad_task(bad: str) -> None:
    with pytest.raises(WorkerError) as exc:
        parse_init(bad)
    assert exc.value.kind == "bad_task" and bad in exc.value.message


def test_poison_and_guard() -> None:
    for dtype in ["float16", "float32", "int8", "uint8", "int32", "uint32", "int64", "bool"]:
        a = alloc((3, 5), np.dtype(dtype))
        assert a.ctypes.data % 64 == 0 and poison_mask(a).all() and guard_intact(a)
        a[1] = 1
        assert poison_mask(a).sum() == 10
    a = alloc((4,), np.dtype("float32"))
    owner = a.base
    assert isinstance(owner, np.ndarray) and owner.dtype == np.uint8
    owner[a.ctypes.data - owner.ctypes.data + a.nbytes] = 0  # the byte just past the end
    assert not guard_intact(a)


def test_compare_counts_and_locates() -> None:
    exp = np.arange(1, 13, dtype=np.float64).reshape(3, 4)
    got = exp.astype(np.float32)
    fill_poison(got[2:3, 1:2])  # unwritten
    got[0, 3] += 0.5
    r = compare("C", got, exp, atol=1e-3, rtol=0.0)
    assert r.unwritten == 1 and r.mismatches == 1 and r.worst_index == [0, 3]
    assert r.max_abs == pytest.approx(0.5) and r.max_rel == pytest.approx(0.5 / 4)
    assert r.problem is not None and "1 of 12 elements unwritten" in r.problem and "first at [2, 1]" in r.problem
    got[1, 2] = np.nan  # a computed NaN is a mismatch, and the worst one
    r = compare("C", got, exp, atol=1e-3, rtol=0.0)
    assert r.unwritten == 1 and r.mismatches == 2 and r.worst_index == [1, 2]
    # NaN expected and NaN written is a match; tolerance scales with |expected|.
    exp[1, 1] = np.nan
    got = exp.astype(np.float32) * np.float32(1 + 1e-5)
    assert compare("C", got, exp, atol=0.0, rtol=2e-5).problem is None
    assert compare("C", got, exp, atol=0.0, rtol=1e-6).mismatches == 11


def test_compare_integers_exact() -> None:
    exp = np.array([1, 2, 3, -(2**31)], dtype=np.int64)  # the last equals the int32 poison and is still correct
    got = np.array([1, 2, 4, -(2**31)], dtype=np.int32)
    r = compare("K", got, exp, atol=0, rtol=0)
    assert r.unwritten == 0 and r.mismatches == 1 and r.worst_index == [2]
    assert r.problem is not None and "got 4, expected 3" in r.problem


def test_modified_is_bytewise() -> None:
    a = np.array([0.0, 1.0, 2.0])
    b = a.copy()
    assert modified("A", b, a) is None
    b[0] = -0.0  # equal as numbers, different as bytes
    msg = modified("A", b, a)
    assert msg is not None and "1 of 3 elements changed; first at [0]" in msg


def test_copies_for() -> None:
    llc = 32 << 20
    assert copies_for(1 << 30, llc) == 1
    assert copies_for(16 << 20, llc) == 4
    assert copies_for(100, llc) == MAX_COPIES
    assert copies_for(60 << 20, llc) == 2


def test_calls_per_eval_amortise_a_fixed_cost_per_evaluation() -> None:
    # 40 µs per evaluation, 10 µs per call: 80 calls would bring the fixed part to 5%; capped.
    assert calls_per_eval(50e-6, 120e-6) == MAX_CALLS_PER_EVAL
    # 30 µs fixed, 400 µs per call: 1.5 calls make it 5%, so 2.
    assert calls_per_eval(430e-6, 3230e-6) == 2
    # No fixed cost (eight calls cost eight times one): one call per evaluation.
    assert calls_per_eval(100e-6, 800e-6) == 1
    # A millisecond or more of its own: alone.
    assert calls_per_eval(1.5e-3, 12e-3) == 1
    # An evaluation of one call that takes over a millisecond by MLX's fixed cost, of a call that costs 80 µs
    # of its own: shared with others, not timed alone with that cost.
    assert calls_per_eval(1.05e-3, 1.61e-3) == MAX_CALLS_PER_EVAL
    # Noise that makes eight calls look cheaper than one must not blow up.
    assert 1 <= calls_per_eval(60e-6, 30e-6) <= MAX_CALLS_PER_EVAL


def test_short_entries_of_a_workload_share_one_count() -> None:
    # A candidate that wants 64 calls, a baseline that wants 2, a slow baseline: the two short ones are
    # compared at the same count, the slow one runs alone.
    probes = [(50e-6, 120e-6), (430e-6, 3230e-6), (0.2, 1.6)]
    assert [calls_per_eval(*p) for p in probes] == [MAX_CALLS_PER_EVAL, 2, 1]
    assert shared_calls_per_eval(probes) == [MAX_CALLS_PER_EVAL, MAX_CALLS_PER_EVAL, 1]
    assert shared_calls_per_eval([(2e-3, 16e-3)]) == [1]
    # The candidate's evaluation of one call over a millisecond, its calls short: it shares the count.
    assert shared_calls_per_eval([(1.05e-3, 1.61e-3), (70e-6, 560e-6)]) == [MAX_CALLS_PER_EVAL, MAX_CALLS_PER_EVAL]
    # A baseline too slow to probe with eight calls (PROBE_EIGHT_UNDER_S) counts as long.
    assert shared_calls_per_eval([(50e-6, 120e-6), (0.3, 8 * 0.3)]) == [MAX_CALLS_PER_EVAL, 1]


def test_measure_interleaves_and_respects_sample_bounds() -> None:
    log: list[str] = []
    cfg = TimingConfig(warmup_s=0.0, min_samples=3, max_samples=4, budget_s=10.0, min_sample_s=0.0)
    stats = measure([[lambda: log.append("a")], [lambda: log.append("b"), lambda: log.append("c")]], cfg)
    assert [s["samples"] for s in stats] == [4, 4] and stats[1]["copies"] == 2
    assert all(s["min_s"] <= s["median_s"] <= s["max_s"] for s in stats)
    assert "b" in log and "c" in log  # both copies were used
    quick = measure([[lambda: None]], TimingConfig(warmup_s=0.0, min_samples=3, max_samples=50, budget_s=0.0,
                                                  min_sample_s=0.0))
    assert quick[0]["samples"] == 3  # the budget is spent, but min_samples still holds


def test_measure_keeps_a_calls_preparation_off_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    from ksearch_worker import timing

    clock = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])

    class Prepared:
        """Building the graph costs 1 s of fake time, running it 1 ms."""

        def prepare(self) -> object:
            clock[0] += 1.0

            def run() -> None:
                clock[0] += 0.001

            return run

        def __call__(self) -> None:
            self.prepare()()

    cfg = timing.TimingConfig.from_json({"enabled": True, "warmup_s": 0.0, "min_samples": 3, "max_samples": 3,
                                         "budget_s": 100.0, "min_sample_s": 0.0})
    stats = timing.measure([[Prepared()]], cfg)[0]
    assert stats["median_s"] == pytest.approx(0.001)


def test_array_set_lays_out_guarded_aligned_arrays_in_shared_memory() -> None:
    s = ArraySet([("A", (3, 5), np.dtype("float32")), ("n", (7,), np.dtype("int8")), ("B", (0,), np.dtype("float64"))])
    assert list(s) == ["A", "n", "B"] and s["A"].shape == (3, 5) and s.fd >= 0
    assert all(off % 64 == 0 for off in s.offsets.values()) and s["A"].ctypes.data % 64 == 0
    assert s.size >= s.offsets["B"] + 64
    s["A"][:] = 1.0
    s["n"][:] = 1
    assert overruns(s) == []
    region = s["n"]
    while isinstance(region.base, np.ndarray):
        region = region.base
    region[s.offsets["n"] + 7] = 0  # one byte past the end of n
    assert overruns(s) == ["n"]
    region[s.offsets["B"]] = 0  # B is empty: its guard starts where it does
    assert overruns(s) == ["n", "B"]

