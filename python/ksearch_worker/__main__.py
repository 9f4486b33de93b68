"""`python -m ksearch_worker --target cpu`: one long-lived worker per device, driven by the Rust side."""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import os
import signal
import sys
from typing import BinaryIO

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """The Rust side may die without closing our stdin (SIGKILL); the kernel then kills us too."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _take_protocol_fds() -> tuple[BinaryIO, BinaryIO]:
    """Keeps private copies of stdin and stdout for the protocol.

    fd 1 then points at stderr, so a kernel's printf cannot corrupt a reply, and fd 0 at /dev/null, so a
    kernel reading stdin cannot swallow a request.
    """
    requests = os.dup(0)
    replies = os.dup(1)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return os.fdopen(requests, "rb"), os.fdopen(replies, "wb")


def main(argv: list[str] | None = None) -> int:
    from .targets import TARGETS

    parser = argparse.ArgumentParser(prog="python -m ksearch_worker", description=__doc__)
    parser.add_argument("--target", required=True, choices=TARGETS)
    args = parser.parse_args(argv)
    _die_with_parent()
    requests, replies = _take_protocol_fds()
    faulthandler.enable()  # a crashing kernel leaves a Python traceback on stderr
    if args.target == "cpu":
        # Candidate code (and the compiler) may write only beneath the private and build directories.
        from .landlock import restrict_writes

        import tempfile

        # The temporary directory is the private one when ksearch starts the worker (TMPDIR).
        writable = [os.getcwd(), tempfile.gettempdir(), "/dev",
                    *filter(None, os.environ.get("KSEARCH_WRITABLE", "").split(os.pathsep))]
        os.environ["KSEARCH_LANDLOCK_ABI"] = str(restrict_writes(writable) or 0)

    from .protocol import serve
    from .targets import make_target

    return serve(make_target(args.target), requests, replies)


if __name__ == "__main__":
    sys.exit(main())
