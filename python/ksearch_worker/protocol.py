"""The JSON-lines loop (docs/formats.md §3): one reply line per request line, flushed at once."""

from __future__ import annotations

import json
import os
import math
import platform
import time
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np

from . import WORKER_VERSION, evaluate
from .errors import WorkerError
from .log import say
from .pool import Pool
from .targets import Target
from .task import Task, load_task, tail

def jail_report() -> dict[str, Any]:
    """What confines candidate code here (jail.py), measured by starting the jail once."""
    from .jail import probe

    return probe()


def _remembered(req: dict[str, Any]) -> dict[str, Any]:
    """The hello's `remembered` peaks by device name (an object; anything else is a bad request)."""
    got = req.get("remembered", {})
    if not isinstance(got, dict):
        raise WorkerError("bad_request", "hello.remembered must be an object of peaks by device name")
    return got


Handler = Callable[[dict[str, Any]], dict[str, Any]]


class Worker:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.task: Task | None = None
        # The run's input pool and baselines' times, kept between requests (a new task starts afresh).
        self.state = evaluate.RunState(pool=Pool(os.environ.get("KSEARCH_REFERENCE_CACHE") or None))
        self.ops: dict[str, Handler] = {
            "hello": self.hello, "load_task": self.load_task, "compile": self.compile, "prepare": self.prepare,
            "run": self.run, "precompile": self.precompile,
        }

    def hello(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"worker_version": WORKER_VERSION, "python": platform.python_version(), "numpy": np.__version__,
                "target": self.target.name, "landlock_abi": int(os.environ.get("KSEARCH_LANDLOCK_ABI", "0")),
                "jail": jail_report(), **self.target.describe(_remembered(req))}

    def load_task(self, req: dict[str, Any]) -> dict[str, Any]:
        dir, spec = req.get("dir"), req.get("task")
        if not isinstance(dir, str) or not isinstance(spec, dict):
            raise WorkerError("bad_request", "load_task needs `dir` (string) and `task` (object)")
        self.task = load_task(dir, spec, self.target.name)
        self.state = evaluate.RunState(pool=Pool(os.environ.get("KSEARCH_REFERENCE_CACHE") or None))
        return {"baselines": list(self.task.baselines)}

    def compile(self, req: dict[str, Any]) -> dict[str, Any]:
        if "kernels" in req and hasattr(self.target, "compile_kernels"):
            # GPU targets: the kernels are recorded, and compiled per launch before their first call.
            key, kernels, files = req.get("key"), req.get("kernels"), req.get("files") or {}
            if not isinstance(key, str) or not isinstance(kernels, list) or not isinstance(files, dict):
                raise WorkerError("bad_request", "compile needs `key` and `kernels` (a list of {name, source, header}), "
                                                 "and `files` an object where given")
            return self.target.compile_kernels(key, kernels, files)
        key, dir, sources, include = req.get("key"), req.get("dir"), req.get("sources"), req.get("include")
        if not (isinstance(key, str) and isinstance(dir, str) and isinstance(sources, list)
                and all(isinstance(s, str) for s in sources) and (include is None or isinstance(include, str))):
            raise WorkerError("bad_request", "compile needs `key`, `dir`, `sources` (strings) and `include`")
        return self.target.compile(key, dir, sources, include)

    def prepare(self, req: dict[str, Any]) -> dict[str, Any]:
        return evaluate.prepare(req, self.task, self.target, self.state)

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        return evaluate.run(req, self.task, self.target, self.state)

    def precompile(self, req: dict[str, Any]) -> dict[str, Any]:
        return evaluate.precompile(req, self.task, self.target)

    def reply(self, line: bytes) -> dict[str, Any]:
        """The reply to one request line, carrying the request's `nonce` back (the Rust side believes a
        reply only with it; on the GPU targets candidate code runs in this process and could write to the
        reply pipe, on the CPU target it runs in the kernel host, which never sees a nonce)."""
        out = self._reply(line)
        try:
            nonce = json.loads(line).get("nonce")
        except (ValueError, AttributeError):
            nonce = None
        if isinstance(nonce, str):
            out["nonce"] = nonce
        return out

    def _reply(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
        except ValueError as exc:
            return _error(None, "bad_request", f"malformed JSON: {exc}")
        if not isinstance(req, dict):
            return _error(None, "bad_request", "a request must be a JSON object")
        rid = req.get("id")
        if not isinstance(rid, int) or isinstance(rid, bool):
            return _error(None, "bad_request", "request has no integer `id`")
        handler = self.ops.get(req.get("op"))  # type: ignore[arg-type]
        if handler is None:
            return _error(rid, "bad_request", f"unknown op {req.get('op')!r}; expected one of {', '.join(self.ops)}")
        start = time.perf_counter()
        profile = _profiler(req.get("op"))
        try:
            out = {"id": rid, "ok": True, "result": handler(req) if profile is None else profile.runcall(handler, req)}
        except WorkerError as exc:
            out = _error(rid, exc.kind, exc.message)
        except Exception:
            out = _error(rid, "internal", tail(traceback.format_exc()))
        _trace(req, out, time.perf_counter() - start)
        if profile is not None:
            _print_profile(profile)
        return out


def _profiler(op: Any) -> Any:
    """A profiler for `prepare` and `run` when KSEARCH_WORKER_PROFILE names how many functions to print (a
    developer's view of the evaluator's own cost, on stderr)."""
    if op not in ("prepare", "run") or not os.environ.get("KSEARCH_WORKER_PROFILE"):
        return None
    import cProfile

    return cProfile.Profile()


def _print_profile(profile: Any) -> None:
    import io
    import pstats

    text = io.StringIO()
    top = int(os.environ.get("KSEARCH_WORKER_PROFILE") or 30)
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(top)
    for line in text.getvalue().splitlines():
        if line.strip():
            say("profile " + line)


def _trace(req: dict[str, Any], out: dict[str, Any], seconds: float) -> None:
    """One line on stderr per request: where a slow evaluation spends its time shows in `ksearch -vv` (the
    Rust side logs the worker's stderr) even when it never finishes."""
    result: dict[str, Any] = out["result"] if isinstance(out.get("result"), dict) else {}
    workload = req.get("workload", {}).get("name", "") if isinstance(req.get("workload"), dict) else ""
    split = result.get("split") or {}
    parts = " ".join(f"{k}={v:.2f}" for k, v in split.items() if isinstance(v, float) and v >= 0.005)
    status = result.get("status", "ok" if out.get("ok") else out.get("error", {}).get("kind"))
    say(f"{req.get('op')} {workload} {status} {seconds:.2f}s {parts}".rstrip())


def _error(rid: int | None, kind: str, message: str) -> dict[str, Any]:
    return {"id": rid, "ok": False, "error": {"kind": kind, "message": message}}


def _plain(obj: Any) -> Any:
    """JSON has no NaN or infinity: a non-finite float becomes null. numpy scalars become Python ones."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def encode(reply: dict[str, Any]) -> bytes:
    return json.dumps(_plain(reply), allow_nan=False, separators=(",", ":")).encode() + b"\n"


def serve(target: Target, requests: BinaryIO, replies: BinaryIO) -> int:
    """Answers until end of input; returns the exit status."""
    worker = Worker(target)
    for line in requests:
        if not line.strip():
            continue
        replies.write(encode(worker.reply(line)))
        replies.flush()
    return 0
