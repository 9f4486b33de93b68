"""The MLX targets' defences, run in-process with MLX's CPU build: the device kernel is replaced by a
Python function of MLX ops (this machine has neither Metal nor CUDA), so what is under test is the
checking and timing around it: run twice, inputs unchanged, timed calls chained and sampled, fresh inputs
after timing, the plan's scalars, sticky device errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ADD_BASELINES, ADD_REFERENCE, M, N, add_run, add_task, prepare_request
from ksearch_worker.errors import WorkerError
from ksearch_worker.evaluate import RunState, prepare
from ksearch_worker.evaluate import run as run_request
from ksearch_worker.pool import Pool
from ksearch_worker.targets.mlx import MlxTarget, link
from ksearch_worker.task import load_task

import mlx.core as mx

TIMING = {"enabled": True, "warmup_s": 0.0, "min_samples": 2, "max_samples": 3, "budget_s": 0.05,
          "min_sample_s": 0.0001}


class FakeDevice(MlxTarget):
    """mlx-cuda with `kernel(arrays, calls)` standing in for the compiled launches."""

    def __init__(self, kernel: Any) -> None:
        super().__init__("mlx-cuda")
        self.kernel = kernel
        self.calls = 0
        self.seen: list[dict[str, Any]] = []

    def _available(self) -> bool:
        return True

    def launch_all(self, key: str, launches: Any, arrays: dict[str, Any], shapes: Any, dtypes: Any,
                   poison: bool = True, scalars: Any = None, ensure: bool = False) -> dict[str, Any]:
        self.calls += 1
        self.seen.append(dict(arrays))
        return {**arrays, "C": self.kernel(arrays, self.calls)}


def evaluate(tmp_path: Path, kernel: Any, timing: dict[str, Any] | None = None,
             target: FakeDevice | None = None) -> dict[str, Any]:
    (tmp_path / "reference.py").write_text(ADD_REFERENCE)
    (tmp_path / "baselines.py").write_text(ADD_BASELINES)
    target = target or FakeDevice(kernel)
    task = load_task(str(tmp_path), add_task(baselines=[]), "mlx-cuda")
    target.compile_kernels("k1", [{"name": "add", "source": "", "header": ""}])
    req = add_run("k1", seeds=[1, 2], timing=timing)
    req["launches"][0].update(grid=[M * N, 1, 1], threadgroup=[64, 1, 1])
    state = RunState(pool=Pool())
    prepare(prepare_request(req), task, target, state)
    return run_request(req, task, target, state)


def correct(a: dict[str, Any], calls: int) -> Any:
    return 2 * a["A"] + a["B"]


def test_a_correct_kernel_passes_with_a_recheck_after_timing(tmp_path: Path) -> None:
    r = evaluate(tmp_path, correct, TIMING)
    assert r["status"] == "passed", r["message"]
    assert [c.get("after_timing", False) for c in r["checks"]][:2] == [False, False]
    assert r["checks"][-1]["after_timing"] is True
    t = r["timing"]
    assert t["median_s"] > 0 and t["launches_per_eval"] >= 1 and t["link_s"] >= 0
    # Exactly the calls drawn for comparison are compared (one per timed-check set), however often the chain's
    # calls meet a checked set.
    assert t["sampled_checks"] == len(add_run("k")["inputs"]["timed_checks"]), t


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "uint8", "bool"])
def test_a_link_keeps_every_bit_and_depends_on_the_previous_output(dtype: str) -> None:
    values = np.array([1.5, -0.0, 3.25, -7.0, 0.5, 2.0], dtype=np.float32)
    x = mx.array(values).astype(getattr(mx, dtype if dtype != "bool" else "bool_"))
    previous = mx.array([float("nan"), 4.0]).astype(mx.float16)  # even a NaN output links
    y = link(x, previous)
    mx.eval(y)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.array_equal(np.array(y.view(mx.uint8) if dtype != "bool" else y),
                          np.array(x.view(mx.uint8) if dtype != "bool" else x))
    assert link(mx.array(3.0), previous).shape == ()


def test_timed_calls_are_chained_through_their_smallest_input(tmp_path: Path) -> None:
    from ksearch_worker.targets.mlx import Chain

    target = FakeDevice(correct)
    r = evaluate(tmp_path, correct, TIMING, target)
    assert r["status"] == "passed", r["message"]
    # A chain of 4 calls the evaluator's way: every call but the first gets its A (the smaller input, first
    # by name) as a new array derived from the previous call's output, equal to the set's own A bit for bit.
    sets = [{"A": mx.array(np.full((M, N), i + 1.0, np.float32)), "B": mx.ones((M, N))} for i in range(4)]
    mx.eval([a for s in sets for a in s.values()])
    seen: list[Any] = []

    class Recorder:
        out_name = "C"

        def call(self, inputs: dict[str, Any]) -> dict[str, Any]:
            seen.append(inputs["A"])
            return {"C": 2 * inputs["A"] + inputs["B"]}

        def host_outputs(self, produced: dict[str, Any]) -> dict[str, Any]:
            return {}

        def check_scalars(self) -> None:
            pass

        def release(self, arrays: Any) -> None:
            pass

    chain = Chain(Recorder(), sets, 4, "A", None, None, "test")
    chain.before(0, 1)
    chain.run(0, 1)
    assert seen[0] is sets[0]["A"] and all(seen[i] is not sets[i]["A"] for i in range(1, 4))
    assert all(np.array_equal(np.array(seen[i]), np.array(sets[i]["A"])) for i in range(4))


def test_every_timed_call_has_inputs_of_its_own(tmp_path: Path) -> None:
    contents: list[bytes] = []

    def recording(a: dict[str, Any], calls: int) -> Any:
        mx.eval(a["B"])
        contents.append(np.array(a["B"]).tobytes())
        return correct(a, calls)

    r = evaluate(tmp_path, recording, TIMING)
    assert r["status"] == "passed", r["message"]
    timed = r["timing"]["calls"]
    assert r["timing"]["distinct_inputs"] == timed
    # Besides the timed calls, the checks, the probe and the warm-up met inputs too: at least as many
    # distinct inputs as timed calls were seen.
    assert len(set(contents)) >= timed


def test_a_kernel_that_stops_working_when_timed_is_caught_by_the_sampled_checks(tmp_path: Path) -> None:
    r = evaluate(tmp_path, lambda a, c: correct(a, c) if c <= 12 else a["B"] * 0 + 1.0, TIMING)
    # Caught by a sampled timed call, or at the latest by the recheck in the timed sets.
    assert r["status"] == "wrong" and r["message"].startswith("after timing"), r["message"]


def test_a_kernel_that_writes_nothing_when_timed_is_caught(tmp_path: Path) -> None:
    # What a kernel that skips its work leaves when the output was not NaN-filled: whatever the buffer held,
    # here MLX's NaN poison from our release.
    r = evaluate(tmp_path, lambda a, c: correct(a, c) if c <= 12 else mx.full((M, N), float("nan")), TIMING)
    assert r["status"] == "wrong" and "after timing" in r["message"] and "unwritten" in r["message"], r["message"]


def test_a_race_is_caught_by_running_twice(tmp_path: Path) -> None:
    noise = iter(range(1, 1000))
    r = evaluate(tmp_path, lambda a, c: correct(a, c) + 1e-7 * next(noise))
    assert r["status"] == "wrong" and "nondeterministic" in r["message"], r["message"]


def test_a_kernel_that_writes_its_input_is_caught(tmp_path: Path) -> None:
    def scribble(a: dict[str, Any], calls: int) -> Any:
        out = correct(a, calls)
        np.array(a["A"], copy=False)[0, 0] += 1.0  # what a kernel writing through its const pointer does
        return out

    r = evaluate(tmp_path, scribble)
    assert r["status"] == "wrong" and "input A modified" in r["message"], r["message"]


def test_a_kernel_that_writes_its_timed_inputs_is_caught(tmp_path: Path) -> None:
    def scribble_when_timed(a: dict[str, Any], calls: int) -> Any:
        out = correct(a, calls)
        if calls > 12:
            mx.eval(a["B"])
            np.array(a["B"], copy=False)[0, 0] = 5.0  # spoils a set later candidates would meet
        return out

    r = evaluate(tmp_path, scribble_when_timed, TIMING)
    assert r["status"] == "wrong" and "after timing" in r["message"], r["message"]


def test_a_kernel_that_writes_its_input_only_in_the_recheck_is_caught(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The recheck compares inputs on the device, against a second device copy the kernel is not handed."""
    from ksearch_worker.targets.mlx import MlxSession

    rechecking = []
    plain = MlxSession.recheck

    def recheck(self: Any, inputs: Any) -> Any:
        rechecking.append(True)
        return plain(self, inputs)

    monkeypatch.setattr(MlxSession, "recheck", recheck)

    def scribble_in_recheck(a: dict[str, Any], calls: int) -> Any:
        out = correct(a, calls)
        if rechecking:
            mx.eval(a["A"])
            np.array(a["A"], copy=False)[1, 2] += 1.0
        return out

    r = evaluate(tmp_path, scribble_in_recheck, TIMING)
    assert rechecking and r["status"] == "wrong" and "input A modified" in r["message"], r["message"]


def test_a_kernel_that_also_writes_the_rechecks_device_copy_is_caught(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Device memory is one address space: a kernel may find the recheck's second device copy of its inputs
    and write it as it writes its own input, so that the two still agree on the device. The copy is compared
    with the host inputs once per recheck."""
    import ksearch_worker.targets.mlx as mlx_target
    from ksearch_worker.targets.mlx import MlxSession

    uploads: list[dict[str, Any]] = []
    plain_upload = mlx_target.upload

    def upload(arrays: Any, dtypes: Any) -> dict[str, Any]:
        out = plain_upload(arrays, dtypes)
        uploads.append(out)
        return out

    monkeypatch.setattr(mlx_target, "upload", upload)
    rechecking = []
    plain = MlxSession.recheck

    def recheck(self: Any, inputs: Any) -> Any:
        rechecking.append(len(uploads))  # the recheck's own copy is the next upload
        return plain(self, inputs)

    monkeypatch.setattr(MlxSession, "recheck", recheck)

    def scribble_both(a: dict[str, Any], calls: int) -> Any:
        out = correct(a, calls)
        if rechecking and len(uploads) > rechecking[0]:
            for arr in (a["A"], uploads[rechecking[0]]["A"]):
                mx.eval(arr)
                np.array(arr, copy=False)[1, 2] = 7.0
        return out

    r = evaluate(tmp_path, scribble_both, TIMING)
    assert rechecking and r["status"] == "wrong" and "input A modified" in r["message"], r["message"]


def test_the_plans_scalars_are_fresh_and_checked(tmp_path: Path) -> None:
    class Scalars(FakeDevice):
        def launch_all(self, key: str, launches: Any, arrays: dict[str, Any], shapes: Any, dtypes: Any,
                       poison: bool = True, scalars: Any = None, ensure: bool = False) -> dict[str, Any]:
            out = super().launch_all(key, launches, arrays, shapes, dtypes, poison, scalars)
            if self.calls > 12:
                np.array(scalars[M], copy=False)[...] = 0  # a kernel writing its scalar input M
            return out

    r = evaluate(tmp_path, correct, TIMING, Scalars(correct))
    assert r["status"] == "wrong" and "scalar" in r["message"], r["message"]


def test_released_outputs_are_poisoned_before_going_back_to_the_allocator() -> None:
    target = MlxTarget("mlx-cuda")
    a = mx.array(np.arange(6, dtype=np.float32))
    b = mx.array(np.arange(3, dtype=np.int16))
    mx.eval(a, b)
    target.poison([a, b])
    assert np.isnan(np.array(a)).all() and (np.array(b) == -1).all()


def test_a_stale_result_is_caught_on_fresh_inputs(tmp_path: Path) -> None:
    first: list[Any] = []

    def stale(a: dict[str, Any], calls: int) -> Any:
        if not first:
            first.append(correct(a, calls))
        return first[0]

    r = evaluate(tmp_path, stale)
    # (The fake hands back one array object; released after the first check, it holds the poison.)
    assert r["status"] == "wrong" and ("outside atol" in r["message"] or "unwritten" in r["message"]), r["message"]


def test_a_sticky_device_error_is_a_crash_that_restarts_the_worker(tmp_path: Path) -> None:
    def faults(a: dict[str, Any], calls: int) -> Any:
        raise RuntimeError("[CUDA] an illegal memory access was encountered")

    r = evaluate(tmp_path, faults)
    assert r["status"] == "crash" and r["restart_worker"] is True, r


def test_a_device_left_faulted_after_a_pass_is_a_crash_that_restarts_the_worker(tmp_path: Path) -> None:
    """A fault that surfaces only after the candidate's last check (seen on the H200: an out-of-bounds read
    judged `wrong`, then every later request failed) must not leave the worker serving on a dead device."""

    class Faulted(FakeDevice):
        def device_failure(self) -> str | None:
            return "cudaStreamSynchronize(stream_) failed: an illegal memory access was encountered"

    r = evaluate(tmp_path, correct, target=Faulted(correct))
    assert r["status"] == "crash" and r["restart_worker"] is True, r
    assert "illegal memory access" in r["message"] and r["timing"] is None, r
    healthy = evaluate(tmp_path, correct)
    assert healthy["status"] == "passed" and "restart_worker" not in healthy, healthy


def test_a_device_that_cannot_run_the_workers_own_kernels_is_device_lost(tmp_path: Path) -> None:
    class Lost(FakeDevice):
        def warm(self, layout: Any) -> None:
            raise RuntimeError("cudaGraphAddKernelNode(&node, graph_, NULL, 0, &params) failed: an illegal "
                               "memory access was encountered")

    with pytest.raises(WorkerError) as err:
        evaluate(tmp_path, correct, target=Lost(correct))
    assert err.value.kind == "device_lost" and "illegal memory access" in err.value.message


def test_a_fault_that_surfaces_when_outputs_are_read_is_the_candidates(tmp_path: Path) -> None:
    """A sticky CUDA fault shows at the next device call, which may be the read of the outputs."""

    class Poisoned:
        """An output whose every use raises what MLX raises after a kernel trapped."""

        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("[CUDA] unspecified launch failure")

    class Trapping(FakeDevice):
        def launch_all(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {**super().launch_all(*args, **kwargs), "C": Poisoned()}

    r = evaluate(tmp_path, correct, target=Trapping(correct))
    assert r["status"] == "crash" and r.get("restart_worker") is True, r


def test_an_ordinary_launch_error_keeps_the_worker(tmp_path: Path) -> None:
    def bad_shape(a: dict[str, Any], calls: int) -> Any:
        raise ValueError("[custom_kernel] threadgroup too large")

    r = evaluate(tmp_path, bad_shape)
    assert r["status"] == "error" and "restart_worker" not in r, r


def test_a_cache_keyed_by_input_address_is_caught_in_the_timed_buffers(tmp_path: Path) -> None:
    cache: dict[int, Any] = {}

    def by_address(a: dict[str, Any], calls: int) -> Any:
        key = id(a["B"])  # the MLX array object: what the timed sets keep across the recheck
        if key not in cache:
            cache[key] = correct(a, calls)
        return cache[key]

    r = evaluate(tmp_path, by_address, TIMING)
    assert r["status"] == "wrong", r["message"]
    assert r["message"].startswith("after timing"), r["message"]


def test_a_cache_that_keeps_only_the_latest_address_is_caught(tmp_path: Path) -> None:
    """A cache of one entry (the last input address and its output) holds only the last timed call's set when
    timing ends: the recheck writes fresh inputs there first."""
    kept: dict[str, Any] = {}

    def latest(a: dict[str, Any], calls: int) -> Any:
        if kept.get("key") != id(a["B"]):
            kept.update(key=id(a["B"]), out=correct(a, calls))
        return kept["out"]

    r = evaluate(tmp_path, latest, TIMING)
    assert r["status"] == "wrong", r["message"]
    assert r["message"].startswith("after timing"), r["message"]


def test_outputs_left_as_the_poison_fill_are_unwritten(tmp_path: Path) -> None:
    # MLX fills poisoned outputs with a plain NaN; a kernel that writes half leaves the rest of it.
    def half(a: dict[str, Any], calls: int) -> Any:
        c = correct(a, calls)
        return mx.concatenate([c[: M // 2], mx.full((M - M // 2, N), float("nan"))])

    r = evaluate(tmp_path, half)
    assert r["status"] == "wrong" and "unwritten" in r["message"], r["message"]
    assert f"{(M - M // 2) * N} of {M * N} elements unwritten" in r["message"], r["message"]


def test_a_threadgroup_past_the_kernels_limit_is_reported_with_the_limit(tmp_path: Path) -> None:
    def too_big(a: dict[str, Any], calls: int) -> Any:
        raise RuntimeError("cudaLaunchKernel failed: too many resources requested for launch")

    r = evaluate(tmp_path, too_big)
    assert r["status"] == "error", r
    assert "refused the launch configuration (add: threadgroup 64 threads" in r["message"], r["message"]
    assert "at most 1024 threads" in r["message"] and "restart_worker" not in r


def test_bfloat16_arrays_are_refilled_in_place_through_their_bit_patterns() -> None:
    from ksearch_worker.targets.mlx import _refill

    from ksearch_worker.targets.mlx import _host_bits

    values = np.array([-0.5, 7.0, 1e-3], dtype=np.float32)
    target = {"x": mx.array([1.0, 2.0, 3.0]).astype(mx.bfloat16)}
    fresh = {"x": mx.array(values).astype(mx.bfloat16)}
    mx.eval(target["x"], fresh["x"])
    buffer = target["x"]
    # The host holds bfloat16 inputs as their exact float32 values (pool.py rounds them when drawing).
    host = np.array(fresh["x"].astype(mx.float32))
    assert _refill(mx, target, fresh, {"x": _host_bits(host, "bfloat16")})
    assert target["x"] is buffer and bool(mx.all(mx.equal(buffer, fresh["x"])).item())
    # Host contents that are not the device copy's are not relied on.
    other = {"x": mx.array([5.0, 6.0, 7.0]).astype(mx.bfloat16)}
    mx.eval(other["x"])
    assert not _refill(mx, other, fresh, {"x": _host_bits(host + 1, "bfloat16")})


def test_bfloat16_outputs_reach_the_host_as_their_exact_float32_values() -> None:
    """Copied as 16-bit patterns and widened on the host: bit for bit what MLX's own conversion gives, for
    every bfloat16 pattern (signed zeros, subnormals, infinities and NaN payloads included)."""
    from ksearch_worker.targets.mlx import _host

    every = mx.array(np.arange(1 << 16, dtype=np.uint16)).view(mx.bfloat16)
    got = _host(mx, every, "bfloat16")
    want = np.array(every.astype(mx.float32))
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(_host(mx, mx.array([1.5, -2.0]), "float32"), np.array([1.5, -2.0], dtype=np.float32))


class RealLaunches(MlxTarget):
    """mlx-cuda with its own launch code, on a machine said to have the back-end."""

    def __init__(self) -> None:
        super().__init__("mlx-cuda")

    def _available(self) -> bool:
        return True


def cluster_run(tmp_path: Path, target: MlxTarget) -> dict[str, Any]:
    (tmp_path / "reference.py").write_text(ADD_REFERENCE)
    (tmp_path / "baselines.py").write_text(ADD_BASELINES)
    task = load_task(str(tmp_path), add_task(baselines=[]), "mlx-cuda")
    target.compile_kernels("k1", [{"name": "add", "source": "C[0] = A[0];", "header": ""}])
    req = add_run("k1", seeds=[1])
    req["launches"][0].update(grid=[M * N, 1, 1], threadgroup=[64, 1, 1], cluster=[2, 1, 1])
    return run_request(req, task, target, RunState(pool=Pool()))


def test_a_cluster_launch_is_refused_under_cuda_graphs(tmp_path: Path, monkeypatch: Any) -> None:
    """Refused before any kernel is built (this MLX could not build one), as the configuration being invalid
    here: not the kernel's failure, and the worker stays (nothing ran)."""
    monkeypatch.delenv("MLX_USE_CUDA_GRAPHS", raising=False)
    monkeypatch.delenv("KSEARCH_ALLOW_CLUSTERS", raising=False)
    r = cluster_run(tmp_path, RealLaunches())
    assert r["status"] == "invalid" and "CUDA graphs" in r["message"], r
    assert not r.get("restart_worker")


def test_a_run_that_let_clusters_run_asks_for_a_fresh_worker(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("KSEARCH_ALLOW_CLUSTERS", "1")
    r = cluster_run(tmp_path, FakeDevice(correct))
    assert r["status"] == "passed" and r["restart_worker"] is True, r


def test_the_workers_own_kernels_are_readied_once_per_workload_shape() -> None:
    """`prepare` precedes every run; what `warm` compiles is compiled once per worker and workload shape."""
    from ksearch_worker.pool import Layout

    target = FakeDevice(correct)
    fills: list[int] = []
    target.poison = lambda arrays: fills.append(len(arrays))  # type: ignore[method-assign]
    small = Layout.of({"n": 4}, {"x": (4,), "y": (4,)}, {"x": "float16", "y": "float16"}, ["x"], ["y"])
    other = Layout.of({"n": 8}, {"x": (8,), "y": (8,)}, {"x": "float16", "y": "float16"}, ["x"], ["y"])
    target.warm(small)
    target.warm(small)
    target.warm(other)
    assert fills == [2, 2]  # float16 and float32, once per shape


def test_device_input_sets_kept_grow_with_the_device() -> None:
    from ksearch_worker.targets.mlx import device_sets_bytes

    gib = 1 << 30
    assert device_sets_bytes(None) == 4 * gib
    assert device_sets_bytes(16 * gib) == 4 * gib  # a 16 GB Mac: the floor
    assert device_sets_bytes(64 * gib) == 16 * gib
    assert device_sets_bytes(141 * gib) == 32 * gib  # an H200: the cap


def test_calls_on_checked_sets_not_drawn_for_comparison_are_screened_on_the_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel wrong on timed calls, none of them drawn for a host comparison and no recheck after timing:
    the device screen of the calls that met a checked set still catches it (and without the screen it would
    pass, so the screen is what catches it)."""
    from ksearch_worker.targets import TimedPlan
    from ksearch_worker.targets.mlx import Chain, MlxSession

    monkeypatch.setattr(TimedPlan, "compares", lambda self, call, index: False)
    monkeypatch.setattr(MlxSession, "recheck", lambda self, inputs: [])
    set_bytes = 3 * M * N * 4
    timing = {**TIMING, "supply_bytes": 6 * set_bytes, "min_samples": 4, "max_samples": 6}
    spoils = lambda a, c: correct(a, c) if c <= 12 else correct(a, c) + 0.5  # noqa: E731
    r = evaluate(tmp_path, spoils, timing)
    assert r["status"] == "wrong" and "sampled timed call" in r["message"], r["message"]
    monkeypatch.setattr(Chain, "screen", lambda self, index, produced: mx.array(True))
    again = tmp_path / "again"
    again.mkdir()
    r = evaluate(again, spoils, timing)
    assert r["status"] == "passed", r["message"]


def test_the_screens_reference_copies_are_the_runs_and_a_change_is_blamed_on_the_timing_that_made_it(
        tmp_path: Path) -> None:
    """The device copies of the checked sets' reference outputs that the screen compares against are the run's:
    a later candidate on the workload reuses them (no upload per candidate). They are fingerprinted like the
    kept input sets: either, found changed before a timing uses it (an earlier candidate's later calls wrote
    it), is uploaded afresh, not blamed on this candidate; a copy a timed call changes (so that its own wrong
    outputs pass the screen, or its rival's fail it) fails the candidate timed."""
    (tmp_path / "reference.py").write_text(ADD_REFERENCE)
    (tmp_path / "baselines.py").write_text(ADD_BASELINES)
    target = FakeDevice(correct)
    task = load_task(str(tmp_path), add_task(baselines=[]), "mlx-cuda")
    target.compile_kernels("k1", [{"name": "add", "source": "", "header": ""}])
    set_bytes = 3 * M * N * 4
    timing = {**TIMING, "supply_bytes": 6 * set_bytes, "min_samples": 4, "max_samples": 6}
    req = add_run("k1", seeds=[1, 2], timing=timing)
    req["launches"][0].update(grid=[M * N, 1, 1], threadgroup=[64, 1, 1])
    state = RunState(pool=Pool())
    prepare(prepare_request(req), task, target, state)
    r = run_request(req, task, target, state)
    assert r["status"] == "passed", r["message"]
    copies = {key: got[0][key[1]] for key, got in target._expected.items() if got is not None}
    assert copies, "no call met a checked set outside the ones drawn for the host: nothing was screened"
    r = run_request(req, task, target, state)
    assert r["status"] == "passed", r["message"]
    assert all(target._expected[key][0][key[1]] is exp for key, exp in copies.items())  # no upload
    # Written between timings (as an earlier candidate's later calls could): uploaded afresh, nobody blamed.
    key, exp = next(iter(copies.items()))
    target._expected[key] = ({key[1]: exp + 1.0}, target._expected[key][1])
    r = run_request(req, task, target, state)
    assert r["status"] == "passed", r["message"]
    again = target._expected[key]
    assert again is not None and again[0][key[1]] is not exp and bool(mx.array_equal(again[0][key[1]], exp).item())
    # A kept input set written between timings: the same.
    ident, (dev, stamp) = next(iter(target._sets.items()))
    spoilt = {n: a + 1 for n, a in dev.items()}
    target._sets[ident] = (spoilt, stamp)
    r = run_request(req, task, target, state)
    assert r["status"] == "passed", r["message"]
    assert target._sets.get(ident, (None,))[0] is not spoilt
    # Written while timed, after this timing checked the copy and used it (as a timed call of the candidate
    # could): its failure. The write follows each screen's use, so it does not depend on how many rounds run.
    real = target.expected_copy

    def then_written(ident: Any, name: str, ref: Any) -> Any:
        exp = real(ident, name, ref)
        got = target._expected[(ident, name)]
        if got is not None:
            target._expected[(ident, name)] = ({name: got[0][name] * 2.0}, got[1])
        return exp

    target.expected_copy = then_written  # type: ignore[method-assign]
    r = run_request(req, task, target, state)
    assert r["status"] == "wrong" and "reference outputs" in r["message"], r["message"]


def test_device_comparisons_are_bit_for_bit() -> None:
    """What the recheck and the second check run compare on the device: signed zeros differ, a NaN equals
    itself, and the copy of a first run's outputs is exact for every dtype."""
    from ksearch_worker.targets.mlx import _bits

    def same(a: Any, b: Any) -> bool:
        return bool(mx.all(mx.equal(_bits(mx, a), _bits(mx, b))).item())

    nan = mx.array([float("nan"), 1.0])
    assert same(nan, nan) and not same(mx.array([0.0]), mx.array([-0.0]))
    # A bool byte of 2 is true like a byte of 1, but not the same bits.
    two = mx.array(np.array([2], dtype=np.uint8)).view(mx.bool_)
    assert not same(two, mx.array([True]))
    for dtype in (mx.float32, mx.float16, mx.bfloat16, mx.int32, mx.uint8, mx.bool_):
        x = mx.array([1.5, -0.0, float("nan"), 3.0]).astype(dtype)
        copy = _bits(mx, x) + 0
        assert bool(mx.all(mx.equal(_bits(mx, x), copy)).item()), dtype


def test_kernels_are_named_by_their_code_so_candidates_share_the_modules_they_share() -> None:
    """MLX compiles a kernel under its name: a kernel two candidates share word for word (the parts an edit or
    a tunable left alone), launched alike, gets one name, so its module is compiled once per worker; any
    change to its code or its launch's signature is another name, and a module with variables of its own is
    never shared between candidates."""
    spec = {"source": "out[0] = x[0];", "header": "#define T 4", "header_name": "header"}
    sig = repr((("x",), ("out",), 0, False, None))
    name = MlxTarget._mlx_name("key1", "scan", spec, sig)
    assert name == MlxTarget._mlx_name("key2", "scan", dict(spec), sig)
    assert name.startswith("k") and name.endswith("_scan") and len(name) == len("k") + 16 + len("_scan")
    for field, other in (("source", "out[0] = 2 * x[0];"), ("header", "#define T 8"), ("header_name", "h2")):
        assert MlxTarget._mlx_name("key1", "scan", {**spec, field: other}, sig) != name
    assert MlxTarget._mlx_name("key1", "scan2", spec, sig) != name
    for other_sig in ((("y",), ("out",), 0, False, None), (("x",), ("out",), 1024, False, None),
                      (("x",), ("out",), 0, True, None), (("x",), ("out",), 0, False, [2, 1, 1])):
        assert MlxTarget._mlx_name("key1", "scan", spec, repr(other_sig)) != name
    # The digest frames each part, so moving text from the body into the header is another kernel.
    moved = {**spec, "source": spec["source"] + "#define T 4", "header": ""}
    assert MlxTarget._mlx_name("key1", "scan", moved, sig) != name
    # State of the module's own: one name per candidate.
    for stateful in ("__device__ int table[64];\n", "__device__ float total = 0;\n", "__managed__ int n;\n"):
        with_state = {**spec, "header": stateful + spec["header"]}
        assert MlxTarget._mlx_name("key1", "scan", with_state, sig) != MlxTarget._mlx_name("key2", "scan", with_state, sig)
    helper = {**spec, "header": "__device__ inline float twice(float v) { return 2 * v; }\n"}
    assert MlxTarget._mlx_name("key1", "scan", helper, sig) == MlxTarget._mlx_name("key2", "scan", helper, sig)
