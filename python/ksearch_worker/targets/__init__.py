"""Targets: where candidates are compiled and launched. The worker serves one target per process."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import WorkerError

TARGETS = ("cpu", "mlx-metal", "mlx-cuda")

Launch = Mapping[str, Any]  # one resolved `launches` entry of a run request


class Target(Protocol):
    name: str

    def describe(self) -> dict[str, Any]:
        """`hardware` and `compiler` of the hello reply."""
        ...

    def cache_bytes(self) -> int:
        """Size of the cache that timing rotates copies past."""
        ...

    def compile(self, key: str, dir: str, sources: Sequence[str], include: str | None) -> dict[str, Any]:
        """The `compile` result: status, log, seconds, command."""
        ...

    def compiled(self, key: str) -> bool:
        """Whether `compile` built this key in this process."""
        ...

    def bind(self, key: str, launches: Sequence[Launch], arrays: Mapping[str, np.ndarray]) -> Callable[[], None]:
        """A call that runs every launch in order on these arrays (raises WorkerError not_compiled)."""
        ...


def make_target(name: str) -> Target:
    if name == "cpu":
        from .cpu import CpuTarget
        return CpuTarget()
    if name in ("mlx-metal", "mlx-cuda"):
        from .mlx import MlxTarget
        return MlxTarget(name)
    raise WorkerError("bad_request", f"unknown target {name!r}; this worker serves {', '.join(TARGETS)}")
