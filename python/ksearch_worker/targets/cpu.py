"""CPU target: C11 kernels compiled by the system compiler into shared libraries, run in a kernel host.

Candidate code never runs in the worker. The compiler runs in the jail (`jail.py`: unprivileged, in a PID
namespace of its own, Landlock-confined to the candidate's folder and the system's headers and tools), with
every source named `./NAME` so no name can become an option or a response file. Each evaluation of the
candidate gets a fresh kernel host, started through the same jail, that loads the library and runs launches
on arrays in shared memory (`arrays.Bank`); the host and everything it started are killed when the
evaluation ends. The worker fills inputs, poisons outputs, checks every array, and times every request from
its own side; the fixed cost of a request is measured against a host that never loaded candidate code.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import hardware, jail
from ..arrays import Bank, fill_poison, poison_mask
from ..check import modified
from ..errors import WorkerError
from ..timing import Batches, Measurement, TimingConfig, calls_as_batches, measure
from . import RECHECK_SETS, CandidateFailure, CheckRun, TimedPlan, TimedRunWrong, Verify, sets_beyond_cache

FLAGS = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared")
LOG_LIMIT = 64 << 10  # the first errors are the useful ones; a runaway log is cut
MAX_REPLY = 64 << 10  # a reply is a few dozen bytes; anything longer is garbage
POLL_S = 0.1  # how often a waiting worker looks whether the host still lives
PR_SET_DUMPABLE = 4
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# A timed request lasts at least this many trusted round trips, so the round trip's own noise vanishes.
RTT_FACTOR = 25
# What a candidate may leave in its folder (the jail also caps each file at 64 MiB).
FOLDER_LIMIT = 64 << 20

SIGNAL_NAMES = {
    signal.SIGSEGV: "SIGSEGV, invalid memory access", signal.SIGBUS: "SIGBUS, misaligned or invalid memory access",
    signal.SIGFPE: "SIGFPE, arithmetic fault", signal.SIGILL: "SIGILL, illegal instruction",
    signal.SIGABRT: "SIGABRT, abort", signal.SIGKILL: "SIGKILL", signal.SIGXCPU: "SIGXCPU, CPU time limit",
    signal.SIGXFSZ: "SIGXFSZ, file size limit",
}


class KernelHostDied(CandidateFailure):
    """The host process ended while it owed a reply (the candidate crashed, trapped or exited)."""

    def __init__(self, message: str) -> None:
        super().__init__("crash", message)


class KernelHostBroken(CandidateFailure):
    """The host wrote something that is not the reply it owed (candidate code did); it was killed."""

    def __init__(self, message: str) -> None:
        super().__init__("crash", message)


class KernelHostRefused(Exception):
    """The host answered a request with an error: `kind` "resource" when the candidate exhausted something."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def _exit_status(code: int) -> str:
    if code < 0:
        try:
            name = SIGNAL_NAMES.get(signal.Signals(-code), "signal")
        except ValueError:
            name = "signal"
        return f"killed by signal {-code} ({name})"
    return f"exit status {code}"


def _not_dumpable() -> None:
    """Candidate code (the same user, when the worker is not root) must not read or trace the worker's
    memory through /proc or ptrace."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _no_imports_from_cwd() -> None:
    """The worker must not import modules from its working directory, which is not the package's."""
    cwd = os.getcwd()
    if sys.path and sys.path[0] in ("", cwd) and Path(cwd).resolve() != PACKAGE_ROOT:
        del sys.path[0]


_jail_env = jail.env


# The kernel host's limits beyond the jail's defaults. Its kernels have no file to write: the folder is read
# only and no file may grow (Landlock where the kernel has it, the size limit everywhere), so no candidate can
# fill a disk at run time. Its address space is bounded well below the machine's memory (an honest host
# peaks at about 0.3 GiB plus its mapped inputs), so an allocation beyond it fails in the candidate.
HOST_ADDRESS_SPACE = 4 << 30
HOST_LIMITS = {"fsize": 0, "as": HOST_ADDRESS_SPACE}


def _jail_config(folder: str, read: Sequence[str] = (), host: bool = False) -> str:
    config: dict[str, Any] = {"dir": folder, "read": list(read)}
    if host:
        config.update(writable=False, limits=HOST_LIMITS)
    return json.dumps(config, separators=(",", ":"))


def _sizes(folder: Path) -> dict[str, int]:
    """Every file beneath `folder` (subfolders included, links not followed) by relative path, with its size."""
    out: dict[str, int] = {}
    for p in folder.rglob("*"):
        try:
            st = p.lstat()
        except OSError:
            continue
        if not p.is_dir() or p.is_symlink():
            out[str(p.relative_to(folder))] = st.st_size
    return out


def _written_since(folder: Path, known: Mapping[str, int]) -> tuple[list[Path], int]:
    """What appeared beneath `folder` since `known` (new files and the new subfolders holding them) and the
    bytes written: new files whole, known files by what they grew."""
    now = _sizes(folder)
    size = sum(n - known.get(rel, 0) for rel, n in now.items() if n > known.get(rel, 0))
    new = [folder / rel for rel in now if rel not in known]
    known_tops = {Path(rel).parts[0] for rel in known}
    tops = {folder / Path(rel).parts[0] for rel in now if rel not in known and Path(rel).parts[0] not in known_tops}
    return sorted(set(new) | tops), size


class KernelHost:
    """One jailed `kernel_host` and the socket to it; it serves one candidate for one evaluation."""

    def __init__(self, folder: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Same process group as the worker, so the Rust side's kill on a timeout reaches it; stdout goes to
        # stderr like the worker's own, so a kernel's printf stays off every protocol.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ksearch_worker.jail", _jail_config(folder, host=True), "--host",
             str(theirs.fileno())],
            stdin=subprocess.DEVNULL, stdout=2, close_fds=True, pass_fds=(theirs.fileno(),), env=_jail_env())
        theirs.close()
        self.sock = ours
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
        if isinstance(reply, dict) and reply.get("token") is None and reply.get("ok") is False \
                and reply.get("kind") == "resource":
            # The host could not even read the request (it ran out of descriptors or memory): it says so
            # without the token it never saw, and ends.
            self.close()
            raise KernelHostRefused(str(reply.get("error")), "resource")
        if not isinstance(reply, dict) or reply.get("token") != token or not isinstance(reply.get("ok"), bool):
            self._garbage(f"not the reply to its request: {raw[:200]!r}")
        if not reply["ok"]:
            raise KernelHostRefused(str(reply.get("error")), str(reply.get("kind") or "refused"))

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
        hint = ""
        if code is not None and -code in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT):
            hint = (f"; if the kernel allocates memory: the kernel host's address space is limited to "
                    f"{HOST_ADDRESS_SPACE >> 30} GiB, so an allocation beyond it fails (malloc returns NULL)")
        return KernelHostDied(f"the kernel host running the candidate died ({status}){hint}")

    def _garbage(self, what: str) -> None:
        self.close()
        raise KernelHostBroken(f"the kernel host running the candidate broke the protocol ({what}); it was killed")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def map(self, bank: Bank, writable: bool) -> bool:
        """Maps a bank; read-only where the system offers a read-only descriptor. Returns whether it is
        writable in the host."""
        fd = None if writable else bank.readonly_fd()
        try:
            self.request({"op": "map", "bank": bank.id, "size": bank.size, "writable": fd is None},
                         [bank.fd if fd is None else fd])
        finally:
            if fd is not None:
                os.close(fd)
        self.mapped.add(bank.id)
        return fd is None

    def close(self) -> None:
        """Kills the host; its PID namespace, and everything the candidate started in it, goes with it."""
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _call(host: KernelHost, msg: dict[str, Any], fds: Sequence[int] = ()) -> None:
    """A request whose refusal is the candidate's failure when it exhausted the host's resources."""
    try:
        host.request(msg, fds)
    except KernelHostRefused as exc:
        host.close()
        if exc.kind == "resource":
            raise CandidateFailure("crash", f"the candidate exhausted the kernel host's resources: {exc}") from None
        raise CandidateFailure("error", f"the kernel host refused a request: {exc}") from None


class CpuSession:
    """One candidate build on one workload: a fresh host, killed (with its namespace) at the end."""

    def __init__(self, target: CpuTarget, build: Any, r: Any, task: Any) -> None:
        self.target = target
        self.key = build.key
        folder = target.folders.get(build.key)
        if folder is None:
            raise WorkerError("not_compiled", f"key {build.key} has not been compiled by this worker")
        self.inputs = [(n, build.shapes[n], _np_dtype(build.dtypes[n])) for n, _ in task.inputs]
        self.outputs = list(task.outputs)
        self.written = [(n, build.shapes[n], _np_dtype(build.dtypes[n])) for n in [*task.outputs, *build.buffers]]
        input_names = {n for n, _, _ in self.inputs}
        # Each argument as (bank, name): bank 0 holds inputs, bank 1 outputs and buffers (one bank for checks).
        self.launches = [(launch["kernel"], [n for n in (*launch["inputs"], *launch["outputs"])],
                          list(launch.get("scalars") or [])) for launch in build.launches]
        self.input_names = input_names
        self.host = KernelHost(str(folder))
        self.closed = False
        _call(self.host, {"op": "load", "key": self.key, "path": f"./{self.key}.so"})
        self.out_bank: Bank | None = None
        self.timed_bank: Bank | None = None
        self.timed_plan: TimedPlan | None = None
        self.inputs_writable = False

    def __enter__(self) -> CpuSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ready(self) -> bool:
        return True  # compiled and loaded by `compile`

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.host.close()

    def _calls(self, banks: Mapping[str, tuple[int, Bank]]) -> list[Any]:
        """The run request's `calls`: each argument as (bank index, offset within its slot)."""
        return [[kernel, [[banks[n][0], banks[n][1].offsets[n]] for n in names], scalars]
                for kernel, names, scalars in self.launches]

    def _run(self, banks: list[Bank], calls: list[Any], slots: list[list[int]]) -> None:
        _call(self.host, {"op": "run", "key": self.key, "calls": calls, "banks": [b.id for b in banks],
                          "strides": [b.stride for b in banks], "slots": slots})

    def _ensure_mapped(self, bank: Bank, writable: bool) -> None:
        """Maps a bank in the host once; timed inputs read-only where the system allows (`inputs_writable`
        says where it did not, and the worker then compares them after timing)."""
        if bank.id in self.host.mapped:
            return
        try:
            if self.host.map(bank, writable) and not writable:
                self.inputs_writable = True
        except KernelHostRefused as exc:
            self.host.close()
            if exc.kind == "resource":
                raise CandidateFailure("crash", f"the candidate exhausted the kernel host's resources: {exc}") from None
            raise CandidateFailure("error", f"the kernel host could not map the arrays: {exc}") from None

    # -- checks ---------------------------------------------------------------------------------------------
    def check(self, inputs: Mapping[str, np.ndarray], twice: bool) -> CheckRun:
        bank = Bank([*self.inputs, *self.written], slots=2 if twice else 1)
        for i in range(bank.slots):
            slot = bank.slot(i)
            for n, _, _ in self.inputs:
                np.copyto(slot[n], inputs[n])
            for n, _, _ in self.written:
                fill_poison(slot[n])
        self._ensure_mapped(bank, writable=True)
        calls = self._calls({n: (0, bank) for n in bank.offsets})
        t0 = time.perf_counter()
        self._run([bank], calls, [[0]])
        seconds = time.perf_counter() - t0
        if twice:
            self._run([bank], calls, [[1]])
        first = bank.slot(0)
        run = CheckRun(outputs={n: first[n].copy() for n in self.outputs}, seconds=seconds,
                       again_s=time.perf_counter() - t0 - seconds if twice else 0.0)
        if twice:
            for n in self.outputs:
                count, where = _differences(first[n], bank.slot(1)[n])
                if count:
                    run.problems.append(f"output {n}: nondeterministic: two runs on the same inputs differ in {count} "
                                        f"elements, first at {list(where)} (a race, or state kept between calls)")
        role = {**{n: "buffer" for n, _, _ in self.written}, **{n: "output" for n in self.outputs},
                **{n: "input" for n in self.input_names}}
        run.overruns = [n for n in first if not first.guard_intact(n)]
        run.problems += [f"{role[n]} {n}: written past its end" for n in run.overruns]
        for n, _, _ in self.inputs:
            msg = modified(n, first[n], inputs[n])
            if msg:
                run.inputs_modified.append(n)
                run.problems.append(msg)
        _call(self.host, {"op": "unmap", "bank": bank.id})
        self.host.mapped.discard(bank.id)
        return run

    # -- timing ---------------------------------------------------------------------------------------------
    def entry(self, banks: list[Bank], plan: TimedPlan, verify: Verify, who: str, rtt: float) -> Batches:
        """Timed calls: call i runs on input slot i mod len(plan.sets) of `banks[0]` (read-only in the host;
        the list's one bank is replaced when the plan grows) and on output slot i within its request,
        poisoned before; after each request every output must be fully written and within its guards, and
        the calls on checked sets are compared with the reference."""
        self.timed_plan = plan
        out_holder: list[Bank] = []

        def out_bank(count: int) -> Bank:
            if not out_holder or out_holder[0].slots < count:
                size = max(count, 2 * out_holder[0].slots if out_holder else 1)
                if out_holder:
                    _call(self.host, {"op": "unmap", "bank": out_holder[0].id})
                    self.host.mapped.discard(out_holder[0].id)
                    out_holder.clear()
                out_holder.append(Bank(self.written, slots=size))
                self._ensure_mapped(out_holder[0], writable=True)
            return out_holder[0]

        def calls_for(bank: Bank, out: Bank) -> list[Any]:
            return self._calls({**{n: (0, bank) for n, _, _ in self.inputs}, **{n: (1, out) for n, _, _ in self.written}})

        def before(start: int, count: int) -> None:
            out = out_bank(count)
            self._ensure_mapped(banks[0], writable=False)
            self.timed_bank = banks[0]
            for n, _, _ in self.written:
                fill_poison(out.column(n, count))

        def run(start: int, count: int) -> None:
            out, sets = out_holder[0], len(plan.sets)
            self._run([banks[0], out], calls_for(banks[0], out), [[(start + j) % sets, j] for j in range(count)])

        def after(start: int, count: int) -> None:
            out, sets = out_holder[0], len(plan.sets)
            _written_whole(out, count, self.outputs, who, start, sets)
            # Every call that met a checked set is compared: on the host, where the outputs already are,
            # that costs little (MLX screens such calls on the device instead).
            for j in range(count):
                index = (start + j) % sets
                if index in plan.checked:
                    slot = out.slot(j)
                    verify(index, {n: slot[n] for n in self.outputs}, who)

        return Batches(run, len(plan.sets), before, after, overhead_s=rtt, min_sample_s=RTT_FACTOR * rtt)

    def recheck(self, inputs: Mapping[str, np.ndarray]) -> list[CheckRun]:
        """Fresh inputs written into some of the input slots timing used (the last, and checked ones), each
        run once with poisoned outputs: a cache keyed by any of those addresses is stale there."""
        bank, plan = self.timed_bank, self.timed_plan
        if bank is None or plan is None:
            return []
        sets = len(plan.sets)
        picks = sorted({sets - 1, *list(plan.checked)[: RECHECK_SETS - 1]})
        out = Bank(self.written, slots=len(picks))
        self._ensure_mapped(out, writable=True)
        runs = []
        for j, index in enumerate(picks):
            slot = bank.slot(index)
            for n, _, _ in self.inputs:
                np.copyto(slot[n], inputs[n])
            self.target.bank_ids[bank.id][index] = None  # written again before the next candidate
            for n, _, _ in self.written:
                fill_poison(out.slot(j)[n])
            calls = self._calls({**{n: (0, bank) for n, _, _ in self.inputs}, **{n: (1, out) for n, _, _ in self.written}})
            self._run([bank, out], calls, [[index, j]])
            o = out.slot(j)
            run = CheckRun(outputs={n: o[n].copy() for n in self.outputs}, where=index)
            run.overruns = [n for n in o if not o.guard_intact(n)]
            run.problems += [f"output or buffer {n}: written past its end" for n in run.overruns]
            for n, _, _ in self.inputs:
                msg = modified(n, slot[n], inputs[n])
                if msg:
                    run.inputs_modified.append(n)
                    run.problems.append(msg)
            runs.append(run)
        return runs


def _written_whole(out: Bank, count: int, outputs: Sequence[str], who: str, start: int, sets: int) -> None:
    """Every timed call of a request wrote all of its outputs and nothing past any array."""
    for n in outputs:
        left = poison_mask(out.column(n, count)).reshape(count, -1).sum(axis=1)
        if left.any():
            j = int(np.argmax(left > 0))
            raise TimedRunWrong(f"{who}: a timed call (input set {(start + j) % sets} of {sets}) left {int(left[j])} "
                                f"elements of output {n} unwritten (work skipped while timed)")
    for n, _, _ in out.specs:
        intact = out.guards_intact(n, count)
        if not intact.all():
            j = int(np.argmin(intact))
            raise TimedRunWrong(f"{who}: a timed call (input set {(start + j) % sets} of {sets}) wrote past the end "
                                f"of {n}")


def _differences(a: np.ndarray, b: np.ndarray) -> tuple[int, tuple[int, ...]]:
    """Elements whose bytes differ between two runs, and the first of them."""
    if np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)):
        return 0, ()
    diff = a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1)
    bad = np.flatnonzero(diff.any(axis=1))
    first = tuple(int(i) for i in np.unravel_index(int(bad[0]), a.shape)) if bad.size else ()
    return int(bad.size), first


def _np_dtype(name: str) -> np.dtype:
    from ..arrays import np_dtype

    return np_dtype(name)


class CpuTarget:
    name = "cpu"
    poisons_with_plain_nan = False

    def __init__(self) -> None:
        # $CC may carry a wrapper and flags ("ccache gcc"); split it like a shell would.
        self.compiler = shlex.split(os.environ.get("CC") or "cc")
        self.folders: dict[str, Path] = {}  # key -> the candidate's folder, once its library loaded
        self.built_files: dict[str, dict[str, int]] = {}  # key -> the folder's files and sizes after compiling
        # Banks of timed inputs kept between candidates, by layout, and which set each slot holds.
        self.banks: dict[str, Bank] = {}
        self.bank_ids: dict[int, list[tuple[str, int, int] | None]] = {}
        self._rtt: float | None = None
        _not_dumpable()
        _no_imports_from_cwd()

    @functools.cached_property
    def compiler_version(self) -> str:
        try:
            out = subprocess.run([*self.compiler, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"unavailable: {exc}"
        lines = (out.stdout or out.stderr).splitlines()
        return lines[0].strip() if lines else ""

    @functools.cached_property
    def compiler_read(self) -> list[str]:
        """Where the compiler lives, when that is outside the system directories the jail lets it read."""
        found = shutil.which(self.compiler[0])
        if not found:
            return []
        real = Path(found).resolve()
        prefix = real.parent.parent if real.parent.name == "bin" else real.parent
        return [str(prefix)]

    def describe(self, remembered: dict[str, Any]) -> dict[str, Any]:
        return {
            "hardware": hardware.describe(tuple(self.compiler), FLAGS, remembered),
            "compiler": {"name": shlex.join(self.compiler), "version": self.compiler_version, "flags": list(FLAGS)},
        }

    def cache_bytes(self) -> int:
        return hardware.cache_bytes()

    def compiled(self, key: str) -> bool:
        return key in self.folders

    def validate(self, r: Any) -> None:
        for b in [r.build, *([r.incumbent] if r.incumbent else [])]:
            for name in b.dtypes.values():
                _np_dtype(name)

    def runs_here(self) -> bool:
        return True

    def unavailable(self, r: Any, task: Any) -> dict[str, Any] | None:
        return None

    def finish(self, r: Any, result: dict[str, Any]) -> dict[str, Any]:
        """A candidate that filled its folder (the one place it may write) has exhausted its disk: its
        failure, and the files it wrote are removed."""
        folder = self.folders.get(r.build.key)
        if folder is None:
            return result
        known = self.built_files.get(r.build.key, {})
        wrote, size = _written_since(folder, known)
        if size >= FOLDER_LIMIT:
            for p in sorted(wrote, key=lambda p: len(p.parts), reverse=True):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
            return CandidateFailure("crash", f"the candidate exhausted its disk: it wrote {size / 2**20:.0f} MiB "
                                             f"into its folder (at most {FOLDER_LIMIT >> 20} MiB)").result(
                result.get("checks") or [])
        return result

    # -- compile --------------------------------------------------------------------------------------------
    def compile(self, key: str, dir: str, sources: Sequence[str], include: str | None) -> dict[str, Any]:
        """Builds `<dir>/<key>.so` in the jail and has a kernel host load it, so undefined symbols are compile
        errors too (the worker itself never loads candidate code)."""
        for name in [*sources, *([include] if include else []), key]:
            if not name or "/" in name or "\\" in name or name in (".", ".."):
                raise WorkerError("bad_request", f"compile: {name!r} is not a file name in the candidate's folder")
        folder = Path(dir).resolve()
        jail.own_folder(folder)
        # Every file as ./NAME, so a name can be neither an option (-x) nor a response file (@x).
        command = [*self.compiler, *FLAGS, *(["-include", f"./{include}"] if include else []),
                   *[f"./{s}" for s in sources], "-o", f"./{key}.so", "-lm"]
        jailed = [sys.executable, "-m", "ksearch_worker.jail", _jail_config(str(folder), self.compiler_read), "--",
                  *command]
        start = time.perf_counter()
        try:
            proc = subprocess.run(jailed, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=_jail_env())
        except OSError as exc:
            raise WorkerError("compiler_missing", f"cannot run {shlex.join(self.compiler)}: {exc}") from None
        seconds = time.perf_counter() - start
        log = proc.stdout.decode(errors="replace")
        if len(log) > LOG_LIMIT:
            log = log[:LOG_LIMIT] + f"\n[... {len(log) - LOG_LIMIT} more characters cut]\n"
        if proc.returncode == 127 and "ksearch jail:" in log and not (folder / f"{key}.so").exists():
            raise WorkerError("compiler_missing", f"cannot run {shlex.join(self.compiler)} in the jail: {log.strip()}")
        status = "compiled" if proc.returncode == 0 else "compile_error"
        if proc.returncode < 0:
            log += f"\nthe compiler was {_exit_status(proc.returncode)}\n"
        if status == "compiled":
            host = KernelHost(str(folder))
            try:
                host.request({"op": "load", "key": key, "path": f"./{key}.so"})
                self.folders[key] = folder
                self.built_files[key] = _sizes(folder)
            except (KernelHostRefused, CandidateFailure, OSError) as exc:
                status, log = "compile_error", f"{log}loading {key}.so failed: {exc}\n"
            finally:
                host.close()
        return {"status": status, "log": log, "seconds": seconds, "command": shlex.join(command),
                "compiler": self.compiler_version}

    # -- evaluation -----------------------------------------------------------------------------------------
    def session(self, build: Any, r: Any, task: Any) -> CpuSession:
        return CpuSession(self, build, r, task)

    def trusted_rtt(self) -> float:
        """The round trip of a request to a host that never loaded candidate code (so no candidate can skew
        it): the fixed cost taken off every timed request. Measured once per worker."""
        if self._rtt is None:
            folder = Path(os.environ.get("TMPDIR") or "/tmp") / f"ksearch-bare-{os.getpid()}"
            folder.mkdir(exist_ok=True)
            jail.own_folder(folder)
            host = KernelHost(str(folder))
            try:
                trips = []
                for _ in range(40):
                    t0 = time.perf_counter()
                    host.request({"op": "run", "key": None, "calls": [], "banks": [], "strides": [], "slots": []})
                    trips.append(time.perf_counter() - t0)
            finally:
                host.close()
            self._rtt = float(np.median(trips[10:]))
        return self._rtt

    def _bank(self, plan: TimedPlan, specs: list[tuple[str, Any, np.dtype]]) -> Bank:
        """Shared memory holding the plan's input sets, kept between candidates: slots whose set changed
        (another candidate's checked sets, a recheck) are written again."""
        layout = json.dumps([(n, list(s), str(d)) for n, s, d in specs])
        bank = self.banks.get(layout)
        if bank is None or bank.slots < len(plan.sets):
            bank = Bank(specs, slots=len(plan.sets))
            self.banks[layout] = bank
            self.bank_ids[bank.id] = [None] * bank.slots
        ids = self.bank_ids[bank.id]
        for i, (arrays, ident) in enumerate(zip(plan.sets, plan.ids, strict=True)):
            if ids[i] != ident:
                slot = bank.slot(i)
                for n, _, _ in specs:
                    np.copyto(slot[n], arrays[n])
                ids[i] = ident
        return bank

    def time(self, sessions: Sequence[CpuSession], plan: TimedPlan, verify: Verify, cfg: TimingConfig,
             paired: bool) -> Measurement:
        first = sessions[0]
        banks = [self._bank(plan, first.inputs)]
        rtt = self.trusted_rtt()
        entries = [s.entry(banks, plan, verify, who, rtt) for s, who in zip(sessions, ("candidate", "incumbent"))]

        def grow(start: int, calls: int) -> int:
            last = plan.extend(start, calls)
            banks[0] = self._bank(plan, first.inputs)
            for e in entries:
                e.sets = len(plan.sets)
            return last

        m = measure(entries, cfg, paired=paired, grow=grow)
        for st in m.stats:
            st["rtt_s"] = rtt
        bank = banks[0]
        if any(s.inputs_writable for s in sessions):
            # Inputs could be written in the host (no read-only mapping here): they must still be the plan's.
            for i, arrays in enumerate(plan.sets):
                slot = bank.slot(i)
                for n, _, _ in first.inputs:
                    msg = modified(n, slot[n], arrays[n])
                    if msg:
                        self.bank_ids[bank.id][i] = None
                        raise TimedRunWrong(f"a timed call changed its inputs: {msg}")
        return m

    def baseline_sets(self, layout: Any) -> int:
        """Enough sets to hold twice the cache, at most 64 (the baselines' calls rotate through them). Drawn
        at each worker start: 64 sets of softmax's 4 MB rows took 1.4 s here, the 16 that hold twice this
        machine's 32 MB cache a quarter of it."""
        return sets_beyond_cache(self.cache_bytes(), layout.input_bytes(), 64)

    def warm(self, layout: Any) -> None:
        """Nothing to compile ahead: the kernel host is built with the candidate."""

    def baseline_outputs(self, fn: Callable[..., Any], inputs: Mapping[str, np.ndarray], dims: dict[str, int],
                         layout: Any) -> dict[str, np.ndarray]:
        views = {n: np.array(a, copy=True) for n, a in inputs.items()}
        try:
            return {n: np.asarray(a) for n, a in dict(fn(views, dict(dims))).items()}
        except Exception as exc:
            raise WorkerError("bad_task", f"baseline raised: {exc}") from None

    def time_baselines(self, fns: Mapping[str, Callable[..., Any]], sets: Sequence[Mapping[str, np.ndarray]],
                       dims: dict[str, int], layout: Any, cfg: TimingConfig) -> dict[str, dict[str, Any]]:
        """Baselines run in the worker (no candidate host is alive by now), each on the rotated sets."""
        names = list(fns)
        entries: list[Batches] = []
        for name in names:
            fn = fns[name]
            views = [{n: np.ascontiguousarray(a) for n, a in s.items()} for s in sets]
            try:
                fn(dict(views[0]), dict(dims))
            except Exception as exc:
                raise WorkerError("bad_task", f"baseline {name} raised: {exc}") from None
            entries.append(calls_as_batches([functools.partial(_call_baseline, fn, v, dims) for v in views]))
        m = measure(entries, cfg)
        return dict(zip(names, m.stats, strict=True))


def _call_baseline(fn: Callable[..., Any], inputs: Mapping[str, np.ndarray], dims: dict[str, int]) -> None:
    fn(dict(inputs), dict(dims))
