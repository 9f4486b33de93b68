"""Targets: where candidates are compiled and launched. The worker serves one target per process.

The pipeline (`evaluate.py`) drives every target through the same hooks: a `session` binds one compiled
candidate to one workload and runs its checks and rechecks; `time` times sessions on a `TimedPlan`;
`time_baselines` times the task's baselines with no candidate code alive.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import WorkerError

if TYPE_CHECKING:
    from ..evaluate import Build, RunRequest
    from ..pool import Layout, ReferenceSet
    from ..task import Task
    from ..timing import Measurement, TimingConfig

TARGETS = ("cpu", "mlx-metal", "mlx-cuda", "cuda")


def sets_beyond_cache(cache_bytes: int, input_bytes: int, most: int) -> int:
    """Input sets to rotate through so that together they hold twice the cache (a call never finds its inputs
    left in cache by the last round), at least 2 and at most `most`."""
    return max(2, min(most, -(-2 * cache_bytes // max(input_bytes, 1))))


# Timed input sets the recheck after timing writes fresh inputs into (few: large GPU outputs take long to
# compare), on every target.
RECHECK_SETS = 2

Launch = Mapping[str, Any]  # one resolved `launches` entry of a run request
Arrays = dict[str, np.ndarray]
# verify(set index, outputs, "candidate" | "incumbent"): compares a sampled timed call; raises when wrong.
Verify = Callable[[int, Arrays, str], None]


@dataclass
class CheckRun:
    """One checked call (or two, with `twice`): the outputs on the host, and what the target itself found
    (inputs modified, arrays written past their end, two runs that differ)."""
    outputs: Arrays
    problems: list[str] = field(default_factory=list)
    inputs_modified: list[str] = field(default_factory=list)
    overruns: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time of one call, for sizing the timing supply (on MLX, the first one's compile too)
    again_s: float = 0.0  # wall time of the second call, with `twice`
    where: int | None = None  # for a recheck: which timed input set it ran in


@dataclass
class TimedPlan:
    """The input sets of one candidate's timed calls: call i takes sets[i % len(sets)]. `ids` name each set
    (kind, seed, index: a supply set or a reference set) so targets can keep device or shared-memory copies
    between candidates; `checked` maps the positions whose calls are compared after timing to their
    reference. `extend(first, calls)`, called once warm-up is over, grows the sets so that sampling's calls
    (from call `first` on, `calls` expected) meet inputs of their own where memory allows, places the checked
    sets among them, and returns the last checked call (sampling goes on until it is made)."""
    sets: list[Arrays]
    ids: list[tuple[str, int, int]]
    checked: dict[int, ReferenceSet]
    extend: Callable[[int, int], int] = lambda first, calls: first
    # The calls (by number) drawn for comparison on the host. Where the sets repeat, a checked set is met by
    # many more calls; on a GPU copying each of those to the host costs seconds a candidate on large workloads
    # (the MLX target screens them on the device instead).
    checked_calls: set[int] = field(default_factory=set)

    def compares(self, call: int, index: int) -> bool:
        """Whether call number `call`, on set `index`, is one drawn for comparison on the host."""
        return index in self.checked and call in self.checked_calls


class BaselineUnavailable(Exception):
    """A baseline that cannot run on this machine (its library, or the torch it takes, is missing here)."""


class TimedRunWrong(Exception):
    """A timed call left outputs that differ from the reference, unwritten, or past their end."""


class CandidateFailure(Exception):
    """The candidate failed in a way the target recognised (a crash, a compiler error at its first launch, a
    launch the device refused, resources it exhausted); `status` is the verdict."""

    def __init__(self, status: str, message: str, restart_worker: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.restart_worker = restart_worker

    def result(self, checks: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "message": self.message[-8000:], "checks": checks,
                               "timing": None, "baselines": {}}
        if self.restart_worker:
            out["restart_worker"] = True
        return out


class Session(Protocol):
    """One compiled candidate bound to one workload; a context manager that ends everything it started."""

    def check(self, inputs: Arrays, twice: bool) -> CheckRun: ...

    def recheck(self, inputs: Arrays) -> list[CheckRun]:
        """Fresh inputs written where timing ran, each checked."""
        ...

    def ready(self) -> bool:
        """Whether the build can run here: asked of an incumbent before it is timed beside a candidate (one
        that no longer can is not compared, and never blamed on the candidate)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Session: ...

    def __exit__(self, *exc: object) -> None: ...


class Target(Protocol):
    name: str
    # MLX fills outputs with a plain NaN (no payload), so any NaN the reference does not expect is unwritten.
    poisons_with_plain_nan: bool

    def describe(self, remembered: dict[str, Any]) -> dict[str, Any]:
        """`hardware` and `compiler` of the hello reply; `remembered` holds peaks measured here before, by
        device name, used instead of measuring them again."""
        ...

    def compile(self, key: str, dir: str, sources: Sequence[str], include: str | None) -> dict[str, Any]:
        """The `compile` op (the CPU target; GPU targets record their kernels through `compile_kernels`)."""
        ...

    def compiled(self, key: str) -> bool:
        """Whether `compile` built this key in this process."""
        ...

    def validate(self, r: RunRequest) -> None:
        """Refuses what this target cannot run (a dtype) with WorkerError, before anything runs."""
        ...

    def runs_here(self) -> bool:
        """Whether this machine can run the target's kernels (mlx-metal needs a Mac)."""
        ...

    def unavailable(self, r: RunRequest, task: Task) -> dict[str, Any] | None:
        """A complete reply when the device is not on this machine (mlx-metal off a Mac), else None."""
        ...

    def finish(self, r: RunRequest, result: dict[str, Any]) -> dict[str, Any]:
        """The reply as the target wants it told (e.g. compiler messages with the plan's file names)."""
        ...

    def session(self, build: Build, r: RunRequest, task: Task) -> Session: ...

    def time(self, sessions: Sequence[Any], plan: TimedPlan, verify: Verify, cfg: TimingConfig,
             paired: bool) -> Measurement:
        """Times the sessions (the candidate, and its incumbent when `paired`) on the plan's input sets."""
        ...

    def time_baselines(self, fns: Mapping[str, Callable[..., Any]], sets: Sequence[Arrays], dims: dict[str, int],
                       layout: Layout, cfg: TimingConfig) -> dict[str, dict[str, Any]]: ...

    def baseline_sets(self, layout: Layout) -> int:
        """How many supply sets `time_baselines` uses (`prepare` draws no more)."""
        ...

    def baseline_outputs(self, fn: Callable[..., Any], inputs: Arrays, dims: dict[str, int],
                         layout: Layout) -> Arrays:
        """One call of baseline `fn` on `inputs` (uploaded afresh), its outputs on the host (bfloat16 widened
        to float32), for comparing with the reference before the baseline is timed. Raises BaselineUnavailable
        where the baseline cannot run here."""
        ...

    def warm(self, layout: Layout) -> None:
        """Readies what the target itself runs for this workload (its own kernels), in `prepare`: out of every
        candidate's time and deadline."""
        ...


def make_target(name: str) -> Target:
    if name == "cpu":
        from .cpu import CpuTarget
        return CpuTarget()
    if name in ("mlx-metal", "mlx-cuda"):
        from .mlx import MlxTarget
        return MlxTarget(name)
    if name == "cuda":
        from .cuda import CudaTarget
        return CudaTarget()
    raise WorkerError("bad_request", f"unknown target {name!r}; this worker serves {', '.join(TARGETS)}")
