"""The cuda target's defences, run in-process on a stand-in for CuPy (fake_cupy.py: device arrays are numpy
arrays, a compiled function is a Python function of them), since this machine has no NVIDIA GPU. The module
itself is compiled for real, by NVRTC in the jail for sm_90a; what is under test is everything around the
launches: guards before and after every array, poisoned outputs, inputs compared, two runs compared, timed
calls sampled and compared, input sets fingerprinted, fresh inputs where timing ran, sticky device errors,
refused launches, baselines that cannot run here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fake_cupy
import numpy as np
import pytest
from conftest import ADD_REFERENCE, M, N, add_run, add_task, prepare_request
from ksearch_worker.evaluate import RunState, prepare
from ksearch_worker.evaluate import run as run_request
from ksearch_worker.pool import Pool
from ksearch_worker.targets import cuda
from ksearch_worker.task import load_task

TIMING = {"enabled": True, "warmup_s": 0.0, "min_samples": 2, "max_samples": 3, "budget_s": 0.05,
          "min_sample_s": 0.0001}
SOURCE = """__global__ void add(const float* A, const float* B, float* C, int M, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < M * N) C[i] = 2.0f * A[i] + B[i];
}
"""
BASELINES = """
def needs_a_library(inputs, dims):
    import a_library_this_machine_lacks
"""


@pytest.fixture(autouse=True)
def fake_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda, "_cupy", fake_cupy)
    fake_cupy.KERNELS.clear()
    fake_cupy.LAUNCHES.clear()


def root(a: np.ndarray) -> np.ndarray:
    """The allocation an array is a view of (a guarded array: guard bytes, the array, guard bytes)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def evaluate(tmp_path: Path, kernel: Any, timing: dict[str, Any] | None = None, source: str = SOURCE,
             baselines: list[str] | None = None, incumbent: bool = False) -> dict[str, Any]:
    """One `run` of the `add` task's kernel on the cuda target: `kernel(A, B, C, calls)` (numpy arrays) stands
    in for the compiled function's work on the device."""
    (tmp_path / "reference.py").write_text(ADD_REFERENCE)
    (tmp_path / "baselines.py").write_text(BASELINES)
    calls = [0]

    def launch(args: list[Any], grid: Any, block: Any, shared: int) -> None:
        a, b, c, m, n = args
        assert (int(m), int(n)) == (M, N) and isinstance(m, np.int32)
        calls[0] += 1
        kernel(a.a, b.a, c.a, calls[0])

    fake_cupy.KERNELS["add"] = launch
    spec = [{"name": "needs_a_library", "function": "needs_a_library", "targets": ["cuda"]}]
    task = load_task(str(tmp_path), add_task(baselines=spec if baselines else []), "cuda")
    target = cuda.CudaTarget()
    kernels = [{"name": "add", "source": source, "source_name": "add.cu", "header": "", "header_name": None}]
    target.compile_kernels("k1", kernels, {"add.cu": source})
    req = add_run("k1", seeds=[1, 2], timing=timing, baselines=baselines)
    req["launches"][0].update(grid=[M * N, 1, 1], threadgroup=[64, 1, 1], template={})
    if incumbent:
        target.compile_kernels("k0", kernels, {"add.cu": source})
        req["incumbent"] = {"key": "k0", "buffers": [], "launches": [dict(req["launches"][0])]}
    state = RunState(pool=Pool())
    prepared = prepare(prepare_request(req), task, target, state)
    result = run_request(req, task, target, state)
    result["prepared"] = prepared
    return result


def correct(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
    c[...] = 2 * a + b


def test_a_correct_kernel_passes_with_a_recheck_after_timing(tmp_path: Path) -> None:
    r = evaluate(tmp_path, correct, TIMING)
    assert r["status"] == "passed", r["message"]
    assert r["checks"][-1]["after_timing"] is True and not any(c.get("after_timing") for c in r["checks"][:2])
    assert r["timing"]["median_s"] > 0 and r["timing"]["sampled_checks"] == 2
    # ceil(M N / 64) blocks of 64 threads, every launch.
    assert {(g, b) for _, g, b, _ in fake_cupy.LAUNCHES} == {((-(-M * N // 64), 1, 1), (64, 1, 1))}


def test_a_candidate_is_timed_beside_its_incumbent_for_a_verdict(tmp_path: Path) -> None:
    r = evaluate(tmp_path, correct, TIMING, incumbent=True)
    assert r["status"] == "passed", r["message"]
    assert r["verdict"]["verdict"] in ("faster", "slower", "within noise") and r["incumbent"]["median_s"] > 0


def test_a_kernel_that_stops_working_when_timed_is_caught(tmp_path: Path) -> None:
    def tired(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        c[...] = 2 * a + b if calls <= 4 else 1.0

    r = evaluate(tmp_path, tired, TIMING)
    assert r["status"] == "wrong" and r["message"].startswith("after timing"), r["message"]


def test_a_kernel_that_writes_nothing_when_timed_is_caught(tmp_path: Path) -> None:
    def idle(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        if calls <= 4:
            correct(a, b, c, calls)

    r = evaluate(tmp_path, idle, TIMING)
    assert r["status"] == "wrong" and "after timing" in r["message"], r["message"]


def test_a_kernel_that_works_only_on_poisoned_outputs_is_caught(tmp_path: Path) -> None:
    """The checks poison outputs; a kernel that computes only then (and leaves whatever its output held
    otherwise) must not pass because the calls compared after timing looked like checks."""
    def only_when_checked(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        if np.isnan(c).any():
            correct(a, b, c, calls)

    r = evaluate(tmp_path, only_when_checked, TIMING)
    assert r["status"] == "wrong" and "after timing" in r["message"], r["message"]


def test_a_compared_call_writes_where_every_call_writes(tmp_path: Path) -> None:
    """Timed calls write two output addresses in turn, compared calls included: an address tells nothing."""
    seen: list[int] = []

    def record(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        correct(a, b, c, calls)
        if calls > 3:  # after the checks
            seen.append(c.__array_interface__["data"][0])

    r = evaluate(tmp_path, record, TIMING)
    assert r["status"] == "passed", r["message"]
    timed = seen[: len(seen) - 2]  # the recheck's calls last
    assert len(set(timed)) == 2 and r["timing"]["sampled_checks"] == 2, (len(set(timed)), r["timing"])


def test_a_race_is_caught_by_running_twice(tmp_path: Path) -> None:
    def racy(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        c[...] = 2 * a + b + 1e-7 * calls

    r = evaluate(tmp_path, racy)
    assert r["status"] == "wrong" and "two runs" in r["message"], r["message"]


def test_a_kernel_that_writes_its_input_is_caught(tmp_path: Path) -> None:
    def scribble(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        correct(a, b, c, calls)
        a[0, 0] += 1.0

    r = evaluate(tmp_path, scribble)
    assert r["status"] == "wrong" and "input A modified" in r["message"], r["message"]


def test_a_kernel_that_writes_its_timed_inputs_is_caught(tmp_path: Path) -> None:
    def scribble_when_timed(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        correct(a, b, c, calls)
        if calls > 4:
            b[0, 0] = 5.0

    r = evaluate(tmp_path, scribble_when_timed, TIMING)
    assert r["status"] == "wrong" and "after timing" in r["message"], r["message"]


@pytest.mark.parametrize("where", ["after", "before"])
def test_a_write_past_either_end_of_an_output_is_caught(tmp_path: Path, where: str) -> None:
    def overrun(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        correct(a, b, c, calls)
        raw = root(c)
        raw[cuda.GUARD + c.nbytes if where == "after" else cuda.GUARD - 1] = 0

    r = evaluate(tmp_path, overrun)
    assert r["status"] == "wrong" and "C: written outside its bounds" in r["message"], r["message"]
    assert r["checks"][0]["overruns"] == ["C"]


def test_a_result_kept_by_input_address_is_caught_on_fresh_inputs_where_timing_ran(tmp_path: Path) -> None:
    kept: dict[int, np.ndarray] = {}

    def by_address(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        # Honest in the checks (calls 1 to 3; their arrays are fresh allocations, whose addresses recur), then
        # answering from what it kept for each input address.
        at = a.__array_interface__["data"][0]
        if calls <= 3 or at not in kept:
            kept[at] = 2 * a + b
        c[...] = kept[at]

    r = evaluate(tmp_path, by_address, TIMING)
    assert r["status"] == "wrong" and "fresh inputs where timing ran" in r["message"], r["message"]


def test_a_sticky_device_error_is_a_crash_that_restarts_the_worker(tmp_path: Path) -> None:
    def faults(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        raise fake_cupy.CUDADriverError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")

    r = evaluate(tmp_path, faults)
    assert r["status"] == "crash" and r.get("restart_worker") is True, r


def test_a_sticky_error_is_known_by_its_code_whatever_it_says(tmp_path: Path) -> None:
    def faults(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        raise fake_cupy.CUDADriverError("CUDA_ERROR_INVALID_PC: invalid program counter", status=718)

    r = evaluate(tmp_path, faults)
    assert r["status"] == "crash" and r.get("restart_worker") is True, r


def test_a_refused_launch_is_the_candidates_error_with_the_limits(tmp_path: Path) -> None:
    def refused(a: np.ndarray, b: np.ndarray, c: np.ndarray, calls: int) -> None:
        raise fake_cupy.CUDADriverError("CUDA_ERROR_OUT_OF_RESOURCES: too many resources requested for launch")

    r = evaluate(tmp_path, refused)
    assert r["status"] == "error" and "refused the launch configuration" in r["message"], r
    assert not r.get("restart_worker")


def test_buffers_the_device_cannot_hold_make_an_invalid_plan(tmp_path: Path) -> None:
    (tmp_path / "reference.py").write_text(ADD_REFERENCE)
    fake_cupy.KERNELS["add"] = lambda args, grid, block, shared: None
    task = load_task(str(tmp_path), add_task(baselines=[]), "cuda")
    target = cuda.CudaTarget()
    source = SOURCE.replace("float* C, int M", "float* C, float* scratch, int M")
    target.compile_kernels("k1", [{"name": "add", "source": source, "source_name": "add.cu", "header": "",
                                   "header_name": None}], {"add.cu": source})
    req = add_run("k1", seeds=[1])
    req["buffers"] = [{"name": "scratch", "shape": [1 << 40], "dtype": "float32"}]
    req["launches"][0].update(grid=[M * N, 1, 1], threadgroup=[64, 1, 1], outputs=["C", "scratch"])
    state = RunState(pool=Pool())
    prepare(prepare_request(req), task, target, state)
    r = run_request(req, task, target, state)
    assert r["status"] == "invalid" and "cannot hold" in r["message"] and "scratch" in r["message"], r


def test_a_compile_error_is_reported_with_its_file_and_line(tmp_path: Path) -> None:
    bad = SOURCE.replace("2.0f * A[i]", "2.0f * undeclared[i]")
    r = evaluate(tmp_path, correct, source=bad)
    assert r["status"] == "compile_error" and "add.cu(3)" in r["message"] and "undeclared" in r["message"], r


def test_a_baseline_whose_library_is_missing_is_named_not_timed(tmp_path: Path) -> None:
    r = evaluate(tmp_path, correct, TIMING, baselines=["needs_a_library"])
    assert r["status"] == "passed", r["message"]
    why = r["prepared"]["baselines_unavailable"]["needs_a_library"]
    assert "a_library_this_machine_lacks" in why or "torch is missing" in why, why
    assert r["prepared"]["baselines"] == {} and r["baselines"] == {}
