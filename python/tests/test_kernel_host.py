"""Candidate code runs in the jail, never in the worker: the compiler and the kernel host each in a PID
namespace of its own, as an unprivileged user, confined to the candidate's folder; what it does to its socket
or to itself fails only the evaluation in flight, and nothing it starts outlives the evaluation."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest
from conftest import Worker, add_run, add_task

from ksearch_worker import landlock
from ksearch_worker.jail import UID_BASE, probe

CORRECT = """
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
}
"""
LINUX = sys.platform.startswith("linux")
JAIL = probe() if LINUX else {}
TIMING = {"enabled": True, "warmup_s": 0.0, "min_samples": 2, "max_samples": 3, "budget_s": 0.05,
          "min_sample_s": 0.0001}


def _pids_of(uid: int) -> set[int]:
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"Uid:\t{uid}\t" in (entry / "status").read_text():
                    pids.add(int(entry.name))
            except OSError:
                pass
    return pids


def _alive(pid: int) -> bool:
    try:
        state = [ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("State:")]
        return bool(state) and state[0].split()[1] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not LINUX, reason="PID namespaces and /proc are Linux only")
def test_the_jail_is_in_force_here() -> None:
    assert JAIL["pid_namespace"] is True and JAIL["landlock_abi"] >= 1 and JAIL["reads_confined"] is True, JAIL
    if os.geteuid() == 0:
        assert JAIL["uid"] >= UID_BASE and JAIL["user"] == f"uid {JAIL['uid']}"


@pytest.mark.skipif(not LINUX, reason="/proc is Linux only")
def test_the_kernel_runs_unprivileged_in_its_own_namespace_and_cannot_read_the_worker(worker: Worker,
                                                                                         add_dir: Path) -> None:
    # Correct only if the kernel runs as PID 2 of a namespace of its own (under the namespace's init), as the
    # expected user, and can open neither its own nor anyone else's /proc entries.
    worker.load(add_dir, add_task())
    low = UID_BASE if os.geteuid() == 0 else os.getuid()
    key = worker.compiled(rf"""
#include <fcntl.h>
#include <unistd.h>
static int opens(const char* path) {{ int fd = open(path, O_RDONLY); if (fd >= 0) {{ close(fd); return 1; }} return 0; }}
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {{
    int ok = getpid() == 2 && getuid() >= {low} && geteuid() == getuid() && getgid() == getuid()
          && !opens("/proc/self/environ") && !opens("/proc/1/environ") && !opens("/proc/self/mem");
    for (int64_t i = 0; i < M * N; i++) C[i] = ok ? 2 * A[i] + B[i] : 0.0f;
}}
""")
    r = worker.run(add_run(key, seeds=[1]))
    assert r["status"] == "passed", r["message"]


@pytest.mark.skipif(not LINUX, reason="PID namespaces are Linux only")
def test_nothing_a_candidate_starts_outlives_its_evaluation(worker: Worker, add_dir: Path) -> None:
    """A setsid daemon, a double-forked child and a thread that outlives its call: none survives the end of
    the evaluation, and the next evaluation is unaffected."""
    worker.load(add_dir, add_task())
    marker = f"ksearch-escapee-{os.getpid()}"
    # The escape proves itself: unless both processes run `sleep` under the marker's name and the thread
    # started, C is wrong, so an escape that silently failed to start cannot pass the survivors check.
    key = worker.compiled(rf"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void* spin(void* arg) {{ (void)arg; for (;;) sleep(1); return 0; }}
static int report[2];  /* close-on-exec: EOF once every process started has exec'd */
static void sleeper(void) {{
    execl("/bin/sleep", "{marker}", "60", (char*)0);
    (void)!write(report[1], "x", 1);
    _exit(127);
}}
static int escape(void) {{
    if (pipe2(report, O_CLOEXEC) != 0) return 0;
    /* a daemon in a session of its own */
    pid_t daemon = fork();
    if (daemon == 0) {{ setsid(); sleeper(); }}
    /* a double fork: the grandchild is orphaned at once; its pid comes back through a pipe */
    int pids[2]; pid_t orphan = -1;
    if (pipe(pids) == 0) {{
        pid_t middle = fork();
        if (middle == 0) {{ pid_t g = fork(); if (g == 0) sleeper(); (void)!write(pids[1], &g, sizeof g); _exit(0); }}
        close(pids[1]);
        if (read(pids[0], &orphan, sizeof orphan) != sizeof orphan) orphan = -1;
        close(pids[0]);
        if (middle > 0) waitpid(middle, 0, 0);
    }}
    close(report[1]);
    char c;
    int failed = read(report[0], &c, 1) != 0;
    pthread_t t;
    int thread = pthread_create(&t, 0, spin, 0) == 0;
    return daemon > 0 && orphan > 0 && !failed && kill(daemon, 0) == 0 && kill(orphan, 0) == 0 && thread;
}}
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {{
    static int started = 0, escaped = 0;
    if (!started++) escaped = escape();
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
    if (!escaped) C[0] = NAN;
}}
""")
    r = worker.run(add_run(key, seeds=[1], timing=TIMING))
    assert r["status"] == "passed", r["message"]
    deadline = time.monotonic() + 5
    survivors: list[str] = []
    while time.monotonic() < deadline:
        survivors = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if marker in cmd and _alive(int(entry.name)):
                    survivors.append(f"{entry.name}: {cmd}")
        if not survivors:
            break
        time.sleep(0.05)
    assert not survivors, survivors
    assert worker.run(add_run(worker.compiled(CORRECT), timing=TIMING))["status"] == "passed"


@pytest.mark.skipif(not LINUX or landlock.abi() < 4, reason="Landlock's network rules need Linux ABI 4")
def test_the_kernel_can_neither_connect_nor_listen_on_tcp(worker: Worker, add_dir: Path) -> None:
    """A TCP listener of this test's, reachable from here: the kernel's connect to it and its own bind must
    both fail (Landlock), whatever network the worker has."""
    worker.load(add_dir, add_task())
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        key = worker.compiled(rf"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
static int reaches(int port, int bind_it) {{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return 0;
    struct sockaddr_in a = {{0}};
    a.sin_family = AF_INET; a.sin_port = htons(port); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = (bind_it ? bind(s, (struct sockaddr*)&a, sizeof a) : connect(s, (struct sockaddr*)&a, sizeof a)) == 0;
    close(s);
    return ok;
}}
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {{
    int cut_off = !reaches({port}, 0) && !reaches(0, 1);
    for (int64_t i = 0; i < M * N; i++) C[i] = cut_off ? 2 * A[i] + B[i] : 0.0f;
}}
""")
        r = worker.run(add_run(key, seeds=[1]))
    assert r["status"] == "passed", r["message"]


CANARY_READERS = {
    "include": ('#include "{canary}"\n', ""),
    "incbin": ('__asm__(".section .rodata\\n.incbin \\"{canary}\\"\\n.previous");\n', ""),
    # The compiler's own process: its environment (a worker's secrets would be there) and its memory map.
    "incbin /proc": ('__asm__(".section .rodata\\n.incbin \\"/proc/self/environ\\"\\n.previous");\n', ""),
    "include /proc": ('#include "/proc/self/maps"\n', ""),
}


@pytest.fixture()
def canary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root-only file (0600) that no candidate code may read, at compile or at run time."""
    folder = tmp_path_factory.mktemp("secret")
    path = folder / "canary.txt"
    path.write_text("CANARY-7f3a9e\n")
    path.chmod(0o600)
    return path


@pytest.mark.skipif(not LINUX, reason="Landlock is Linux only")
@pytest.mark.parametrize("how", list(CANARY_READERS))
def test_the_compiler_cannot_read_outside_the_candidates_folder(worker: Worker, canary: Path, how: str) -> None:
    head, _ = CANARY_READERS[how]
    key, r = worker.compile(head.format(canary=canary) + CORRECT)
    assert r["status"] == "compile_error", r
    assert "CANARY-7f3a9e" not in r["log"] and "PATH=" not in r["log"] and "r-xp" not in r["log"]


@pytest.mark.skipif(not LINUX, reason="Landlock is Linux only")
def test_the_kernel_cannot_read_outside_its_folder_at_run_time(worker: Worker, add_dir: Path, canary: Path) -> None:
    # The kernel computes C correctly only if it could read nothing of the canary, /proc/self/environ, the
    # worker's task folder or the parent directory of its own folder.
    worker.load(add_dir, add_task())
    key = worker.compiled(rf"""
#include <fcntl.h>
#include <unistd.h>
static int readable(const char* path) {{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    char c; int n = (int)read(fd, &c, 1); close(fd);
    return n > 0;
}}
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {{
    int leaks = readable("{canary}") + readable("/proc/self/environ") + readable("/proc/1/cmdline")
              + readable("{add_dir / 'reference.py'}") + readable("../generated.h") + readable("/etc/passwd");
    for (int64_t i = 0; i < M * N; i++) C[i] = leaks ? 0.0f : 2 * A[i] + B[i];
}}
""")
    r = worker.run(add_run(key, seeds=[1]))
    assert r["status"] == "passed", r["message"]


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


def test_garbage_on_the_socket_is_the_candidates_failure(worker: Worker, add_dir: Path) -> None:
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
    assert r["status"] == "crash" and "broke the protocol" in r["message"], r
    assert worker.run(add_run(worker.compiled(CORRECT)))["status"] == "passed"


def test_exhausting_descriptors_is_the_candidates_failure(worker: Worker, add_dir: Path) -> None:
    worker.load(add_dir, add_task())
    key = worker.compiled("""
#include <fcntl.h>
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    while (open("/dev/null", O_RDONLY) >= 0) {}
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
}
""")
    r = worker.run(add_run(key, timing=TIMING))
    assert r["status"] == "crash" and "exhausted" in r["message"] and "descriptor" in r["message"], r
    assert worker.run(add_run(worker.compiled(CORRECT)))["status"] == "passed"


def test_a_host_that_skips_timed_work_is_caught(worker: Worker, add_dir: Path) -> None:
    # Correct for the checks (the first calls), then lazy: it writes nothing any more.
    worker.load(add_dir, add_task())
    key = worker.compiled("""
static int calls = 0;
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    if (++calls > 8) return;
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
}
""")
    r = worker.run(add_run(key, seeds=[1, 2], timing=TIMING))
    assert r["status"] == "wrong" and r["message"].startswith("after timing"), r["message"]
    assert "unwritten" in r["message"], r["message"]
    # Caught at a compared timed call (no timing kept), or, where a loaded machine made too few timed calls for the
    # lazy ones to be among those compared, by the recheck on fresh inputs where timing ran (its timing kept).
    assert r["timing"] is None or "on fresh inputs where timing ran" in r["message"], r


def test_a_host_that_copies_the_previous_output_is_caught(worker: Worker, add_dir: Path) -> None:
    # Honest for its first 8 calls, then copies its last output whenever called again: every timed call has
    # inputs of its own, so the copied output is wrong wherever a timed call is compared.
    worker.load(add_dir, add_task())
    key = worker.compiled("""
#include <string.h>
static float last[48 * 40];
static int calls = 0;
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    if (++calls > 8) { memcpy(C, last, sizeof last); return; }
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
    memcpy(last, C, sizeof last);
}
""")
    r = worker.run(add_run(key, seeds=[1], timing=TIMING))
    assert r["status"] == "wrong" and r["message"].startswith("after timing"), r["message"]
