"""CPU target: C11 kernels compiled by the system compiler into shared libraries, called through ctypes."""

from __future__ import annotations

import ctypes
import functools
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import hardware
from ..errors import WorkerError
from . import Launch

FLAGS = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared")
LOG_LIMIT = 64 << 10  # the first errors are the useful ones; a runaway log is cut


class CpuTarget:
    name = "cpu"

    def __init__(self) -> None:
        # $CC may carry a wrapper and flags ("ccache gcc"); split it like a shell would.
        self.compiler = shlex.split(os.environ.get("CC") or "cc")
        self._libs: dict[str, ctypes.CDLL] = {}

    @functools.cached_property
    def compiler_version(self) -> str:
        try:
            out = subprocess.run([*self.compiler, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"unavailable: {exc}"
        lines = (out.stdout or out.stderr).splitlines()
        return lines[0].strip() if lines else ""

    def describe(self) -> dict[str, Any]:
        return {
            "hardware": hardware.describe(tuple(self.compiler), FLAGS),
            "compiler": {"name": shlex.join(self.compiler), "version": self.compiler_version, "flags": list(FLAGS)},
        }

    def cache_bytes(self) -> int:
        return hardware.cache_bytes()

    def compile(self, key: str, dir: str, sources: Sequence[str], include: str | None) -> dict[str, Any]:
        """Builds `<dir>/<key>.so` and loads it, so undefined symbols are compile errors too."""
        # Absolute, because the compiler runs inside dir (so relative sources and headers resolve there).
        out = Path(dir).resolve() / f"{key}.so"
        command = [*self.compiler, *FLAGS, *(["-include", include] if include else []), *sources, "-o", str(out), "-lm"]
        start = time.perf_counter()
        try:
            proc = subprocess.run(command, cwd=dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
        except OSError as exc:
            raise WorkerError("compiler_missing", f"cannot run {shlex.join(self.compiler)}: {exc}") from None
        seconds = time.perf_counter() - start
        log = proc.stdout.decode(errors="replace")
        if len(log) > LOG_LIMIT:
            log = log[:LOG_LIMIT] + f"\n[... {len(log) - LOG_LIMIT} more characters cut]\n"
        status = "compiled" if proc.returncode == 0 else "compile_error"
        if status == "compiled" and key not in self._libs:
            try:
                self._libs[key] = ctypes.CDLL(str(out), mode=os.RTLD_LOCAL)
            except OSError as exc:
                status, log = "compile_error", f"{log}loading {out.name} failed: {exc}\n"
        return {"status": status, "log": log, "seconds": seconds, "command": shlex.join(command),
                "compiler": self.compiler_version}

    def compiled(self, key: str) -> bool:
        return key in self._libs

    def bind(self, key: str, launches: Sequence[Launch], arrays: Mapping[str, np.ndarray]) -> Callable[[], None]:
        lib = self._libs.get(key)
        if lib is None:
            raise WorkerError("not_compiled", f"key {key} has not been compiled by this worker")
        steps: list[tuple[Any, tuple[Any, ...]]] = []
        for launch in launches:
            fn = lib[launch["kernel"]]  # a fresh function object, so restype is ours alone
            fn.restype = None
            # The generated prototype fixes the order: inputs, outputs, then int64 scalars.
            pointers = [ctypes.c_void_p(arrays[n].ctypes.data) for n in (*launch["inputs"], *launch["outputs"])]
            scalars = [ctypes.c_int64(s) for s in launch.get("scalars") or []]
            steps.append((fn, (*pointers, *scalars)))
        return _Bound(steps, arrays)


@dataclass
class _Bound:
    steps: list[tuple[Any, tuple[Any, ...]]]
    arrays: Mapping[str, np.ndarray]  # holds the memory behind the raw pointers

    def __call__(self) -> None:
        for fn, args in self.steps:
            fn(*args)
