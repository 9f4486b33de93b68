"""Linux Landlock: a process restricts which files it and its descendants may read and write, for good.

Two uses. The worker restricts its writes (`restrict_writes`): it, and everything it starts, may create,
change or delete files only beneath its private directory, the build directory, the reference cache and
/dev. Candidate code (the compiler and the kernel host, `jail.py`) is restricted further (`restrict`):
reads only of the system's libraries, headers and tools, reads and writes only in its own folder, (ABI 4)
no TCP connection or listening port, and (ABI 6) no signals to, and no abstract sockets of, processes
outside its domain. Rule sets stack: a
restriction can only narrow. Best effort: a kernel without Landlock leaves the process as it was, and the
caller reports which ABI, if any, is in force.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence
from typing import Any

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3 and 5
_WRITE_V1 = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO \
    | MAKE_BLOCK | MAKE_SYM
_READ = EXECUTE | READ_FILE | READ_DIR
# Rights that apply to a regular file (a rule on a file may grant only these).
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The Landlock ABI version of this kernel; 0 where there is none."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _syscall()(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _all_rights(version: int) -> int:
    return _WRITE_V1 | _READ | (REFER if version >= 2 else 0) | (TRUNCATE if version >= 3 else 0) \
        | (IOCTL_DEV if version >= 5 else 0)


class Ruleset:
    """A rule set built now and enforced later: paths are opened when it is built (so a process about to drop
    its privileges can name paths only it may reach), and `enforce` applies it to the calling process."""

    def __init__(self, read: Sequence[str], write: Sequence[str], *, handle_reads: bool = True,
                 scope: bool = True, network: bool = True) -> None:
        self.version = abi()
        self.fd = -1
        if self.version < 1:
            return
        syscall = _syscall()
        every = _all_rights(self.version)
        handled = every if handle_reads else every & ~_READ
        # With `network` false (ABI 4), no TCP port may be bound or connected to (no rule grants one): the
        # jail holds where the worker's network namespace could not be made.
        attr = _RulesetAttr(handled, (_NET_BIND_TCP | _NET_CONNECT_TCP) if not network and self.version >= 4 else 0,
                            (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if scope and self.version >= 6 else 0)
        size = 24 if self.version >= 6 else 16 if self.version >= 4 else 8
        fd = syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        if fd < 0:
            return
        self.fd = int(fd)
        for path, rights in [(p, _READ) for p in read] + [(p, every) for p in write]:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path that does not exist here is simply not granted
            try:
                allowed = rights & handled
                if not os.path.isdir(path):
                    allowed &= _FILE_RIGHTS
                if allowed:
                    rule = _PathBeneath(allowed, pfd)
                    syscall(_SYS_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                            ctypes.c_uint32(0))
            finally:
                os.close(pfd)

    def enforce(self) -> int | None:
        """Applies the rule set to this process and its future children; returns the ABI in force, or None
        where Landlock is not available."""
        if self.fd < 0:
            return None
        try:
            if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                return None
            if _syscall()(_SYS_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0)) != 0:
                return None
        finally:
            os.close(self.fd)
            self.fd = -1
        return self.version


def _syscall() -> Any:
    syscall = ctypes.CDLL(None, use_errno=True).syscall
    syscall.restype = ctypes.c_long
    return syscall


def restrict(read: Sequence[str], write: Sequence[str], *, handle_reads: bool = True, scope: bool = True) -> int | None:
    """Builds and enforces a rule set at once: `read` paths (files or directories) may be read and executed,
    `write` paths also written; with `handle_reads`, nothing else may be read either. `scope` (ABI 6) also
    cuts signals and abstract Unix sockets to processes outside the domain. Paths that do not exist are
    skipped. Returns the ABI in force, or None where Landlock is not available."""
    return Ruleset(read, write, handle_reads=handle_reads, scope=scope).enforce()


def restrict_writes(allowed: Sequence[str]) -> int | None:
    """The worker's own rule set: writes only beneath `allowed`; reads stay allowed everywhere."""
    return restrict([], allowed, handle_reads=False, scope=False)
