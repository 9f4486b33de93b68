"""The kernel host: the only process that runs CPU candidate code.

Started by the CPU target through the jail (`python -m ksearch_worker.jail CONFIG --host FD`, jail.py): a
fresh interpreter with nothing of the worker's (no request nonces, no reply pipe, no reference, no checks),
PID 1 of a namespace of its own, unprivileged, confined by Landlock to its candidate's folder. One host
serves one candidate for one evaluation and is then killed with everything it started.

It maps the banks of arrays the worker sends (shared memory; inputs of timed calls read-only), loads the
candidate's library, runs the launches it is told to and answers "done". Nothing it says is believed
beyond that: the worker checks every array itself and times every request from its own side.

Messages both ways are a 4-byte big-endian length and a JSON object; file descriptors travel with a
request as SCM_RIGHTS. Requests carry a `token`, every reply echoes it:
  {"op": "load", "key", "path"}                           load the library (a file in the host's folder)
  {"op": "map", "bank", "size", "writable"}               + the bank's fd
  {"op": "unmap", "bank"}
  {"op": "run", "key", "calls": [[kernel, [[b, offset], ...], [scalars]]], "banks": [ids], "strides": [bytes],
   "slots": [[slot in bank 0, slot in bank 1, ...], ...]}
      for each entry of `slots`, every call in order, argument (b, offset) at
      base(banks[b]) + slot[b] * strides[b] + offset, then the int64 scalars
Replies: {"token", "ok": true} or {"token", "ok": false, "error": message, "kind": "refused" | "resource"}.
"""

from __future__ import annotations

import ctypes
import errno
import faulthandler
import json
import os
import socket
import struct
import sys
from typing import Any

MAX_MESSAGE = 16 << 20
MAX_FDS = 4
PROT_READ, PROT_WRITE, MAP_SHARED = 1, 2, 1
# Linux: fault the whole bank into this process's page tables when it is mapped (outside any timed request),
# so a timed call on a set the host has not touched yet does not pay a fault per page that a kernel in a
# model, on memory its process has used before, would not pay.
MAP_POPULATE = 0x8000 if sys.platform.startswith("linux") else 0
# Failures of the host's own resources that a candidate causes by exhausting them.
RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.ENOSPC)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


class HostError(Exception):
    """A request this host cannot carry out; the worker gets the message and the kind."""

    def __init__(self, message: str, kind: str = "refused") -> None:
        super().__init__(message)
        self.kind = kind


def _recv_exact(sock: socket.socket, n: int, fds: list[int], lost: list[bool]) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk, got, flags, _ = socket.recv_fds(sock, n - len(data), MAX_FDS)
        except OSError as exc:
            if exc.errno in RESOURCE_ERRNOS:
                raise HostError(f"receiving a request failed: {os.strerror(exc.errno)}", "resource") from None
            raise
        fds.extend(got)
        if flags & socket.MSG_CTRUNC:
            lost.append(True)  # the message is still read whole, so the reply can carry its token
        if not chunk:
            return None
        data += chunk
    return data


def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int], str | None] | None:
    """The next request, the descriptors that came with it, and why it cannot be served (a descriptor lost
    because this process had none left); None at end of input."""
    fds: list[int] = []
    lost: list[bool] = []
    head = _recv_exact(sock, 4, fds, lost)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise HostError(f"request of {size} bytes is too long")
    body = _recv_exact(sock, size, fds, lost)
    if body is None:
        return None
    msg = json.loads(body)
    if not isinstance(msg, dict):
        raise HostError("a request must be a JSON object")
    problem = "a file descriptor sent with the request was lost: the process had no descriptor left" if lost else None
    return msg, fds, problem


def send(sock: socket.socket, msg: dict[str, Any]) -> None:
    body = json.dumps(msg, separators=(",", ":")).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)


class Host:
    def __init__(self) -> None:
        self.libs: dict[str, ctypes.CDLL] = {}
        self.banks: dict[int, tuple[int, int]] = {}  # bank id -> (address, size)

    def load(self, msg: dict[str, Any]) -> None:
        key = str(msg["key"])
        if key in self.libs:
            return
        try:
            self.libs[key] = ctypes.CDLL(str(msg["path"]), mode=os.RTLD_LOCAL)
        except OSError as exc:
            raise HostError(str(exc)) from None

    def map(self, msg: dict[str, Any], fds: list[int]) -> None:
        if len(fds) != 1:
            raise HostError("map needs the bank's file descriptor")
        size = int(msg["size"])
        prot = PROT_READ | (PROT_WRITE if msg.get("writable") else 0)
        addr = _libc.mmap(None, size, prot, MAP_SHARED | MAP_POPULATE, fds[0], 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            err = ctypes.get_errno()
            raise HostError(f"mmap of {size} bytes failed: {os.strerror(err)}",
                            "resource" if err in RESOURCE_ERRNOS else "refused")
        self.banks[int(msg["bank"])] = (addr, size)

    def unmap(self, msg: dict[str, Any]) -> None:
        got = self.banks.pop(int(msg["bank"]), None)
        if got is not None:
            _libc.munmap(got[0], got[1])

    def run(self, msg: dict[str, Any]) -> None:
        calls = msg["calls"]
        if not calls:
            return  # an empty request: the worker measuring its round trip
        lib = self.libs.get(str(msg["key"]))
        if lib is None:
            raise HostError(f"key {msg['key']} is not loaded")
        try:
            bases = [self.banks[int(b)][0] for b in msg["banks"]]
        except KeyError as exc:
            raise HostError(f"bank {exc} is not mapped") from None
        strides = [int(s) for s in msg["strides"]]
        steps = []
        for kernel, refs, scalars in calls:
            try:
                fn = lib[kernel]  # a fresh function object, so restype is ours alone
            except AttributeError:
                raise HostError(f"the library defines no kernel {kernel!r}") from None
            fn.restype = None
            # The generated prototype fixes the order: inputs, outputs, then int64 scalars.
            steps.append((fn, [(int(b), int(o)) for b, o in refs], tuple(ctypes.c_int64(int(s)) for s in scalars)))
        for slot in msg["slots"]:
            starts = [base + int(s) * stride for base, s, stride in zip(bases, slot, strides, strict=True)]
            for fn, refs, scalars in steps:
                fn(*(ctypes.c_void_p(starts[b] + o) for b, o in refs), *scalars)

    def handle(self, msg: dict[str, Any], fds: list[int]) -> None:
        op = msg.get("op")
        if op == "load":
            self.load(msg)
        elif op == "map":
            self.map(msg, fds)
        elif op == "unmap":
            self.unmap(msg)
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
            kind = exc.kind if isinstance(exc, HostError) else "refused"
            send(sock, {"token": None, "ok": False, "error": str(exc), "kind": kind})
            return 1
        if got is None:
            return 0
        msg, fds, problem = got
        reply: dict[str, Any] = {"token": msg.get("token"), "ok": True}
        try:
            if problem:
                raise HostError(problem, "resource")
            host.handle(msg, fds)
        except HostError as exc:
            reply.update(ok=False, error=str(exc), kind=exc.kind)
        except (KeyError, TypeError, ValueError) as exc:
            reply.update(ok=False, error=f"bad request: {exc!r}", kind="refused")
        finally:
            for fd in fds:
                os.close(fd)
        send(sock, reply)


def serve_fd(fd: int) -> int:
    """The host's life once the jail has confined it: stdout is stderr already (the worker started it so)."""
    faulthandler.enable()  # a crashing kernel leaves a Python traceback on stderr
    return serve(socket.socket(fileno=fd))


if __name__ == "__main__":
    print("the kernel host is started through the jail: python -m ksearch_worker.jail CONFIG --host FD",
          file=sys.stderr)
    sys.exit(2)
