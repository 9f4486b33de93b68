"""The kernel host: the only process that runs CPU candidate code.

`python -m ksearch_worker.kernel_host FD` is started by the CPU target (targets/cpu.py) with one end of a
Unix socket pair as FD and nothing else of the worker's: a fresh interpreter, so no copy of the worker's
memory (the request nonces, the reply pipe, the reference, the checks). Run as root, it becomes an
unprivileged user before it loads any candidate library, so it can neither read nor trace the worker.

It maps the shared-memory array sets the worker sends, loads the compiled library (one build per host:
the worker starts a fresh host for the next), runs the launches it is told to and answers "done". Nothing it says is believed beyond that: the worker checks every array
itself and times every batch from its own side.

Messages both ways are a 4-byte big-endian length and a JSON object; file descriptors travel with a
request as SCM_RIGHTS. Requests carry a `token`, every reply echoes it:
  {"op": "load", "key"}                                  + the library's fd
  {"op": "map", "set", "size"}                            + the set's fd
  {"op": "release"}                                       unmap every set
  {"op": "run", "key", "calls": [[kernel, [offsets], [scalars]]], "sets": [ids], "start", "count"}
      runs the calls on sets[(start + i) % len(sets)] for i in range(count)
Replies: {"token", "ok": true} or {"token", "ok": false, "error": message}.
"""

from __future__ import annotations

import ctypes
import errno
import faulthandler
import json
import os
import signal
import socket
import struct
import sys
from typing import Any

NOBODY = 65534  # the unprivileged uid and gid a root worker's host runs as
MAX_MESSAGE = 16 << 20
MAX_FDS = 4
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PROT_READ, PROT_WRITE, MAP_SHARED = 1, 2, 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


class HostError(Exception):
    """A request this host cannot carry out; the worker gets the message."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """Root that cannot become NOBODY (a user namespace that maps no such user) gives up every capability,
    CAP_SYS_PTRACE among them, also for anything it executes (the bounding set), so it cannot read the
    worker, which is not dumpable."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def drop_privileges() -> None:
    """As root: become NOBODY (groups, gid, then uid), so the worker's memory and /proc entries are out
    of reach, or else give up every capability. Then die with the worker (a change of credentials clears
    the parent-death signal)."""
    if os.getuid() == 0 or os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        except OSError:
            _drop_capabilities()
    if sys.platform.startswith("linux"):
        parent = os.getppid()
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)


def _recv_exact(sock: socket.socket, n: int, fds: list[int]) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk, got, _, _ = socket.recv_fds(sock, n - len(data), MAX_FDS)
        fds.extend(got)
        if not chunk:
            return None
        data += chunk
    return data


def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The next request and the descriptors that came with it; None at end of input."""
    fds: list[int] = []
    head = _recv_exact(sock, 4, fds)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise HostError(f"request of {size} bytes is too long")
    body = _recv_exact(sock, size, fds)
    if body is None:
        return None
    msg = json.loads(body)
    if not isinstance(msg, dict):
        raise HostError("a request must be a JSON object")
    return msg, fds


def send(sock: socket.socket, msg: dict[str, Any]) -> None:
    body = json.dumps(msg, separators=(",", ":")).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)


class Host:
    def __init__(self) -> None:
        self.libs: dict[str, ctypes.CDLL] = {}
        self.lib_fds: list[int] = []  # kept open: dlopen knows a library by its /proc/self/fd name
        self.sets: dict[int, tuple[int, int]] = {}  # set id -> (address, size)
        self.bound: dict[str, list[list[tuple[Any, tuple[Any, ...]]]]] = {}  # a run's bindings, until release

    def load(self, msg: dict[str, Any], fds: list[int]) -> None:
        key = str(msg["key"])
        if key in self.libs:
            return
        if len(fds) != 1:
            raise HostError("load needs the library's file descriptor")
        path = f"/proc/self/fd/{fds[0]}" if sys.platform.startswith("linux") else str(msg["path"])
        self.lib_fds.append(fds.pop())
        try:
            self.libs[key] = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        except OSError as exc:
            raise HostError(str(exc).replace(path, str(msg.get("path", path)))) from None

    def map(self, msg: dict[str, Any], fds: list[int]) -> None:
        if len(fds) != 1:
            raise HostError("map needs the set's file descriptor")
        size = int(msg["size"])
        addr = _libc.mmap(None, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise HostError(f"mmap of {size} bytes failed: {os.strerror(ctypes.get_errno())}")
        self.sets[int(msg["set"])] = (addr, size)

    def release(self) -> None:
        for addr, size in self.sets.values():
            _libc.munmap(addr, size)
        self.sets.clear()
        self.bound.clear()

    def run(self, msg: dict[str, Any]) -> None:
        signature = json.dumps([msg["key"], msg["calls"], msg["sets"]])
        bound = self.bound.get(signature)
        if bound is None:
            bound = self.bound[signature] = self.bind(msg)
        start, count = int(msg["start"]), int(msg["count"])
        for i in range(start, start + count):
            for fn, args in bound[i % len(bound)]:
                fn(*args)

    def bind(self, msg: dict[str, Any]) -> list[list[tuple[Any, tuple[Any, ...]]]]:
        """Per set, the kernel functions and their arguments (pointers into the set, then scalars)."""
        lib = self.libs.get(str(msg["key"]))
        if lib is None:
            raise HostError(f"key {msg['key']} is not loaded")
        if not msg["sets"]:
            raise HostError("run names no array set")
        bound = []
        for set_id in msg["sets"]:
            if set_id not in self.sets:
                raise HostError(f"array set {set_id} is not mapped")
            base = self.sets[set_id][0]
            steps = []
            for kernel, offsets, scalars in msg["calls"]:
                try:
                    fn = lib[kernel]  # a fresh function object, so restype is ours alone
                except AttributeError:
                    raise HostError(f"the library defines no kernel {kernel!r}") from None
                fn.restype = None
                # The generated prototype fixes the order: inputs, outputs, then int64 scalars.
                args = (*(ctypes.c_void_p(base + int(o)) for o in offsets), *(ctypes.c_int64(int(s)) for s in scalars))
                steps.append((fn, args))
            bound.append(steps)
        return bound

    def handle(self, msg: dict[str, Any], fds: list[int]) -> None:
        op = msg.get("op")
        if op == "load":
            self.load(msg, fds)
        elif op == "map":
            self.map(msg, fds)
        elif op == "release":
            self.release()
        elif op == "run":
            self.run(msg)
        else:
            raise HostError(f"unknown op {op!r}")


def serve(sock: socket.socket) -> int:
    host = Host()
    while True:
        try:
            got = receive(sock)
        except (HostError, ValueError) as exc:
            send(sock, {"token": None, "ok": False, "error": str(exc)})
            return 1
        if got is None:
            return 0
        msg, fds = got
        reply: dict[str, Any] = {"token": msg.get("token"), "ok": True}
        try:
            host.handle(msg, fds)
        except (HostError, KeyError, TypeError, ValueError) as exc:
            reply.update(ok=False, error=str(exc) if isinstance(exc, HostError) else f"bad request: {exc!r}")
        finally:
            for fd in fds:
                os.close(fd)
        send(sock, reply)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ksearch_worker.kernel_host FD", file=sys.stderr)
        return 2
    sock = socket.socket(fileno=int(argv[0]))
    faulthandler.enable()  # a crashing kernel leaves a Python traceback on stderr
    drop_privileges()
    return serve(sock)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
