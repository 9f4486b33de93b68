"""Where candidate code runs: the compiler and the kernel host, confined (docs/sandbox.md).

    python -m ksearch_worker.jail CONFIG -- PROGRAM [ARGS...]     run PROGRAM confined (the compiler)
    python -m ksearch_worker.jail CONFIG --host FD                  serve as the kernel host on socket FD
    python -m ksearch_worker.jail CONFIG --nvrtc                    compile one CUDA module read from stdin (nvrtc.py)

CONFIG is a JSON object: `dir` (the candidate's folder: the working directory, the only place it may write),
`writable` (false: not even `dir`, which is then only read; the kernel host, whose kernels have no file to
write), `read` (further paths it may read, e.g. where the compiler lives), `limits` (`nofile`, `nproc`,
`fsize`, `as`, in the units of setrlimit).

This launcher, started by the worker in the worker's process group, first makes a PID namespace (as root,
or inside a user namespace where the kernel allows one) and forks. Its child is the namespace's init (PID 1):
it dies with the launcher, runs the confined program as PID 2 (init ignores signals it sends itself, which a
program that calls abort() must not), reaps orphans, and exits with the program's status; when init ends,
the kernel kills every process left in the namespace (setsid daemons, double forks included). So killing the
launcher ends all of it. The program's process, before any candidate code runs: sets the resource limits,
becomes an unprivileged user of its own when root (one per candidate folder: see `uid_for`;
else it gives up every capability), arranges to die with init, and applies
Landlock (read only the system's libraries, headers and tools plus `read`, write only `dir`, no TCP
connections or ports, no signals out of its domain). The launcher waits and exits with the program's status (a signal passed on as the same).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import resource
import select
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# A root jail runs as a user of its own, one per candidate folder, from this range (no account needed): the
# per-user limit on processes and the folders' permissions then separate candidates, where one shared
# `nobody` would let one candidate's fork bomb starve every other jailed process.
UID_BASE, UID_SPAN = 1_000_000, 1_000_000_000


def uid_for(folder: str) -> int:
    """The unprivileged uid (and gid) a root jail runs a candidate's folder as."""
    digest = hashlib.blake2b(os.path.abspath(folder).encode(), digest_size=8).digest()
    return UID_BASE + int.from_bytes(digest, "little") % UID_SPAN


CLONE_NEWUSER, CLONE_NEWPID = 0x10000000, 0x20000000
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# What candidate code may read besides its folder: the system's libraries, headers, compilers and tools
# (shared with crates/ksearch-kernels/src/jail.rs, which confines the compiler `ksearch check` runs).
SYSTEM_READ = tuple(line.strip() for line in (Path(__file__).parent / "jail_read.txt").read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
# Written besides the folder: the null device (compilers and kernels discard output there).
SYSTEM_WRITE = ("/dev/null",)

# The folder holding this package: a jailed Python imports it from there.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def env() -> dict[str, str]:
    """The environment a jail starts with: the worker's, this package first on the import path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(PACKAGE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}


DEFAULT_LIMITS = {"nofile": 256, "nproc": 256, "fsize": 64 << 20, "core": 0}

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """Gives up every capability, also for anything executed later (the bounding set)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def own_folder(folder: str | os.PathLike[str]) -> None:
    """As root, hand a jail's folder to the unprivileged user its program runs as (`uid_for`), and to no one
    else: the program writes there and nowhere else."""
    if os.geteuid() == 0:
        try:
            uid = uid_for(str(folder))
            os.chown(folder, uid, uid)
            os.chmod(folder, 0o700)
        except OSError:
            pass


def unprivileged(uid: int) -> str:
    """As root: become `uid` (groups, gid, then uid); where that fails (a user namespace that maps no such
    user), give up every capability. Returns what was done."""
    if os.getuid() != 0 and os.geteuid() != 0:
        return "unprivileged user"
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        return f"uid {uid}"
    except OSError:
        _drop_capabilities()
        return "root without capabilities"


def _new_pid_namespace() -> str:
    """Children forked after this live in a PID namespace of their own. Returns how, or "" where not."""
    if not sys.platform.startswith("linux"):
        return ""
    unshare = _libc.unshare
    if unshare(CLONE_NEWPID) == 0:
        return "pid namespace"
    uid, gid = os.getuid(), os.getgid()
    if unshare(CLONE_NEWUSER | CLONE_NEWPID) == 0:
        # Map ourselves, so files we create keep our identity outside.
        try:
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"{gid} {gid} 1")
        except OSError:
            pass
        return "pid namespace in a user namespace"
    return ""


def _limits(limits: dict[str, int | None]) -> None:
    names = {"nofile": resource.RLIMIT_NOFILE, "fsize": resource.RLIMIT_FSIZE, "core": resource.RLIMIT_CORE,
             "as": resource.RLIMIT_AS}
    if hasattr(resource, "RLIMIT_NPROC"):
        names["nproc"] = resource.RLIMIT_NPROC
    for key, value in limits.items():
        if value is None or key not in names:
            continue
        soft, hard = resource.getrlimit(names[key])
        new = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        try:
            resource.setrlimit(names[key], (new, new))
        except (ValueError, OSError):
            pass  # a limit the system refuses leaves the jail less confined, not broken


def confine(config: dict[str, Any], watch_fd: int | None) -> dict[str, Any]:
    """Everything the program's process does before candidate code runs. `watch_fd` reads end of file once
    its parent is gone (the parent-death signal may have been armed too late).

    The folder and the rule set's paths are opened while still privileged: unprivileged, the jail could not
    walk through a parent directory only its owner may enter. From then on the folder is the working
    directory and everything in it is named relative to it."""
    from .landlock import Ruleset

    folder = os.path.abspath(config["dir"])
    writable = config.get("writable", True) is not False
    ruleset = Ruleset([*SYSTEM_READ, *config.get("read", []), *([] if writable else [folder])],
                      [*([folder] if writable else []), *SYSTEM_WRITE], network=False)
    _limits({**DEFAULT_LIMITS, **(config.get("limits") or {})})
    os.chdir(folder)
    os.environ.update(TMPDIR=".", TMP=".", TEMP=".", HOME=".")
    who = unprivileged(uid_for(folder))
    if sys.platform.startswith("linux"):
        # After the change of credentials, which clears it.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if watch_fd is not None and select.select([watch_fd], [], [], 0)[0]:
            os._exit(1)  # the parent died before the signal was armed
    abi = ruleset.enforce()
    return {"user": who, "landlock_abi": abi or 0}


def _exit_like(status: int) -> None:
    """Ends this process the way the child ended: the same signal, or the same exit code."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


# What a `--nvrtc` jail runs once confined (prepared before: nvrtc.child_prepare).
_CALL: Callable[[], int] | None = None


def _run(config: dict[str, Any], watch_fd: int | None, program: Sequence[str] | None, host_fd: int | None) -> None:
    """Confines this process and becomes the program (or the kernel host, or the NVRTC compile); never returns."""
    try:
        report = confine(config, watch_fd)
        os.environ["KSEARCH_JAIL"] = json.dumps(report, separators=(",", ":"))
        if host_fd is not None:
            from . import kernel_host

            os._exit(kernel_host.serve_fd(host_fd))
        if _CALL is not None:
            os._exit(_CALL())
        assert program
        os.execvp(program[0], list(program))
    except BaseException as exc:  # noqa: BLE001 - whatever failed, this process must not return to its caller
        try:
            os.write(2, f"ksearch jail: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(127)


def _init(config: dict[str, Any], launcher_fd: int, status_fd: int, program: Sequence[str] | None,
          host_fd: int | None) -> None:
    """PID 1 of the namespace: dies with the launcher, runs the program as its child, reaps every orphan, and
    tells the launcher how the program ended (init cannot end by a signal it sends itself); its own end
    empties the namespace."""
    if sys.platform.startswith("linux"):
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if select.select([launcher_fd], [], [], 0)[0]:
            os._exit(1)  # the launcher died before the signal was armed
    watch_r, watch_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(watch_w)
        os.close(launcher_fd)
        os.close(status_fd)
        _run(config, watch_r, program, host_fd)
    os.close(watch_r)
    if host_fd is not None:
        os.close(host_fd)
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
        if done == pid:
            os.write(status_fd, str(status).encode())
            os._exit(0)


def main(argv: Sequence[str]) -> int:
    global _CALL
    mode = argv[1] if len(argv) > 1 else ""
    if mode not in ("--", "--host", "--nvrtc") or (mode != "--nvrtc" and len(argv) < 3):
        print(__doc__, file=sys.stderr)
        return 2
    config = json.loads(argv[0])
    host_fd = int(argv[2]) if mode == "--host" else None
    program = list(argv[2:]) if mode == "--" else None
    if host_fd is not None:
        from . import kernel_host  # noqa: F401 - imported before Landlock narrows what may be read
    if mode == "--nvrtc":
        from . import nvrtc  # the request read, NVRTC loaded and the include folders opened before the jail

        try:
            request, compiler, fds = nvrtc.child_prepare(sys.stdin.buffer.read())
        except Exception as exc:  # noqa: BLE001 - the worker reads this as the jail's failure, not the candidate's
            print(f"ksearch jail: cannot prepare NVRTC: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 127
        _CALL = lambda: nvrtc.child_main(request, compiler, fds)  # noqa: E731
    if not _new_pid_namespace():
        # No namespace to empty afterwards: confine this process and run in it (the worker's process group
        # still reaches it on a timeout).
        _run(config, None, program, host_fd)
    watch_r, watch_w = os.pipe()
    status_r, status_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(watch_w)
        os.close(status_r)
        _init(config, watch_r, status_w, program, host_fd)
    os.close(watch_r)
    os.close(status_w)
    if host_fd is not None:
        os.close(host_fd)  # the namespace holds the socket; the worker must see end of file when it dies
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    told = os.read(status_r, 32)
    _exit_like(int(told) if told.strip().isdigit() else status)
    return 1


# Run by /bin/sh inside the jail: its PID, its user, what the jail reported, and whether a file outside its
# folder could be read.
_PROBE = 'echo "$$"; id -u; printf "%s\\n" "$KSEARCH_JAIL"; if cat "$1" >/dev/null 2>&1; then echo open; else echo shut; fi'


def probe() -> dict[str, Any]:
    """What the jail achieves on this machine, found by running a probe in it: a PID namespace of its own
    (the probe is PID 2, under the namespace's init), the user it runs as, Landlock, and whether a file outside its folder is unreadable."""
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="ksearch-jail-probe-") as folder:
        inside = Path(folder) / "box"
        inside.mkdir()
        outside = Path(folder) / "canary"
        outside.write_text("canary")
        if os.geteuid() == 0:
            own_folder(inside)
            os.chmod(folder, 0o755)
            os.chmod(outside, 0o644)  # readable by anyone: only the jail's own confinement can refuse it
        try:
            out = subprocess.run([sys.executable, "-m", "ksearch_worker.jail", json.dumps({"dir": str(inside)}), "--",
                                  "/bin/sh", "-c", _PROBE, "probe", str(outside)], capture_output=True, text=True,
                                 timeout=60, env={**os.environ, "PYTHONPATH": str(root)}, cwd=inside)
            pid, uid, report, reads = out.stdout.split("\n")[:4]
            seen = json.loads(report or "{}")
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            return {"error": f"the jail probe failed: {exc}"}
    return {"pid_namespace": pid.strip() == "2", "uid": int(uid), "user": seen.get("user"),
            "landlock_abi": seen.get("landlock_abi", 0), "reads_confined": reads.strip() == "shut"}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
