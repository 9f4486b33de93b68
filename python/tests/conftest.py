"""Helpers that drive the real worker as a subprocess over its JSON-lines protocol."""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PYTHON_DIR))  # unit tests import ksearch_worker directly

REPLY_TIMEOUT_S = 60.0

ADD_REFERENCE = """
def reference(inputs, dims):
    return {"C": 2 * inputs["A"] + inputs["B"]}
"""
ADD_BASELINES = """
def numpy_add(inputs, dims):
    return {"C": 2 * inputs["A"] + inputs["B"]}

def numpy_add_other(inputs, dims):  # another computation (B weighed 1.01): not a baseline of this task
    return {"C": 2 * inputs["A"] + 1.01 * inputs["B"]}
"""
ADD_PROTO = "#include <stdint.h>\nvoid add(const float* A, const float* B, float* C, int64_t M, int64_t N);\n"
M, N = 48, 40


def add_task(init_a: str = "uniform(-1, 1)", atol: float = 1e-5, rtol: float = 1e-5,
             baselines: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "inputs": [{"name": "A", "init": init_a}, {"name": "B"}],
        "outputs": [{"name": "C"}],
        "tolerances": {"float32": {"atol": atol, "rtol": rtol}},
        "baselines": [{"name": "numpy", "function": "numpy_add"}] if baselines is None else baselines,
    }


def run_inputs(seeds: list[int] | None = None, pool: str = "add") -> dict[str, Any]:
    """The `inputs` of a run request: reference seeds for the checks, the recheck and the timed sample."""
    checks = seeds or [11, 22, 33]
    return {"pool": pool, "checks": checks, "recheck": 1001 + max(checks), "timed_checks": [2001 + max(checks), 3001 + max(checks)],
            "supply": 77, "order": 5}


def add_run(key: str, *, seeds: list[int] | None = None, timing: dict[str, Any] | None = None,
            baselines: list[str] | None = None, incumbent: str | None = None) -> dict[str, Any]:
    shape = [M, N]
    return {
        "op": "run", "key": key,
        "workload": {"name": "small", "dims": {"M": M, "N": N},
                     "shapes": {"A": shape, "B": shape, "C": shape},
                     "dtypes": {"A": "float32", "B": "float32", "C": "float32"}},
        "buffers": [],
        "launches": [{"kernel": "add", "inputs": ["A", "B"], "outputs": ["C"], "scalars": [M, N],
                      "grid": None, "threadgroup": None, "template": None}],
        "inputs": run_inputs(seeds),
        "timing": timing or {"enabled": False},
        "baselines": baselines or [],
        "incumbent": None if incumbent is None else {
            "key": incumbent, "buffers": [],
            "launches": [{"kernel": "add", "inputs": ["A", "B"], "outputs": ["C"], "scalars": [M, N],
                          "grid": None, "threadgroup": None, "template": None}]},
    }


def prepare_request(run: dict[str, Any], retime: bool = False) -> dict[str, Any]:
    """The `prepare` request the Rust side sends before `run`: the pool's every seed, the supply, baselines."""
    i = run["inputs"]
    return {"workload": run["workload"], "timing": run["timing"], "baselines": run["baselines"],
            "retime_baselines": retime,
            "inputs": {"pool": i["pool"], "seeds": [*i["checks"], i["recheck"], *i["timed_checks"]],
                       "supply": i["supply"]}}


class Worker:
    """`python -m ksearch_worker --target cpu`, its stderr a pipe as the Rust side gives it (a kernel host may
    write no file, so its output could not reach a file), drained into memory."""

    def __init__(self, tmp: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(PYTHON_DIR)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ksearch_worker", "--target", "cpu"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self._err = bytearray()
        self._err_lock = threading.Lock()
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        self._ids = itertools.count(1)
        self._keys = itertools.count(1)
        self.tmp = tmp

    def send_line(self, line: bytes) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_TIMEOUT_S)
        assert ready, f"no reply within {REPLY_TIMEOUT_S}s; stderr:\n{self.stderr()}"
        raw = self.proc.stdout.readline()
        assert raw, f"worker closed stdout (rc={self.proc.poll()}); stderr:\n{self.stderr()}"
        return json.loads(raw)

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        rid = next(self._ids)
        reply = self.send_line(json.dumps({"id": rid, "op": op, **fields}).encode())
        assert reply["id"] == rid
        assert set(reply) == {"id", "ok", "result" if reply["ok"] else "error"}
        return reply

    def ok(self, op: str, **fields: Any) -> dict[str, Any]:
        reply = self.request(op, **fields)
        assert reply["ok"], reply
        return reply["result"]

    def load(self, dir: Path, task: dict[str, Any]) -> dict[str, Any]:
        return self.ok("load_task", dir=str(dir), task=task)

    def compile(self, source: str, proto: str = ADD_PROTO) -> tuple[str, dict[str, Any]]:
        """Writes one kernel and its generated prototype into a fresh folder, compiles it; returns (key, result)."""
        key = f"k{next(self._keys):04d}"
        folder = self.tmp / "candidates" / key
        folder.mkdir(parents=True)
        (folder / "kernel.c").write_text(source)
        (folder / "generated.h").write_text(proto)
        return key, self.ok("compile", key=key, dir=str(folder), sources=["kernel.c"], include="generated.h")

    def compiled(self, source: str, proto: str = ADD_PROTO) -> str:
        key, result = self.compile(source, proto)
        assert result["status"] == "compiled", result["log"]
        return key

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        """`prepare`, then `run`, as the Rust side sends them."""
        self.last_prepare = self.ok("prepare", **prepare_request(req))
        return self.ok(req.pop("op"), **req)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := self.proc.stderr.read1(65536):
            with self._err_lock:
                self._err += chunk

    def stderr(self, expect: str = "", wait_s: float = 10.0) -> str:
        """What the worker wrote to stderr so far; with `expect`, waits (up to `wait_s`) for the pipe to have
        drained that far."""
        deadline = time.monotonic() + wait_s
        while True:
            with self._err_lock:
                text = self._err.decode(errors="replace")
            if expect in text or time.monotonic() > deadline:
                return text
            time.sleep(0.02)

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=30)
        self._drain.join(timeout=5)
        return rc


@pytest.fixture(scope="session")
def add_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("task_add")
    (folder / "reference.py").write_text(ADD_REFERENCE)
    (folder / "baselines.py").write_text(ADD_BASELINES)
    return folder


@pytest.fixture(scope="session")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """One worker for the whole session, as the Rust side keeps one per device."""
    w = Worker(tmp_path_factory.mktemp("worker"))
    yield w
    assert w.close() == 0
