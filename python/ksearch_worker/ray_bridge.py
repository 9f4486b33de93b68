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
from typing import Any

# Environment variables the worker needs from ksearch's side; everything else comes from the node.
PASSED_ENV = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "KSEARCH_WRITABLE",
              "KSEARCH_REFERENCE_CACHE", "KSEARCH_WORKER_PROFILE", "KSEARCH_ALLOW_CLUSTERS")
# Requests replayed to a replacement actor before the one in flight, in the order they came.
SETUP = ("hello", "load_task")
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSW", "CREDENTIAL", "COOKIE", "AUTH", "SESSION")
CORE_LIMIT, FILE_SIZE, CPU_ADDRESS_SPACE = 0, 4 << 30, 16 << 30
CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000


def _confine(cpu: bool) -> None:
    """In the worker's child between fork and exec: the limits ksearch's sandbox.rs sets on a local worker."""
    resource.setrlimit(resource.RLIMIT_CORE, (CORE_LIMIT, CORE_LIMIT))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))
    if cpu and sys.platform.startswith("linux"):
        resource.setrlimit(resource.RLIMIT_AS, (CPU_ADDRESS_SPACE, CPU_ADDRESS_SPACE))
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) != 0:
            libc.unshare(CLONE_NEWUSER | CLONE_NEWNET)


def worker_env(passed: dict[str, str], private: str) -> dict[str, str]:
    """The node's environment without secrets, with ksearch's variables and the private folder."""
    env = {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in SECRET_MARKERS)}
    env.update(passed)
    env.update(TMPDIR=private, TMP=private, TEMP=private, HOME=private)
    return env


class Holder:
    """The worker process on a node, its stdout read a line per request and its stderr gathered."""

    def __init__(self, target: str, passed: dict[str, str]) -> None:
        self.private = tempfile.mkdtemp(prefix="ksearch-ray-worker-")
        self.new_stderr: collections.deque[str] = collections.deque(maxlen=4000)
        cpu = target == "cpu"
        cmd = [sys.executable, "-m", "ksearch_worker", "--target", target]
        # The package as Ray placed it on this node (runtime_env py_modules) comes first on the path.
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        passed = dict(passed, PYTHONPATH=os.pathsep.join(filter(None, [here, passed.get("PYTHONPATH")])))
        started: dict[str, Any] = {}
        # The worker asks the kernel to kill it when its parent thread ends: fork from a thread that lives
        # as long as the actor.
        ready = threading.Event()

        def spawn_and_stay() -> None:
            started["p"] = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=self.private, env=worker_env(passed, self.private), preexec_fn=lambda: _confine(cpu),
                start_new_session=True)
            ready.set()
            threading.Event().wait()

        threading.Thread(target=spawn_and_stay, daemon=True).start()
        ready.wait()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ksearch_worker.ray_bridge", description=__doc__)
    parser.add_argument("--address", required=True, help="ray://HOST:PORT, HOST:PORT or auto")
    parser.add_argument("--target", required=True)
    args = parser.parse_args(argv)
    try:
        import ray
        from ray.exceptions import RayActorError
    except ImportError:
        print("ksearch-worker: --cluster needs Ray in the worker's Python: ksearch installs it into the "
              "environment it manages; with --python, `pip install -r requirements-ray.txt` (the worker "
              "package's folder) into that interpreter", file=sys.stderr)
        return 2
    import logging
    package = os.path.dirname(os.path.abspath(__file__))
    # The worker package travels with the job, so a node of the cluster imports the same code.
    ray.init(address=args.address, log_to_driver=False, logging_level=logging.WARNING,
             runtime_env={"py_modules": [package]})
    gpu = args.target != "cpu"
    actor_class = ray.remote(num_gpus=1 if gpu else 0, num_cpus=0 if gpu else 1, max_concurrency=2)(Holder)
    passed = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    setup: list[str] = []

    def start() -> Any:
        return actor_class.remote(args.target, passed)

    def ask(actor: Any, line: str) -> tuple[str | None, int | None]:
        done = actor.request.remote(line)
        while True:
            ready, _ = ray.wait([done], timeout=0.2)
            for text in ray.get(actor.stderr_lines.remote()):
                sys.stderr.write(text)
            sys.stderr.flush()
            if ready:
                return ray.get(done)

    actor = start()
    for line in sys.stdin:
        line = line.rstrip("\n")
        try:
            op = json.loads(line).get("op")
        except (ValueError, AttributeError):
            op = None
        try:
            reply, status = ask(actor, line)
        except RayActorError as e:
            print(f"ksearch-worker: the Ray actor holding the worker was lost ({type(e).__name__}); "
                  "a new one is set up and asked again", file=sys.stderr, flush=True)
            actor = start()
            for earlier in setup:
                ask(actor, earlier)
            reply, status = ask(actor, line)
        if op in SETUP:
            setup.append(line)
        if reply is None:
            _die_like(status if status is not None else 1)
        if op == "hello":
            reply = with_remote(reply, ray.get(actor.where.remote()))
        sys.stdout.write(reply + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
