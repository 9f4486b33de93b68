"""The input sets of a run: what does not depend on the candidate is made once (docs/formats.md §3).

Two kinds of sets, both drawn from seeds the Rust side derives from the run's secret:

- **Reference sets**: inputs and the reference's outputs (computed in float64, out of any candidate's
  reach). Checks, the sample of timed calls that is compared after timing, and the recheck after timing use
  them. The outputs are computed once per seed and kept in memory (bounded) and on disk under the reference
  cache (`KSEARCH_REFERENCE_CACHE`, keyed by the task's fingerprint, the layout and the seed), so a restarted
  worker or a resumed run does not compute them again. Which set serves which role for which candidate is
  the Rust side's choice, so no candidate can tell in advance which of its inputs will be checked.
- **Supply sets**: inputs without outputs, for the timed calls nobody compares. Every timed call gets a set
  of its own where memory allows (`supply_bytes`), so a kernel that remembers outputs by their inputs never
  meets the same inputs twice while it is timed.

bfloat16 inputs are drawn in float32 and rounded to bfloat16 here, so every target and the reference see
exactly the same values.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import WORKER_VERSION
from .errors import WorkerError
from .inputs import make_inputs

Arrays = dict[str, np.ndarray]

DEFAULT_MEMORY_BYTES = 4 << 30  # reference sets kept in memory, oldest dropped first
DEFAULT_DISK_BYTES = 8 << 30  # reference outputs kept on disk, oldest removed first


def round_bf16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still as float32."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    # NaN and infinity keep their class (rounding must not turn a NaN payload into infinity).
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    return np.where(special, bits & np.uint32(0xFFFF0000), rounded).astype(np.uint32).view(np.float32)


@dataclass(frozen=True)
class Layout:
    """What fixes the shape of a set: the task's inputs and outputs for one workload."""
    dims: tuple[tuple[str, int], ...]
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # name, shape, dtype name (bfloat16 allowed)
    outputs: tuple[tuple[str, tuple[int, ...], str], ...]

    @staticmethod
    def of(dims: Mapping[str, int], shapes: Mapping[str, Sequence[int]], dtypes: Mapping[str, str],
           inputs: Sequence[str], outputs: Sequence[str]) -> Layout:
        return Layout(
            dims=tuple(sorted((k, int(v)) for k, v in dims.items())),
            inputs=tuple((n, tuple(int(d) for d in shapes[n]), str(dtypes[n])) for n in inputs),
            outputs=tuple((n, tuple(int(d) for d in shapes[n]), str(dtypes[n])) for n in outputs),
        )

    def key(self) -> str:
        return json.dumps([self.dims, self.inputs, self.outputs], separators=(",", ":"))

    def input_bytes(self) -> int:
        return sum(int(np.prod(s)) * _host_dtype(d).itemsize for _, s, d in self.inputs)


def _host_dtype(name: str) -> np.dtype:
    """The numpy dtype a set holds an array in (bfloat16 as float32 holding bfloat16 values)."""
    return np.dtype("float32") if name == "bfloat16" else np.dtype(name)


def draw(task: Any, layout: Layout, seed: int) -> Arrays:
    """One set of inputs for `seed`, from the task's make_inputs or its init distributions."""
    shapes = {n: s for n, s, _ in layout.inputs}
    dtypes = {n: _host_dtype(d) for n, _, d in layout.inputs}
    made = make_inputs(task.inputs, shapes, dtypes, dict(layout.dims), np.random.default_rng(seed), task.make_inputs)
    for name, _, dtype in layout.inputs:
        if dtype == "bfloat16":
            made[name] = round_bf16(made[name])
    return made


@dataclass
class ReferenceSet:
    seed: int
    inputs: Arrays
    expected: Arrays

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.inputs.values()) + sum(a.nbytes for a in self.expected.values())


def _stored(expected: np.ndarray, dtype: str) -> np.ndarray:
    """The reference's outputs as kept: float32 for outputs of 32 bits or fewer (rounding the float64 result
    to float32 moves it by half a float32 ulp, far below any tolerance of such an output), float64 else."""
    if dtype in ("float16", "bfloat16", "float32"):
        return np.asarray(expected, dtype=np.float32)
    if dtype == "float64":
        return np.asarray(expected, dtype=np.float64)
    return np.asarray(expected)


def reference_outputs(task: Any, layout: Layout, inputs: Arrays) -> Arrays:
    """The reference on float64 copies of `inputs` (integer and bool inputs keep their dtype)."""
    ref_inputs = {n: a.astype(np.float64) if a.dtype.kind == "f" else a.copy() for n, a in inputs.items()}
    expected = task.reference(ref_inputs, dict(layout.dims))
    out: Arrays = {}
    for name, shape, dtype in layout.outputs:
        if name not in expected:
            raise WorkerError("bad_task", f"reference.py returned no output {name!r}")
        exp = np.asarray(expected[name])
        if exp.shape != shape:
            raise WorkerError("bad_task", f"reference.py returned {name!r} with shape {list(exp.shape)}, "
                              f"expected {list(shape)}")
        out[name] = _stored(exp, dtype)
    return out


@dataclass
class Supply:
    """Supply sets of one layout and seed, made on demand and kept for the run."""
    seed: int
    sets: list[Arrays] = field(default_factory=list)


@functools.cache
def _drawing() -> str:
    """The identity of how inputs are drawn (inputs.py's own text): a change to it makes every cached reference
    a stranger, even when nobody remembered to change WORKER_VERSION."""
    return hashlib.sha256(Path(__file__).with_name("inputs.py").read_bytes()).hexdigest()[:16]


class Pool:
    """The worker's sets for the run. `reference_s` and `draw_s` count the time spent making them since the
    last `take_times`, so that a reply can say what the run, not the candidate, paid for."""

    def __init__(self, cache_dir: str | None = None, memory_bytes: int = DEFAULT_MEMORY_BYTES,
                 disk_bytes: int = DEFAULT_DISK_BYTES) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.memory_bytes = memory_bytes
        self.disk_bytes = disk_bytes
        self._refs: OrderedDict[tuple[str, str, int], ReferenceSet] = OrderedDict()
        self._supplies: dict[tuple[str, int], Supply] = {}
        self.reference_s = 0.0
        self.draw_s = 0.0
        self._lock = threading.Lock()  # guards `computed` and `_disk_total` (sets are made on threads)
        # Bytes on disk as last counted plus what this worker wrote since; None until the first save. The
        # folder is counted (every file stat'ed) only then and when the budget is passed, not at every save:
        # a user's cache of thousands of sets made each save cost 0.2 s.
        self._disk_total: int | None = None
        self.computed = 0  # references computed (not found in memory or on disk), for tests and reports

    def take_times(self) -> dict[str, float]:
        times = {"reference_s": self.reference_s, "draw_s": self.draw_s}
        self.reference_s = self.draw_s = 0.0
        return times

    # -- reference sets -----------------------------------------------------------------------------
    def references(self, task: Any, layout: Layout, fingerprint: str, seeds: list[int]) -> list[ReferenceSet]:
        """Several reference sets; those not yet made are made side by side (`prepare`: the run's own work)."""
        missing = [int(s) for s in dict.fromkeys(seeds) if (fingerprint, layout.key(), int(s)) not in self._refs]
        if len(missing) > 1:
            t0 = time.perf_counter()
            made = _parallel(lambda s: self._make(task, layout, (fingerprint, layout.key(), s)), missing,
                             REFERENCE_THREADS)
            wall = time.perf_counter() - t0
            # The wall time, shared between drawing and the reference as the threads spent it.
            drawn, computed = sum(m[2] for m in made), sum(m[3] for m in made)
            self.draw_s += wall * drawn / max(drawn + computed, 1e-9)
            self.reference_s += wall * computed / max(drawn + computed, 1e-9)
            for seed, (inputs, expected, _, _) in zip(missing, made, strict=True):
                self._keep((fingerprint, layout.key(), seed), ReferenceSet(seed, inputs, expected))
        return [self.reference(task, layout, fingerprint, s) for s in seeds]

    def reference(self, task: Any, layout: Layout, fingerprint: str, seed: int) -> ReferenceSet:
        key = (fingerprint, layout.key(), int(seed))
        ref = self._refs.get(key)
        if ref is not None:
            self._refs.move_to_end(key)
            return ref
        inputs, expected, drawn, computed = self._make(task, layout, key)
        self.draw_s += drawn
        self.reference_s += computed
        return self._keep(key, ReferenceSet(int(seed), inputs, expected))

    def _make(self, task: Any, layout: Layout, key: tuple[str, str, int]) -> tuple[Arrays, Arrays, float, float]:
        """One set's inputs and reference outputs (loaded from disk when cached), and the seconds each took.
        Touches no shared state but the disk cache, so sets can be made on several threads."""
        t0 = time.perf_counter()
        inputs = draw(task, layout, key[2])
        t1 = time.perf_counter()
        expected = self._load(key, layout)
        if expected is None:
            expected = reference_outputs(task, layout, inputs)
            with self._lock:
                self.computed += 1
            self._save(key, expected)
        return inputs, expected, t1 - t0, time.perf_counter() - t1

    def _keep(self, key: tuple[str, str, int], ref: ReferenceSet) -> ReferenceSet:
        self._refs[key] = ref
        total = sum(r.nbytes for r in self._refs.values())
        while total > self.memory_bytes and len(self._refs) > 1:
            _, old = self._refs.popitem(last=False)
            total -= old.nbytes
        return ref

    def _path(self, key: tuple[str, str, int]) -> Path | None:
        if self.cache_dir is None:
            return None
        digest = hashlib.sha256(json.dumps([WORKER_VERSION, _drawing(), np.__version__, *key]).encode()
                                ).hexdigest()[:40]
        return self.cache_dir / f"{digest}.npz"

    def _load(self, key: tuple[str, str, int], layout: Layout) -> Arrays | None:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                out = {name: data[name] for name, _, _ in layout.outputs}
        except (OSError, KeyError, ValueError):
            return None  # a damaged entry is computed again (and replaced)
        if any(out[n].shape != s for n, s, _ in layout.outputs):
            return None
        os.utime(path)  # most recently used: removed last
        return out

    def _save(self, key: tuple[str, str, int], expected: Arrays) -> None:
        path = self._path(key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}.npz")
            with open(tmp, "wb") as f:
                np.savez(f, **expected)  # type: ignore[arg-type]  # numpy's stub takes the names as flags
            written = tmp.stat().st_size
            os.replace(tmp, path)
            with self._lock:
                if self._disk_total is None:
                    self._disk_total = self._counted()[1]
                else:
                    self._disk_total += written
                if self._disk_total > self.disk_bytes:
                    self._trim()
        except OSError:
            pass  # a cache that cannot be written only costs time later

    def _counted(self) -> tuple[list[tuple[float, int, Path]], int]:
        """The cache's files, oldest first, as (mtime, size, path), and their total size."""
        assert self.cache_dir is not None
        files = []
        for p in self.cache_dir.glob("*.npz"):
            try:
                st = p.stat()
            except OSError:
                continue  # removed by another worker meanwhile
            files.append((st.st_mtime, st.st_size, p))
        files.sort(key=lambda f: f[0])
        return files, sum(f[1] for f in files)

    def _trim(self) -> None:
        """Removes the oldest files until the cache holds at most 90% of its budget (other workers may share
        the folder, so it is counted afresh here), leaving room for many saves before the next count."""
        files, total = self._counted()
        keep = self.disk_bytes * 9 // 10
        for _, size, old in files:
            if total <= keep:
                break
            old.unlink(missing_ok=True)
            total -= size
        self._disk_total = total

    # -- supply sets --------------------------------------------------------------------------------
    def supply(self, task: Any, layout: Layout, seed: int, count: int, limit_bytes: int) -> list[Arrays]:
        """Up to `count` supply sets (fewer when `limit_bytes` of inputs would be exceeded, at least one)."""
        key = (layout.key(), int(seed))
        sup = self._supplies.get(key)
        if sup is None:
            sup = self._supplies[key] = Supply(int(seed))
        fits = max(1, limit_bytes // max(layout.input_bytes(), 1))
        want = max(1, min(count, fits))
        t0 = time.perf_counter()
        if len(sup.sets) < want:
            # Each set has a seed of its own, so drawing them side by side gives the same sets in the same
            # order; numpy's generators and casts release the GIL on large arrays.
            seeds = [_mix(sup.seed, i) for i in range(len(sup.sets), want)]
            sup.sets += _parallel(lambda s: draw(task, layout, s), seeds, DRAW_THREADS)
        self.draw_s += time.perf_counter() - t0
        return sup.sets[:want]

    def drop_supply(self, layout: Layout, seed: int) -> None:
        """Forgets a supply whose sets a candidate may have changed (they are drawn again when needed)."""
        self._supplies.pop((layout.key(), int(seed)), None)


# Threads drawing supply sets and computing references at once: numpy releases the GIL in its bulk work, and
# a reference's float64 temporaries bound how many are held at once.
DRAW_THREADS = min(8, os.cpu_count() or 1)
REFERENCE_THREADS = min(4, os.cpu_count() or 1)


def _parallel(fn: Any, items: list[Any], threads: int) -> list[Any]:
    """`[fn(x) for x in items]`, on up to `threads` threads, results in order (the first error raised)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as ex:
        return list(ex.map(fn, items))


def _mix(seed: int, i: int) -> int:
    """The seed of supply set `i`: a splitmix64 step, so neighbouring sets share no stream."""
    z = (seed + 0x9E3779B97F4A7C15 * (i + 1)) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) >> 1
