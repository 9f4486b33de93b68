"""End to end: the real worker, real C kernels, a tiny task folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PYTHON_DIR, M, N, Worker, add_run, add_task, prepare_request, run_inputs

CORRECT = """
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
}
"""


def test_hello(worker: Worker) -> None:
    r = worker.ok("hello")
    assert r["worker_version"] == "0.1.0" and r["target"] == "cpu"
    assert r["python"] and r["numpy"] == "2.3.4"
    hw = r["hardware"]
    assert hw["kind"] == "cpu" and hw["name"] and hw["cores"] >= 1 and hw["cache_bytes"] > 0
    assert hw["peak_bandwidth_gbs"] > 0 and hw["peak_gflops"] > 0
    assert r["compiler"]["version"] and "-march=native" in r["compiler"]["flags"]
    assert hw["peaks"] == "measured"


def test_hello_takes_its_own_devices_remembered_peaks_and_no_other(worker: Worker) -> None:
    name = worker.ok("hello")["hardware"]["name"]
    other = {"another cpu": {"peak_bandwidth_gbs": 1.0, "peak_gflops": 2.0}}
    hw = worker.ok("hello", remembered=other)["hardware"]
    assert hw["peaks"] == "measured" and hw["peak_bandwidth_gbs"] != 1.0
    mine = {name: {"peak_bandwidth_gbs": 123.5, "peak_gflops": 456.0}}
    hw = worker.ok("hello", remembered={**other, **mine})["hardware"]
    assert hw["peaks"] == "remembered" and hw["peak_bandwidth_gbs"] == 123.5 and hw["peak_gflops"] == 456.0
    # An entry that is not a pair of positive numbers is measured over, never used.
    hw = worker.ok("hello", remembered={name: {"peak_bandwidth_gbs": -1, "peak_gflops": 456.0}})["hardware"]
    assert hw["peaks"] == "measured" and hw["peak_bandwidth_gbs"] > 0
    err = worker.request("hello", remembered=[1])
    assert not err["ok"] and err["error"]["kind"] == "bad_request" and "remembered" in err["error"]["message"]


def test_correct_kernel_passes(worker: Worker, add_dir: Path) -> None:
    assert worker.load(add_dir, add_task()) == {"baselines": ["numpy"]}
    key, compiled = worker.compile(CORRECT)
    assert compiled["status"] == "compiled" and compiled["seconds"] > 0
    # Every file named ./NAME: no name can become an option or a response file.
    assert "-include ./generated.h ./kernel.c" in compiled["command"] and compiled["command"].endswith("-lm")
    r = worker.run(add_run(key, seeds=[1, 2, 3]))
    assert r["status"] == "passed", r["message"]
    assert [c["seed"] for c in r["checks"]] == [1, 2, 3]
    c = r["checks"][0]
    assert c["passed"] and c["inputs_modified"] == [] and c["overruns"] == []
    stats = c["outputs"]["C"]
    assert stats["mismatches"] == 0 and stats["unwritten"] == 0 and stats["max_abs"] <= 1e-5
    assert len(stats["worst_index"]) == 2
    assert r["timing"] is None and r["baselines"] == {}


@pytest.mark.parametrize(("body", "reason"), [
    ("", f"output C: {M * N} of {M * N} elements unwritten (still NaN poison); first at [0, 0]"),
    ("for (int64_t i = 0; i < M * N / 2; i++) C[i] = 2 * A[i] + B[i];",
     f"output C: {M * N // 2} of {M * N} elements unwritten (still NaN poison); first at [{M // 2}, 0]"),
    ("for (int64_t i = 0; i < M * N; i++) C[i] = 1.0f;", "elements outside atol=1e-05 rtol=1e-05; worst at"),
    # A computed NaN is a wrong value, not an unwritten element: the poison NaN has its own payload.
    ("for (int64_t i = 0; i < M * N; i++) C[i] = i == 5 ? 0.0f / 0.0f : 2 * A[i] + B[i];",
     "output C: 1 elements outside atol=1e-05 rtol=1e-05; worst at [0, 5]: got nan"),
    ("for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i]; ((float*)A)[7] = 3.0f;",
     "input A modified by the kernel: 1 of"),
    ("for (int64_t i = 0; i <= M * N; i++) C[i] = 2 * A[i] + B[i];", "output C: written past its end"),
], ids=["nothing", "half", "constant", "computed-nan", "modifies-input", "past-end"])
def test_wrong_kernels(worker: Worker, add_dir: Path, body: str, reason: str) -> None:
    worker.load(add_dir, add_task())
    key = worker.compiled(f"void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {{ {body} }}")
    r = worker.run(add_run(key, timing={"enabled": True, "warmup_s": 0.01, "min_samples": 2, "max_samples": 2,
                                        "budget_s": 0.05, "min_sample_s": 0.0001}))
    assert r["status"] == "wrong"
    assert reason in r["message"], r["message"]
    assert len(r["checks"]) == 1 and not r["checks"][0]["passed"]
    assert r["timing"] is None  # never timed when a check failed


def test_wrong_stats(worker: Worker, add_dir: Path) -> None:
    worker.load(add_dir, add_task())
    key = worker.compiled("""
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
    for (int64_t i = N; i < N + 7; i++) C[i] = 1000.0f;       /* row 1, columns 0..6 */
    ((float*)B)[3] = 0.5f;
}
""")
    check = worker.run(add_run(key))["checks"][0]
    stats = check["outputs"]["C"]
    assert stats["mismatches"] == 7 and stats["unwritten"] == 0
    assert stats["worst_index"][0] == 1 and stats["max_abs"] > 900 and stats["max_rel"] > 1
    assert check["inputs_modified"] == ["B"]


def test_compile_error_reports_compiler_message(worker: Worker) -> None:
    key, r = worker.compile("void add(const float* A, const float* B, float* C, int64_t M, int64_t N) { int x = 1 }")
    assert r["status"] == "compile_error"
    assert "kernel.c" in r["log"] and "error" in r["log"] and "expected" in r["log"]
    reply = worker.request("run", **{k: v for k, v in add_run(key).items() if k != "op"})
    assert not reply["ok"] and reply["error"]["kind"] == "not_compiled"


def test_undefined_symbol_is_a_compile_error(worker: Worker) -> None:
    _, r = worker.compile("""
void helper_that_does_not_exist(void);
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) { helper_that_does_not_exist(); }
""")
    assert r["status"] == "compile_error" and "helper_that_does_not_exist" in r["log"]


def test_printf_does_not_corrupt_protocol(worker: Worker, add_dir: Path) -> None:
    worker.load(add_dir, add_task())
    key = worker.compiled("""
#include <stdio.h>
#include <unistd.h>
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    printf("{\\"id\\": 999, \\"ok\\": true} kernel-says-hello\\n");
    fflush(stdout);
    write(1, "raw-write-to-fd-1\\n", 18);
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
}
""")
    r = worker.run(add_run(key, seeds=[5]))
    assert r["status"] == "passed", r["message"]
    assert worker.ok("load_task", dir=str(add_dir), task=add_task()) == {"baselines": ["numpy"]}
    err = worker.stderr(expect="raw-write-to-fd-1")
    assert "kernel-says-hello" in err and "raw-write-to-fd-1" in err


def test_where_timed_inputs_repeat_every_call_on_a_checked_set_is_compared(worker: Worker, add_dir: Path) -> None:
    """A supply too small for every call to have inputs of its own: the checked sets are met by many calls,
    and on the CPU target each of them is compared (its outputs are on the host already), not only the calls
    drawn for comparison."""
    worker.load(add_dir, add_task())
    key = worker.compiled(CORRECT)
    set_bytes = 3 * M * N * 4
    timing = {"enabled": True, "warmup_s": 0.01, "min_samples": 20, "max_samples": 25, "budget_s": 0.2,
              "min_sample_s": 0.0002, "supply_bytes": 8 * set_bytes}
    req = add_run(key, timing=timing, incumbent=key)
    r = worker.run(req)
    assert r["status"] == "passed", r["message"]
    t = r["timing"]
    assert t["distinct_inputs"] < t["calls"], t  # the inputs repeat
    assert t["sampled_checks"] > len(req["inputs"]["timed_checks"]), t
    assert r["incumbent"]["sampled_checks"] > len(req["inputs"]["timed_checks"]), r["incumbent"]


def test_timing_is_sane_and_baseline_timed(worker: Worker, add_dir: Path) -> None:
    worker.load(add_dir, add_task())
    key = worker.compiled(CORRECT)
    timing = {"enabled": True, "warmup_s": 0.01, "min_samples": 4, "max_samples": 6, "budget_s": 0.05,
              "min_sample_s": 0.0002}
    r = worker.run(add_run(key, timing=timing, baselines=["numpy"]))
    assert r["status"] == "passed", r["message"]
    assert set(r["baselines"]) == {"numpy"}
    for t in (r["timing"], r["baselines"]["numpy"]):
        assert 0 < t["min_s"] <= t["median_s"] <= t["max_s"]
        assert t["iqr_s"] >= 0 and t["reps"] >= 1
        assert 4 <= t["samples"] <= 6
        assert t["distinct_inputs"] > 1 and t["calls"] >= t["samples"]
    # Every timed call of the candidate ran on inputs of its own, a sample of them compared afterwards.
    assert r["timing"]["distinct_inputs"] == r["timing"]["calls"] and r["timing"]["sampled_checks"] >= 1
    assert r["timing"]["rtt_s"] > 0 and worker.last_prepare["baselines_timed_now"] is True
    # The baselines are timed once per run (by `prepare`): the next candidate gets them from the cache.
    again = worker.run(add_run(key, timing=timing, baselines=["numpy"]))
    assert again["baselines"]["numpy"]["cached"] is True and worker.last_prepare["baselines_timed_now"] is False
    assert worker.last_prepare["baselines"]["numpy"]["cached"] is True
    split = again["split"]
    assert split["total_s"] >= split["kernel_s"] > 0 and split["overhead_s"] >= 0


def test_a_baseline_computing_something_else_is_named_not_timed(worker: Worker, add_dir: Path) -> None:
    """Before a baseline is timed it computes the task's outputs on a reference set: one that computes something
    else (here 1% off on one input) would be a time of another problem, so it is named with why instead."""
    worker.load(add_dir, add_task(baselines=[{"name": "numpy", "function": "numpy_add"},
                                             {"name": "other", "function": "numpy_add_other"}]))
    key = worker.compiled(CORRECT)
    timing = {"enabled": True, "warmup_s": 0.01, "min_samples": 4, "max_samples": 6, "budget_s": 0.05,
              "min_sample_s": 0.0002}
    r = worker.run(add_run(key, timing=timing, baselines=["numpy", "other"]))
    assert r["status"] == "passed", r["message"]
    assert set(r["baselines"]) == {"numpy"}, r["baselines"]
    why = worker.last_prepare["baselines_unavailable"]["other"]
    assert "differ from the task's reference" in why and "output C" in why and "atol=1e-05" in why, why


def test_distributions_reach_the_kernel_without_zeros(worker: Worker, add_dir: Path) -> None:
    # randint(-1, 2) draws -1, 0, 1: the zeros must have been replaced before the kernel sees A.
    worker.load(add_dir, add_task(init_a="randint(-1, 2)"))
    key = worker.compiled("""
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M * N; i++) C[i] = (A[i] == 0.0f || B[i] == 0.0f) ? 12345.0f : 2 * A[i] + B[i];
}
""")
    r = worker.run(add_run(key, seeds=list(range(1, 6))))
    assert r["status"] == "passed", r["message"]


def _two_dtype_task(tmp_path: Path, f32: tuple[float, float], f64: tuple[float, float]) -> tuple[Path, dict]:
    (tmp_path / "reference.py").write_text("def reference(inputs, dims):\n"
                                           "    return {'Y32': 3 * inputs['X'], 'Y64': 3 * inputs['X']}\n")
    task = {"inputs": [{"name": "X", "init": "uniform(1, 2)"}], "outputs": [{"name": "Y32"}, {"name": "Y64"}],
            "tolerances": {"float32": {"atol": 0.0, "rtol": f32[1]}, "float64": {"atol": 0.0, "rtol": f64[1]}},
            "baselines": []}
    return tmp_path, task


def test_tolerances_apply_per_dtype(worker: Worker, tmp_path: Path) -> None:
    proto = "#include <stdint.h>\nvoid scale(const double* X, float* Y32, double* Y64, int64_t n);\n"
    # Both outputs carry a relative error of 1e-6: loose for float32 at rtol 1e-4, not for float64 at 1e-9.
    key = worker.compiled("""
void scale(const double* X, float* Y32, double* Y64, int64_t n) {
    for (int64_t i = 0; i < n; i++) { Y32[i] = (float)(3 * X[i] * (1 + 1e-6)); Y64[i] = 3 * X[i] * (1 + 1e-6); }
}
""", proto)
    req = {"op": "run", "key": key,
           "workload": {"name": "w", "dims": {"n": 100}, "shapes": {"X": [100], "Y32": [100], "Y64": [100]},
                        "dtypes": {"X": "float64", "Y32": "float32", "Y64": "float64"}},
           "buffers": [], "launches": [{"kernel": "scale", "inputs": ["X"], "outputs": ["Y32", "Y64"],
                                        "scalars": [100]}],
           "inputs": run_inputs([3]), "timing": {"enabled": False}, "baselines": []}
    worker.load(*_two_dtype_task(tmp_path, f32=(0, 1e-4), f64=(0, 1e-9)))
    r = worker.run(dict(req))
    assert r["status"] == "wrong" and "output Y64: 100 elements outside" in r["message"] and "Y32" not in r["message"]
    worker.load(*_two_dtype_task(tmp_path, f32=(0, 1e-9), f64=(0, 1e-4)))
    r = worker.run(dict(req))
    assert r["status"] == "wrong" and "output Y32:" in r["message"] and "Y64" not in r["message"]
    worker.load(*_two_dtype_task(tmp_path, f32=(0, 1e-4), f64=(0, 1e-4)))
    assert worker.run(dict(req))["status"] == "passed"


C_TYPES = {"float16": "uint16_t", "float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t",
           "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "uint32": "uint32_t", "bool": "_Bool"}


def _copy_request(key: str, dtype: str, n: int) -> dict:
    return {"op": "run", "key": key,
            "workload": {"name": "w", "dims": {"n": n}, "shapes": {"X": [n], "Y": [n]},
                         "dtypes": {"X": dtype, "Y": dtype}},
            "buffers": [], "launches": [{"kernel": "copy", "inputs": ["X"], "outputs": ["Y"], "scalars": [n]}],
            "inputs": run_inputs([1, 2]), "timing": {"enabled": False}, "baselines": []}


@pytest.mark.parametrize("dtype", list(C_TYPES))
def test_every_dtype(worker: Worker, tmp_path: Path, dtype: str) -> None:
    (tmp_path / "reference.py").write_text("def reference(inputs, dims):\n    return {'Y': inputs['X']}\n")
    worker.load(tmp_path, {"inputs": [{"name": "X", "init": "randint(0, 100)" if dtype != "float32" else None}],
                           "outputs": [{"name": "Y"}], "tolerances": {dtype: {"atol": 0, "rtol": 0}}, "baselines": []})
    t = C_TYPES[dtype]
    proto = f"#include <stdint.h>\nvoid copy(const {t}* X, {t}* Y, int64_t n);\n"
    signature = f"void copy(const {t}* X, {t}* Y, int64_t n)"
    good = worker.compiled(f"{signature} {{ for (int64_t i = 0; i < n; i++) Y[i] = X[i]; }}", proto)
    r = worker.run(_copy_request(good, dtype, 300))
    assert r["status"] == "passed", r["message"]
    half = worker.compiled(f"{signature} {{ for (int64_t i = 0; i < n / 2; i++) Y[i] = X[i]; }}", proto)
    r = worker.run(_copy_request(half, dtype, 300))
    assert r["status"] == "wrong"
    assert "150 of 300 elements unwritten" in r["message"] and "first at [150]" in r["message"]


def test_bfloat16_is_unsupported(worker: Worker, add_dir: Path) -> None:
    worker.load(add_dir, add_task())
    req = add_run("whatever")
    req["workload"]["dtypes"]["A"] = "bfloat16"
    reply = worker.request("run", **{k: v for k, v in req.items() if k != "op"})
    assert not reply["ok"] and reply["error"]["kind"] == "unsupported_dtype"


def test_missing_baseline_function_is_bad_task(worker: Worker, add_dir: Path) -> None:
    reply = worker.request("load_task", dir=str(add_dir),
                           task=add_task(baselines=[{"name": "fast", "function": "no_such_fn"}]))
    assert not reply["ok"] and reply["error"]["kind"] == "bad_task"
    assert "baselines.py" in reply["error"]["message"] and "no_such_fn" in reply["error"]["message"]


def test_baselines_for_other_targets_are_skipped(worker: Worker, add_dir: Path) -> None:
    task = add_task(baselines=[{"name": "mlx", "function": "no_such_fn", "targets": ["mlx-metal"]}])
    assert worker.load(add_dir, task) == {"baselines": []}


def test_reference_exception_is_status_error(worker: Worker, tmp_path: Path) -> None:
    (tmp_path / "reference.py").write_text("def reference(inputs, dims):\n    raise ValueError('boom in reference')\n")
    worker.load(tmp_path, add_task(baselines=[]))
    req = add_run(worker.compiled(CORRECT))
    # Preparing the workload fails as the task's fault, not a candidate's...
    reply = worker.request("prepare", **prepare_request(req))
    assert not reply["ok"] and reply["error"]["kind"] == "bad_task" and "boom in reference" in reply["error"]["message"]
    # ...and a run without it (the reference computed in the run) is an error, never the candidate's failure.
    req.pop("op")
    r = worker.ok("run", **req)
    assert r["status"] == "error" and "boom in reference" in r["message"]
    assert worker.ok("load_task", dir=str(tmp_path), task=add_task(baselines=[])) == {"baselines": []}


def test_unknown_op_and_malformed_json(worker: Worker) -> None:
    reply = worker.request("frobnicate")
    assert reply["ok"] is False and reply["error"]["kind"] == "bad_request"
    assert "frobnicate" in reply["error"]["message"]
    reply = worker.send_line(b'{"id": 3, "op": "hello"')
    assert reply["ok"] is False and reply["id"] is None and reply["error"]["kind"] == "bad_request"
    reply = worker.send_line(b"[1, 2]")
    assert reply["ok"] is False and reply["error"]["kind"] == "bad_request"
    assert worker.request("frobnicate")["ok"] is False  # still serving


def test_replies_are_strict_json(worker: Worker, add_dir: Path) -> None:
    # A kernel writing inf makes max_abs infinite; JSON has no infinity, so it must come back as null.
    worker.load(add_dir, add_task())
    key = worker.compiled("""
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M * N; i++) C[i] = 1.0f / 0.0f;
}
""")
    assert worker.proc.stdin is not None and worker.proc.stdout is not None
    req = add_run(key)
    req["id"] = 4242
    worker.proc.stdin.write(json.dumps(req).encode() + b"\n")
    worker.proc.stdin.flush()
    raw = worker.proc.stdout.readline()
    reply = json.loads(raw, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert reply["result"]["status"] == "wrong" and reply["result"]["checks"][0]["outputs"]["C"]["max_abs"] is None


def test_exits_zero_on_end_of_input(tmp_path: Path) -> None:
    w = Worker(tmp_path)
    assert w.request("frobnicate")["ok"] is False
    assert w.close() == 0


def _state(pid: int) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except OSError:
        return None
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_dies_with_parent(tmp_path: Path) -> None:
    # The shell starts the worker, prints its pid and exits. The worker's stdin is our pipe, kept open, so
    # only the parent's death can end it (a plain `&` would give it /dev/null, hence the explicit <&3).
    env = {**os.environ, "PYTHONPATH": str(PYTHON_DIR)}
    script = f"exec 3<&0; '{sys.executable}' -m ksearch_worker --target cpu <&3 3<&- & echo $!; sleep 1"
    shell = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=env)
    assert shell.stdout is not None
    pid = int(shell.stdout.readline())
    assert _state(pid) not in (None, "Z")
    shell.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(pid) in (None, "Z")
    assert shell.stdin is not None
    shell.stdin.close()
