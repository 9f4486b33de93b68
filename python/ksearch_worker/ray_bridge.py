"""`python -m ksearch_worker.ray_bridge --address ADDR --target T`: a worker on a Ray cluster.

ksearch starts this in place of `python -m ksearch_worker` for a device of `--cluster` (docs/parallel.md). It
speaks the same JSON lines on stdin and stdout, and passes each request to a Ray actor that holds one device
(`num_gpus=1` for the GPU targets, one CPU for `cpu`) and runs the real worker there as a child process,
confined as ksearch confines a local one: a private folder, an environment without secrets, resource limits
and, on Linux, a network namespace of its own. The worker's stderr comes back here while a request runs, so
phases and crash tails read as a local worker's.

A worker that dies on its node ends this process the same way (its signal, its stderr tail), and ksearch
restarts it as it restarts a local worker. An actor lost with its node is replaced once per request: the new
actor is given the requests that set the old one up (`hello`, `load_task`) and then the request in flight.

The worker reads the task, the build folder and the reference cache by path: the cluster's nodes must see
them at the same paths as this machine (one machine, or a shared filesystem).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

# Environment variables the worker needs from ksearch's side; everything else comes from the node.
PASSED_ENV = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "KSEARCH_WRITABLE",
              "KSEARCH_REFERENCE_CACHE", "KSEARCH_WORKER_PROFILE", "KSEARCH_ALLOW_CLUSTERS")
# Requests replayed to a replacement actor before the one in flight, in the order they came.
SETUP = ("hello", "load_task")
# The markers of secret variable names, as src/sandbox.rs reads them.
SECRET_MARKERS = tuple(line.strip() for line in (Path(__file__).parent / "secret_markers.txt").read_text()
                       .splitlines() if line.strip() and not line.startswith("#"))
CORE_LIMIT, FILE_SIZE, CPU_ADDRESS_SPACE = 0, 4 << 30, 16 << 30
CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
PR_SET_PDEATHSIG = 1


def worker_env(passed: dict[str, str], private: str) -> dict[str, str]:
    """The node's environment without secrets and without Ray's own variables (the cluster's address is
    no business of candidate code), with ksearch's variables and the private folder."""
    env = {k: v for k, v in os.environ.items()
           if not any(m in k.upper() for m in SECRET_MARKERS) and not k.upper().startswith("RAY_")}
    env.update(passed)
    env.update(TMPDIR=private, TMP=private, TEMP=private, HOME=private)
    return env


def _libc() -> Any:
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def supervise(target: str) -> int:
    """`--supervise`: between the actor and the worker, on the node. It dies with the actor's thread that
    started it (SIGTERM), and then, or when the worker ends, kills the worker's whole process group (the
    compilers and kernel hosts it started), as ksearch kills a local worker's group, and removes the
    private folder."""
    import shutil
    libc = _libc() if sys.platform.startswith("linux") else None
    if libc is not None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    private = os.getcwd()
    worker = subprocess.Popen([sys.executable, "-m", "ksearch_worker", "--target", target],
                              start_new_session=True)

    def end_group(*_: Any) -> None:
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except OSError:
            pass

    def on_term(*_: Any) -> None:
        end_group()
        shutil.rmtree(private, ignore_errors=True)
        os._exit(1)

    signal.signal(signal.SIGTERM, on_term)
    status = worker.wait()
    end_group()
    shutil.rmtree(private, ignore_errors=True)
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


class Holder:
    """The worker process on a node (behind its supervisor), its stdout read a line per request and its
    stderr gathered."""

    def __init__(self, target: str, passed: dict[str, str]) -> None:
        self.private = tempfile.mkdtemp(prefix="ksearch-ray-worker-")
        self.new_stderr: collections.deque[str] = collections.deque(maxlen=4000)
        cpu = target == "cpu"
        # The package as Ray placed it on this node (runtime_env py_modules) comes first on the path.
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        passed = dict(passed, PYTHONPATH=os.pathsep.join(filter(None, [here, passed.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "ksearch_worker.ray_bridge", "--supervise", "--target", target]
        env = worker_env(passed, self.private)
        # Resolved before the fork: only system calls run between fork and exec.
        unshare = _libc().unshare if sys.platform.startswith("linux") else None

        def confine() -> None:
            """The limits ksearch's sandbox.rs sets on a local worker, and a network namespace of its own
            on every target (the node's network reaches the cluster). A limit the system refuses leaves the
            worker less confined, not broken."""
            for res, value in ((resource.RLIMIT_CORE, CORE_LIMIT), (resource.RLIMIT_FSIZE, FILE_SIZE),
                               *(((resource.RLIMIT_AS, CPU_ADDRESS_SPACE),) if cpu else ())):
                try:
                    resource.setrlimit(res, (value, value))
                except (ValueError, OSError):
                    pass
            if unshare is not None and unshare(CLONE_NEWNET) != 0 and cpu:
                unshare(CLONE_NEWUSER | CLONE_NEWNET)

        started: dict[str, Any] = {}
        ready = threading.Event()

        # The supervisor asks the kernel to signal it when its parent thread ends: fork from a thread that
        # lives as long as the actor.
        def spawn_and_stay() -> None:
            try:
                started["p"] = subprocess.Popen(
                    cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    cwd=self.private, env=env, preexec_fn=confine)
            except BaseException as e:  # noqa: BLE001 - handed to __init__, which raises it
                started["error"] = e
            finally:
                ready.set()
            threading.Event().wait()

        threading.Thread(target=spawn_and_stay, daemon=True).start()
        ready.wait()
        if "error" in started:
            raise started["error"]
        self.proc: subprocess.Popen[bytes] = started["p"]
        threading.Thread(target=self._gather_stderr, daemon=True).start()

    def _gather_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in iter(lambda: self.proc.stderr.readline(64 << 10), b""):  # type: ignore[union-attr]
            self.new_stderr.append(raw.decode("utf-8", "replace"))

    def request(self, line: str) -> tuple[str | None, int | None]:
        """The worker's reply line, or None and its exit status when it died instead."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
        except OSError:
            reply = b""
        if reply:
            return reply.decode("utf-8", "replace").rstrip("\n"), None
        return None, self.proc.wait()

    def stderr_lines(self) -> list[str]:
        out = []
        while self.new_stderr:
            out.append(self.new_stderr.popleft())
        return out

    def where(self) -> dict[str, Any]:
        """Where the worker runs, for the hello: its node, its process, whether its network is its own."""
        import socket

        def net(pid: int) -> str | None:
            try:
                return os.readlink(f"/proc/{pid}/ns/net")
            except OSError:
                return None

        own, theirs = net(os.getpid()), net(self.proc.pid)
        return {"node": socket.gethostname(), "pid": self.proc.pid,
                "network_isolated": None if own is None or theirs is None else own != theirs,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def with_remote(reply: str, where: dict[str, Any]) -> str:
    """The hello's reply with `remote`: where the worker runs on the cluster (its sandbox facts are its own)."""
    try:
        parsed = json.loads(reply)
    except ValueError:
        return reply
    if isinstance(parsed, dict) and parsed.get("ok") and isinstance(parsed.get("result"), dict):
        parsed["result"]["remote"] = where
        return json.dumps(parsed)
    return reply


def _die_like(status: int) -> None:
    """Ends this process as the worker ended: by its signal, or with its exit code."""
    sys.stderr.flush()
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status or 1)


def _fail(message: str) -> int:
    print(f"ksearch-worker: {message}", file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ksearch_worker.ray_bridge", description=__doc__)
    parser.add_argument("--address", help="ray://HOST:PORT, HOST:PORT or auto")
    parser.add_argument("--target", required=True)
    parser.add_argument("--supervise", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.supervise:
        return supervise(args.target)
    if not args.address:
        parser.error("--address is required")
    from .__main__ import _die_with_parent, _take_protocol_fds
    _die_with_parent()
    # The protocol gets private copies of stdin and stdout before Ray loads: nothing Ray prints can reach
    # ksearch as a reply.
    requests, replies = _take_protocol_fds()
    try:
        import ray
        from ray.exceptions import RayActorError
    except ImportError:
        return _fail("--cluster needs Ray in the worker's Python: ksearch installs it into the environment it "
                     "manages; with --python, `pip install -r requirements-ray.txt` (the worker package's "
                     "folder) into that interpreter")
    import logging
    package = os.path.dirname(os.path.abspath(__file__))
    # The worker package travels with the job, so a node of the cluster imports the same code.
    ray.init(address=args.address, log_to_driver=False, logging_level=logging.WARNING,
             runtime_env={"py_modules": [package]})
    gpu = args.target != "cpu"
    actor_class = ray.remote(num_gpus=1 if gpu else 0, num_cpus=0 if gpu else 1, max_concurrency=2)(Holder)
    passed = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    setup: list[str] = []

    def ask(actor: Any, line: str) -> tuple[str | None, int | None]:
        done = actor.request.remote(line)
        while True:
            ready, _ = ray.wait([done], timeout=0.2)
            for text in ray.get(actor.stderr_lines.remote()):
                sys.stderr.write(text)
            sys.stderr.flush()
            if ready:
                return ray.get(done)

    def replace(old: Any) -> Any:
        """A new actor set up as the old one was; the old one killed, so its device is free again."""
        try:
            ray.kill(old, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        new = actor_class.remote(args.target, passed)
        for earlier in setup:
            reply, _ = ask(new, earlier)
            if reply is None or not json.loads(reply).get("ok"):
                raise RuntimeError(f"the replacement actor refused a setup request: {(reply or '')[:300]}")
        return new

    actor = actor_class.remote(args.target, passed)
    for raw in requests:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        try:
            op = json.loads(line).get("op")
        except (ValueError, AttributeError):
            op = None
        try:
            reply, status = ask(actor, line)
        except RayActorError as e:
            print(f"ksearch-worker: the Ray actor holding the worker was lost ({type(e).__name__}); "
                  "a new one is set up and asked again", file=sys.stderr, flush=True)
            try:
                actor = replace(actor)
                reply, status = ask(actor, line)
            except (RayActorError, RuntimeError, ValueError) as again:
                return _fail(f"the replacement Ray actor failed too: {again}")
        if op in SETUP:
            setup.append(line)
        if reply is None:
            _die_like(status if status is not None else 1)
        if op == "hello":
            reply = with_remote(reply, ray.get(actor.where.remote()))
        replies.write(reply.encode() + b"\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
