"""Linux Landlock: after this, the worker and everything it runs (the compiler, the candidate's kernels)
can create, change or delete files only beneath the directories the Rust side allows (its private
directory, the build directory, /dev). Reading stays allowed everywhere. Best effort: an older kernel
without Landlock leaves the worker as it was, and hello reports which ABI, if any, is in force."""

from __future__ import annotations

import ctypes
import os
import sys

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Every right that changes the file system (ABI 1), then REFER (ABI 2) and TRUNCATE (ABI 3).
_WRITE_RIGHTS_V1 = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))
_REFER, _TRUNCATE = 1 << 13, 1 << 14


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict_writes(allowed: list[str]) -> int | None:
    """Applies the rule set; returns the Landlock ABI in force, or None where it is not available."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if abi < 1:
        return None
    rights = _WRITE_RIGHTS_V1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    attr = _RulesetAttr(rights)
    fd = syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if fd < 0:
        return None
    try:
        for path in allowed:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = _PathBeneath(rights, pfd)
                syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                        ctypes.c_uint32(0))
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return None
        if syscall(_SYS_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            return None
    finally:
        os.close(fd)
    return int(abi)
