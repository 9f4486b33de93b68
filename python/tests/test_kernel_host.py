"""Candidate code runs in the kernel host, never in the worker: its own process (and, under root, its own
unprivileged user), outside the worker's memory; what it does to its socket or to itself fails only the
evaluation in flight."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import Worker, add_run, add_task

from ksearch_worker.arrays import ArraySet
from ksearch_worker.kernel_host import NOBODY
from ksearch_worker.targets.cpu import CpuTarget

CORRECT = """
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
}
"""

# What the kernel can see of its process and its parent; -errno where an open fails.
PROBE = """
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
static int64_t try_open(const char* what) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/%s", (long)getppid(), what);
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return -errno;
    close(fd);
    return 0;
}
void probe(const int64_t* X, int64_t* Y, int64_t n) {
    (void)X; (void)n;
    Y[0] = getpid(); Y[1] = getppid(); Y[2] = getuid(); Y[3] = geteuid(); Y[4] = getgid();
    Y[5] = try_open("mem"); Y[6] = try_open("fd/0"); Y[7] = try_open("environ");
}
"""
PROBE_PROTO = "#include <stdint.h>\nvoid probe(const int64_t* X, int64_t* Y, int64_t n);\n"


def _compile(target: CpuTarget, folder: Path, key: str, source: str, proto: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.c").write_text(source)
    (folder / "generated.h").write_text(proto)
    r = target.compile(key, str(folder), ["kernel.c"], "generated.h")
    assert r["status"] == "compiled", r["log"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux only")
def test_the_kernel_runs_in_another_process_that_cannot_read_the_worker(tmp_path: Path) -> None:
    target = CpuTarget()
    _compile(target, tmp_path / "probe", "probe", PROBE, PROBE_PROTO)
    arrays = ArraySet([("X", (1,), np.dtype("int64")), ("Y", (8,), np.dtype("int64"))])
    target.bind("probe", [{"kernel": "probe", "inputs": ["X"], "outputs": ["Y"], "scalars": [1]}], arrays)()
    pid, ppid, uid, euid, gid, mem, fd0, environ = (int(v) for v in arrays["Y"])
    assert pid == target.host_pid() and pid != os.getpid() and ppid == os.getpid()
    if os.geteuid() == 0:
        assert uid == euid == gid == NOBODY
        status = Path(f"/proc/{pid}/status").read_text()
        assert f"Uid:\t{NOBODY}\t{NOBODY}" in status
    else:
        assert uid == os.getuid()
    # The worker's memory, descriptors and environment are out of reach (another user, or not dumpable).
    assert mem < 0 and fd0 < 0 and environ < 0, (mem, fd0, environ)
    target.release()


def test_a_crash_fails_only_its_evaluation(worker: Worker, add_dir: Path) -> None:
    worker.load(add_dir, add_task())
    aborts = worker.compiled("""
#include <stdlib.h>
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) { abort(); }
""")
    r = worker.run(add_run(aborts))
    assert r["status"] == "crash" and "SIGABRT" in r["message"], r
    exits = worker.compiled("""
#include <stdlib.h>
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) { exit(3); }
""")
    r = worker.run(add_run(exits))
    assert r["status"] == "crash" and "exit status 3" in r["message"], r
    assert worker.run(add_run(worker.compiled(CORRECT)))["status"] == "passed"
    # A key compiled before the crash is loaded again into the fresh host.
    assert worker.run(add_run(aborts))["status"] == "crash"


def test_a_crash_is_seen_though_a_forked_child_keeps_the_socket(worker: Worker, add_dir: Path) -> None:
    worker.load(add_dir, add_task())
    key = worker.compiled("""
#include <signal.h>
#include <unistd.h>
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    if (fork() == 0) { sleep(20); _exit(0); }
    raise(SIGSEGV);
}
""")
    start = time.monotonic()
    r = worker.run(add_run(key))
    assert r["status"] == "crash" and "SIGSEGV" in r["message"], r
    assert time.monotonic() - start < 10


def test_garbage_on_the_socket_is_an_error(worker: Worker, add_dir: Path) -> None:
    worker.load(add_dir, add_task())
    key = worker.compiled("""
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
    for (int fd = 3; fd < 64; ++fd) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) write(fd, "\\0\\0\\0\\2ok", 6);
    }
}
""")
    r = worker.run(add_run(key))
    assert r["status"] == "error" and "broke the protocol" in r["message"], r
    assert worker.run(add_run(worker.compiled(CORRECT)))["status"] == "passed"


def test_a_host_that_skips_timed_work_is_caught(worker: Worker, add_dir: Path) -> None:
    # Correct for the checks (the first seeds' calls), then lazy: it writes nothing any more.
    worker.load(add_dir, add_task())
    key = worker.compiled("""
static int calls = 0;
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    if (++calls > 8) return;
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
}
""")
    timing = {"enabled": True, "warmup_s": 0.0, "min_samples": 2, "max_samples": 3, "budget_s": 0.05,
              "min_sample_s": 0.0001}
    r = worker.run(add_run(key, seeds=[1, 2], timing=timing))
    assert r["status"] == "wrong" and r["message"].startswith("after timing"), r["message"]
    assert "a timed run left" in r["message"] and r["timing"] is None


def test_what_a_build_leaves_in_its_host_never_meets_the_next(worker: Worker, add_dir: Path) -> None:
    # Correct, but leaves a thread that later writes garbage to the host's socket: with a host per build,
    # the next build's evaluation runs in a fresh host and never sees it.
    worker.load(add_dir, add_task())
    saboteur = worker.compiled("""
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
static void* later(void* arg) {
    (void)arg;
    usleep(300000);
    for (int fd = 3; fd < 64; ++fd) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) write(fd, "\\0\\0\\0\\2ok", 6);
    }
    return 0;
}
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    static int started = 0;
    if (!started++) { pthread_t t; pthread_create(&t, 0, later, 0); }
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
}
""")
    assert worker.run(add_run(saboteur, seeds=[1]))["status"] == "passed"
    key = worker.compiled(CORRECT)
    time.sleep(0.5)
    r = worker.run(add_run(key))
    assert r["status"] == "passed", r["message"]
