"""The worker protocol's `run` request and result, typed (docs/formats.md §3; the Rust side's definition is
src/protocol.rs). tests/test_wire.py keeps these, the document and what the worker really sends in step."""

from __future__ import annotations

from typing import Any, TypedDict


class InputSeeds(TypedDict):
    pool: str
    checks: list[int]
    recheck: int
    timed_checks: list[int]
    supply: int
    order: int


class TimingSettings(TypedDict):
    enabled: bool
    warmup_s: float
    min_samples: int
    max_samples: int
    budget_s: float
    min_sample_s: float
    noisy_iqr: float
    verdict_z: float
    min_effect: float
    max_rounds: int
    compare_budget_s: float
    supply_bytes: int
    throughput: bool


class BuildRef(TypedDict):
    key: str
    launches: list[dict[str, Any]]
    buffers: list[dict[str, Any]]


class RunRequest(TypedDict):
    key: str
    workload: dict[str, Any]
    buffers: list[dict[str, Any]]
    launches: list[dict[str, Any]]
    inputs: InputSeeds
    timing: TimingSettings
    baselines: list[str]
    incumbent: BuildRef | None


class PoolSeeds(TypedDict):
    pool: str
    seeds: list[int]
    supply: int


class PrepareRequest(TypedDict):
    workload: dict[str, Any]
    inputs: PoolSeeds
    timing: TimingSettings
    baselines: list[str]
    retime_baselines: bool


class PrecompileWorkload(TypedDict):
    workload: dict[str, Any]
    buffers: list[dict[str, Any]]
    launches: list[dict[str, Any]]


class PrecompileRequest(TypedDict):
    key: str
    workloads: list[PrecompileWorkload]


class PrecompileResult(TypedDict, total=False):
    modules: int
    compiled: int
    seconds: float
    longest_s: float
    in_worker: bool
    compile_error: str


class TimingResult(TypedDict, total=False):
    median_s: float
    iqr_s: float
    min_s: float
    max_s: float
    samples: int
    reps: int
    calls: int
    distinct_inputs: int
    noisy: bool
    sampled_checks: int
    launches_per_eval: int
    link_s: float
    rtt_s: float
    cached: bool
    independent_s: float
    alone_s: float


class Verdict(TypedDict):
    verdict: str
    speedup: float
    z: float
    rounds: int
    log_ratio_iqr: float
    settled: bool


class Split(TypedDict):
    kernel_s: float
    setup_s: float
    checks_s: float
    timing_s: float
    recheck_s: float
    baselines_s: float
    warm_s: float
    reference_s: float
    draw_s: float
    total_s: float
    overhead_s: float


class RunResult(TypedDict, total=False):
    status: str
    message: str
    checks: list[dict[str, Any]]
    timing: TimingResult | None
    incumbent: TimingResult | None
    verdict: Verdict | None
    baselines: dict[str, TimingResult]
    split: Split
    metal_sources: list[str]
    restart_worker: bool


class PrepareResult(TypedDict):
    baselines: dict[str, TimingResult]
    baselines_timed_now: bool
    baselines_unavailable: dict[str, str]
    split: Split


RUN_STATUSES = ("passed", "wrong", "compile_error", "unavailable", "invalid", "crash", "error")
ERROR_KINDS = ("bad_request", "bad_task", "not_compiled", "unsupported_dtype", "compiler_missing",
               "backend_unavailable", "device_lost", "internal")
