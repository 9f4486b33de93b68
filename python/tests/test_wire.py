"""The protocol's Python definition (ksearch_worker/wire.py) against docs/formats.md §3 and against what the
worker really sends and reads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conftest import M, N, Worker, add_run, add_task

from ksearch_worker import wire
from ksearch_worker.errors import WorkerError
from ksearch_worker.evaluate import Split
from ksearch_worker.pool import Pool
from ksearch_worker.timing import TimingConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def documented(heading: str) -> set[str]:
    """The names in the first column of the table under `#### heading`."""
    lines = DOC.read_text().splitlines()
    start = lines.index(f"#### {heading}")
    rows = []
    for line in lines[start + 1:]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("|"):
            rows.append(line)
    return {r.split("|")[1].strip().strip("`") for r in rows[2:]}


def test_the_document_and_the_python_types_list_the_same_fields() -> None:
    assert documented("run request") == set(wire.RunRequest.__annotations__)
    assert documented("prepare request") == set(wire.PrepareRequest.__annotations__)
    assert documented("prepare.inputs") == set(wire.PoolSeeds.__annotations__)
    assert documented("prepare result") == set(wire.PrepareResult.__annotations__)
    assert documented("precompile request") == set(wire.PrecompileRequest.__annotations__)
    assert documented("precompile result") == set(wire.PrecompileResult.__annotations__)
    assert documented("run.inputs") == set(wire.InputSeeds.__annotations__)
    assert documented("run.timing") == set(wire.TimingSettings.__annotations__)
    assert documented("run result") == set(wire.RunResult.__annotations__)
    assert documented("timing result") == set(wire.TimingResult.__annotations__)
    assert documented("verdict") == set(wire.Verdict.__annotations__)
    assert documented("split") == set(wire.Split.__annotations__)
    assert documented("run statuses") == set(wire.RUN_STATUSES)
    assert documented("error kinds") == set(wire.ERROR_KINDS)


def test_the_worker_reads_every_timing_setting() -> None:
    assert {f.name for f in dataclasses.fields(TimingConfig)} == set(wire.TimingSettings.__annotations__)


def test_the_worker_reports_the_documented_split() -> None:
    report = Split(Pool())
    report.parts.update({k: 0.0 for k in ("setup_s", "checks_s", "timing_s", "recheck_s", "baselines_s", "warm_s")})
    assert set(report.report()) == set(wire.Split.__annotations__)


def test_a_real_run_result_has_only_documented_fields(worker: Worker, add_dir: Path) -> None:
    worker.load(add_dir, add_task())
    key = worker.compiled("""
void add(const float* A, const float* B, float* C, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M * N; i++) C[i] = 2 * A[i] + B[i];
}
""")
    timing = {"enabled": True, "warmup_s": 0.0, "min_samples": 2, "max_samples": 3, "budget_s": 0.05,
              "min_sample_s": 0.0001}
    r = worker.run(add_run(key, timing=timing, baselines=["numpy"], incumbent=key))
    assert r["status"] in wire.RUN_STATUSES
    assert set(r) <= set(wire.RunResult.__annotations__), set(r) - set(wire.RunResult.__annotations__)
    assert set(r["timing"]) <= set(wire.TimingResult.__annotations__)
    assert set(r["split"]) <= set(wire.Split.__annotations__)
    assert set(add_run(key, incumbent=key)) - {"op"} == set(wire.RunRequest.__annotations__)
    assert (M, N) == (48, 40)


def test_every_error_kind_the_worker_raises_is_documented() -> None:
    source = "\n".join(p.read_text() for p in (Path(__file__).resolve().parents[1] / "ksearch_worker").rglob("*.py"))
    import re

    kinds = set(re.findall(r'WorkerError\(\s*"([a-z_]+)"', source)) | {"internal"}
    assert kinds <= set(wire.ERROR_KINDS), kinds - set(wire.ERROR_KINDS)
    assert WorkerError("bad_request", "x").kind in wire.ERROR_KINDS
