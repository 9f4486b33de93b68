"""CPU target: C11 kernels compiled by the system compiler into shared libraries, run in a kernel host.

The worker compiles; candidate code runs only in the kernel host (`kernel_host.py`), a child process
started fresh, without the worker's memory and, when the worker is root, as an unprivileged user. The
arrays live in shared memory (`arrays.ArraySet`): the host runs launches on them, the worker does every
check and times every batch itself. A host that dies, or says anything but the reply it owes, fails the
evaluation in flight; the next request starts a fresh host.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import secrets
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import hardware
from ..arrays import ArraySet
from ..errors import WorkerError
from . import Launch

FLAGS = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared")
LOG_LIMIT = 64 << 10  # the first errors are the useful ones; a runaway log is cut
MAX_REPLY = 64 << 10  # a reply is a few dozen bytes; anything longer is garbage
POLL_S = 0.1  # how often a waiting worker looks whether the host still lives
PR_SET_DUMPABLE = 4
PACKAGE_ROOT = Path(__file__).resolve().parents[2]

SIGNAL_NAMES = {
    signal.SIGSEGV: "SIGSEGV, invalid memory access", signal.SIGBUS: "SIGBUS, misaligned or invalid memory access",
    signal.SIGFPE: "SIGFPE, arithmetic fault", signal.SIGILL: "SIGILL, illegal instruction",
    signal.SIGABRT: "SIGABRT, abort", signal.SIGKILL: "SIGKILL", signal.SIGXCPU: "SIGXCPU, CPU time limit",
}


class KernelHostDied(Exception):
    """The host process ended while it owed a reply (the candidate crashed, trapped or exited)."""


class KernelHostBroken(Exception):
    """The host wrote something that is not the reply it owed; it was killed."""


class KernelHostRefused(Exception):
    """The host answered the request with an error (a library that does not load, a missing kernel)."""


def _exit_status(code: int) -> str:
    if code < 0:
        return f"killed by signal {-code} ({SIGNAL_NAMES.get(signal.Signals(-code), 'signal')})"
    return f"exit status {code}"


def _not_dumpable() -> None:
    """Candidate code in the host (the same user, when the worker is not root) must not read or trace
    the worker's memory through /proc or ptrace."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _no_imports_from_cwd() -> None:
    """When both run as one user, the host may write where the worker may, its private directory (the
    worker's working directory) included: the worker must not import modules from there."""
    cwd = os.getcwd()
    if sys.path and sys.path[0] in ("", cwd) and Path(cwd).resolve() != PACKAGE_ROOT:
        del sys.path[0]


class KernelHost:
    """One running `python -m ksearch_worker.kernel_host` and the socket to it; it serves one build."""

    def __init__(self) -> None:
        _not_dumpable()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(PACKAGE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
        # Same process group as the worker, so the Rust side's kill on a timeout reaches it; stdout goes
        # to stderr like the worker's own, so a kernel's printf stays off every protocol.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ksearch_worker.kernel_host", str(theirs.fileno())],
            stdin=subprocess.DEVNULL, stdout=2, close_fds=True, pass_fds=(theirs.fileno(),),
            env=env)
        theirs.close()
        self.sock = ours
        self.key: str | None = None  # the one build this host has loaded
        self.mapped: set[int] = set()

    def request(self, msg: dict[str, Any], fds: Sequence[int] = ()) -> None:
        """Sends one request and waits, without a deadline of its own (the Rust side owns it), for the
        reply carrying its token."""
        token = secrets.token_hex(8)
        body = json.dumps({**msg, "token": token}, separators=(",", ":")).encode()
        data = struct.pack(">I", len(body)) + body
        if self._readable(0.0):
            try:
                early = self.sock.recv(1, socket.MSG_PEEK)
            except OSError:
                early = b""
            if not early or self.proc.poll() is not None:
                raise self._died()  # between requests, e.g. by a thread the candidate left behind
            self._garbage("the kernel host wrote before it was asked")
        try:
            sent = socket.send_fds(self.sock, [data], list(fds)) if fds else 0
            self.sock.sendall(data[sent:])
        except OSError:
            raise self._died() from None
        head = self._read(4)
        (size,) = struct.unpack(">I", head)
        if size > MAX_REPLY:
            self._garbage(f"a reply of {size} bytes announced")
        raw = self._read(size)
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or reply.get("token") != token or not isinstance(reply.get("ok"), bool):
            self._garbage(f"not the reply to its request: {raw[:200]!r}")
        if not reply["ok"]:
            raise KernelHostRefused(str(reply.get("error")))

    def _readable(self, timeout: float) -> bool:
        return bool(select.select([self.sock], [], [], timeout)[0])

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            # A process the candidate forked may keep the socket open after the host died: look at the
            # host itself too.
            if not self._readable(POLL_S):
                if self.proc.poll() is not None:
                    raise self._died()
                continue
            try:
                chunk = self.sock.recv(n - len(data))
            except OSError:
                chunk = b""
            if not chunk:
                raise self._died()
            data += chunk
        return data

    def _died(self) -> KernelHostDied:
        try:
            code = self.proc.wait(timeout=5)
            status = _exit_status(code)
        except subprocess.TimeoutExpired:
            status = "closed its socket"
        self.close()
        return KernelHostDied(f"the kernel host running the candidate died ({status})")

    def _garbage(self, what: str) -> None:
        self.close()
        raise KernelHostBroken(f"the kernel host running the candidate broke the protocol ({what}); it was killed")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class CpuTarget:
    name = "cpu"

    def __init__(self) -> None:
        # $CC may carry a wrapper and flags ("ccache gcc"); split it like a shell would.
        self.compiler = shlex.split(os.environ.get("CC") or "cc")
        self._built: dict[str, Path] = {}  # key -> library that loaded in a host
        self._host: KernelHost | None = None
        _no_imports_from_cwd()

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

    def host(self) -> KernelHost:
        """The running host; a fresh one after the last died or was killed."""
        if self._host is not None and not self._host.alive():
            self._host.close()
            self._host = None
        if self._host is None:
            self._host = KernelHost()
        return self._host

    def host_pid(self) -> int:
        return self.host().proc.pid

    def _call(self, msg: dict[str, Any], fds: Sequence[int] = ()) -> None:
        host = self.host()
        try:
            host.request(msg, fds)
        finally:
            if not host.alive():
                self._host = None

    def _load(self, key: str, lib: Path) -> None:
        """A host with this build loaded. Each build gets a host of its own, started fresh (a few tens of
        milliseconds), so whatever a candidate leaves behind in its host (threads, children, patched
        state) never meets another candidate, and a crash is blamed on the build that was running."""
        host = self.host()
        if host.key == key:
            return
        if host.key is not None:
            host.close()
            self._host = None
            host = self.host()
        fd = os.open(lib, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._call({"op": "load", "key": key, "path": str(lib)}, [fd])
        finally:
            os.close(fd)
        host.key = key

    def compile(self, key: str, dir: str, sources: Sequence[str], include: str | None) -> dict[str, Any]:
        """Builds `<dir>/<key>.so` and has the kernel host load it, so undefined symbols are compile
        errors too (the worker itself never loads candidate code)."""
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
        if status == "compiled" and key not in self._built:
            try:
                self._load(key, out)
                self._built[key] = out
            except (KernelHostRefused, KernelHostDied, KernelHostBroken, OSError) as exc:
                status, log = "compile_error", f"{log}loading {out.name} failed: {exc}\n"
        return {"status": status, "log": log, "seconds": seconds, "command": shlex.join(command),
                "compiler": self.compiler_version}

    def compiled(self, key: str) -> bool:
        return key in self._built

    def bind(self, key: str, launches: Sequence[Launch], arrays: Mapping[str, np.ndarray]) -> HostCall:
        """A call that has the host run every launch in order on these arrays (an `ArraySet`)."""
        if not isinstance(arrays, ArraySet):
            raise TypeError("the cpu target runs kernels only on arrays in an ArraySet")
        return self.batch(key, launches, [arrays])

    def batch(self, key: str, launches: Sequence[Launch], sets: Sequence[ArraySet]) -> HostCall:
        """Runs of the launches over several sets of one layout (timing's rotated copies)."""
        if key not in self._built:
            raise WorkerError("not_compiled", f"key {key} has not been compiled by this worker")
        if any(s.layout != sets[0].layout for s in sets):
            raise ValueError("a batch needs array sets of one layout")
        calls = [[launch["kernel"], [sets[0].offsets[n] for n in (*launch["inputs"], *launch["outputs"])],
                  list(launch.get("scalars") or [])] for launch in launches]
        return HostCall(self, key, calls, list(sets))

    def run(self, key: str, calls: list[Any], sets: Sequence[ArraySet], start: int, count: int) -> None:
        self._load(key, self._built[key])
        host = self.host()
        for s in sets:
            if s.id not in host.mapped:
                self._call({"op": "map", "set": s.id, "size": s.size}, [s.fd])
                host.mapped.add(s.id)
        self._call({"op": "run", "key": key, "calls": calls, "sets": [s.id for s in sets], "start": start,
                    "count": count})

    def release(self) -> None:
        """Unmaps every array set in the host (at the end of a `run` request)."""
        if self._host is not None and self._host.alive() and self._host.mapped:
            self._call({"op": "release"})
            if self._host is not None:
                self._host.mapped.clear()


@dataclass
class HostCall:
    """The launches of one key bound to array sets; calling it runs them once on the first set."""
    target: CpuTarget
    key: str
    calls: list[Any]
    sets: list[ArraySet]

    def __call__(self) -> None:
        self.run(0, 1)

    def run(self, start: int, count: int) -> None:
        """Runs the launches on sets[(start + i) % len(sets)] for i in range(count), in one round trip."""
        self.target.run(self.key, self.calls, self.sets, start, count)
