"""The MLX targets' defences, run in-process with MLX's CPU build: the device kernel is replaced by a
Python function of MLX ops (this machine has neither Metal nor CUDA), so what is under test is the
checking around it: run twice, inputs unchanged, fresh inputs after timing, sticky device errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import ADD_BASELINES, ADD_REFERENCE, M, N, add_run, add_task
from ksearch_worker.evaluate import run as run_request
from ksearch_worker.targets.mlx import MlxTarget
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

    def _available(self) -> bool:
        return True

    def launch_all(self, key: str, launches: Any, arrays: dict[str, Any], shapes: Any, dtypes: Any,
                   poison: bool = True) -> dict[str, Any]:
        self.calls += 1
        return {**arrays, "C": self.kernel(arrays, self.calls)}


def evaluate(tmp_path: Path, kernel: Any, timing: dict[str, Any] | None = None) -> dict[str, Any]:
    (tmp_path / "reference.py").write_text(ADD_REFERENCE)
    (tmp_path / "baselines.py").write_text(ADD_BASELINES)
    target = FakeDevice(kernel)
    task = load_task(str(tmp_path), add_task(baselines=[]), "mlx-cuda")
    target.compile_mlx("k1", [{"name": "add", "source": "", "header": ""}])
    req = add_run("k1", seeds=[1, 2], timing=timing)
    req["launches"][0].update(grid=[M * N, 1, 1], threadgroup=[64, 1, 1])
    return run_request(req, task, target)


def correct(a: dict[str, Any], calls: int) -> Any:
    return 2 * a["A"] + a["B"]


def test_a_correct_kernel_passes_with_a_recheck_after_timing(tmp_path: Path) -> None:
    r = evaluate(tmp_path, correct, TIMING)
    assert r["status"] == "passed", r["message"]
    assert [c.get("after_timing", False) for c in r["checks"]] == [False, False, True]
    assert r["checks"][-1]["in_place"] is True  # MLX's CPU build lets the worker write the timed arrays
    assert r["timing"]["median_s"] > 0


def test_a_race_is_caught_by_running_twice(tmp_path: Path) -> None:
    noise = iter(range(1, 1000))
    r = evaluate(tmp_path, lambda a, c: correct(a, c) + 1e-7 * next(noise))
    assert r["status"] == "wrong" and "nondeterministic" in r["message"], r["message"]


def test_a_kernel_that_writes_its_input_is_caught(tmp_path: Path) -> None:
    def scribble(a: dict[str, Any], calls: int) -> Any:
        out = correct(a, calls)
        a["A"] = a["A"] + 1.0  # what a kernel writing through its const input pointer does
        return out

    r = evaluate(tmp_path, scribble)
    assert r["status"] == "wrong" and "input A modified" in r["message"], r["message"]


def test_a_kernel_that_stops_working_after_many_calls_is_caught_after_timing(tmp_path: Path) -> None:
    r = evaluate(tmp_path, lambda a, c: correct(a, c) if c <= 3 else a["B"], TIMING)
    assert r["status"] == "wrong" and r["message"].startswith("after timing"), r["message"]
    assert r["timing"] is not None


def test_a_stale_result_is_caught_on_fresh_inputs(tmp_path: Path) -> None:
    first: list[Any] = []

    def stale(a: dict[str, Any], calls: int) -> Any:
        if not first:
            first.append(correct(a, calls))
        return first[0]

    r = evaluate(tmp_path, stale)
    assert r["status"] == "wrong" and "outside atol" in r["message"], r["message"]


def test_a_sticky_device_error_is_a_crash_that_restarts_the_worker(tmp_path: Path) -> None:
    def faults(a: dict[str, Any], calls: int) -> Any:
        raise RuntimeError("[CUDA] an illegal memory access was encountered")

    r = evaluate(tmp_path, faults)
    assert r["status"] == "crash" and r["restart_worker"] is True, r


def test_an_ordinary_launch_error_keeps_the_worker(tmp_path: Path) -> None:
    def bad_shape(a: dict[str, Any], calls: int) -> Any:
        raise ValueError("[custom_kernel] threadgroup too large")

    r = evaluate(tmp_path, bad_shape)
    assert r["status"] == "error" and "restart_worker" not in r, r


def test_a_cache_keyed_by_input_address_is_caught_in_the_timed_buffers(tmp_path: Path) -> None:
    cache: dict[int, Any] = {}

    def by_address(a: dict[str, Any], calls: int) -> Any:
        key = id(a["A"])  # the MLX array object: what the timed buffers keep across the recheck
        if key not in cache:
            cache[key] = correct(a, calls)
        return cache[key]

    r = evaluate(tmp_path, by_address, TIMING)
    assert r["status"] == "wrong", r["message"]
    assert r["message"].startswith("after timing, on fresh inputs in the timed buffers"), r["message"]


def test_outputs_left_as_the_poison_fill_are_unwritten(tmp_path: Path) -> None:
    # MLX fills poisoned outputs with a plain NaN; a kernel that writes half leaves the rest of it.
    def half(a: dict[str, Any], calls: int) -> Any:
        c = correct(a, calls)
        return mx.concatenate([c[: M // 2], mx.full((M - M // 2, N), float("nan"))])

    r = evaluate(tmp_path, half)
    assert r["status"] == "wrong" and "unwritten" in r["message"], r["message"]
    assert f"{(M - M // 2) * N} of {M * N} elements unwritten" in r["message"], r["message"]



def test_a_one_entry_address_cache_is_caught_whichever_timed_set_it_holds(tmp_path: Path) -> None:
    last: dict[str, Any] = {}

    def one_slot(a: dict[str, Any], calls: int) -> Any:
        key = id(a["A"])
        if last.get("key") != key:
            last.update(key=key, out=correct(a, calls))
        return last["out"]

    r = evaluate(tmp_path, one_slot, TIMING)
    assert r["status"] == "wrong" and "after timing" in r["message"], r["message"]
    recheck = r["checks"][-1]
    assert recheck["in_place"] is True and recheck["input_sets"] > 1, recheck


def test_a_threadgroup_past_the_kernels_limit_is_reported_with_the_limit(tmp_path: Path) -> None:
    def too_big(a: dict[str, Any], calls: int) -> Any:
        raise RuntimeError("cudaLaunchKernel failed: too many resources requested for launch")

    r = evaluate(tmp_path, too_big)
    assert r["status"] == "error", r
    assert "refused the launch configuration (add: threadgroup 64 threads" in r["message"], r["message"]
    assert "at most 1024 threads" in r["message"] and "restart_worker" not in r


def test_bfloat16_arrays_are_refilled_in_place_through_their_bit_patterns() -> None:
    from ksearch_worker.targets.mlx import _refill

    target = {"x": mx.array([1.0, 2.0, 3.0]).astype(mx.bfloat16)}
    fresh = {"x": mx.array([-0.5, 7.0, 1e-3]).astype(mx.bfloat16)}
    mx.eval(target["x"], fresh["x"])
    buffer = target["x"]
    assert _refill(mx, target, fresh)
    assert target["x"] is buffer and bool(mx.all(mx.equal(buffer, fresh["x"])).item())


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
    target.compile_mlx("k1", [{"name": "add", "source": "C[0] = A[0];", "header": ""}])
    req = add_run("k1", seeds=[1])
    req["launches"][0].update(grid=[M * N, 1, 1], threadgroup=[64, 1, 1], cluster=[2, 1, 1])
    return run_request(req, task, target)


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
