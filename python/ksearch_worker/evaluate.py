"""The `run` op: check a compiled candidate on fresh inputs for every seed, then time it next to baselines."""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .arrays import ArraySet, fill_poison, np_dtype
from .check import compare, modified, overruns
from .errors import WorkerError
from .inputs import make_inputs
from .targets import Target
from .targets.cpu import KernelHostBroken, KernelHostDied, KernelHostRefused
from .task import Task, tail
from .timing import Batches, TimingConfig, copies_for, measure

Arrays = dict[str, np.ndarray]


@dataclass
class RunRequest:
    key: str
    dims: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, np.dtype]  # inputs, outputs and buffers (numpy targets)
    mx_dtypes: dict[str, str]  # the same by name, bfloat16 included (MLX targets)
    buffers: list[str]
    launches: list[dict[str, Any]]
    seeds: list[int]
    timing: TimingConfig
    baselines: list[str]


def _field(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str = "run") -> Any:
    value = obj.get(name)
    if not isinstance(value, kind):
        raise WorkerError("bad_request", f"{where}: field `{name}` missing or not a {getattr(kind, '__name__', kind)}")
    return value


def parse_request(req: Mapping[str, Any], task: Task, numpy_dtypes: bool = True) -> RunRequest:
    """Everything the Rust side must get right; a mistake here is `bad_request`, never the candidate's."""
    workload = _field(req, "workload", dict)
    dims = _field(workload, "dims", dict, "workload")
    shapes = {n: tuple(int(d) for d in s) for n, s in _field(workload, "shapes", dict, "workload").items()}
    names = {n: str(d) for n, d in _field(workload, "dtypes", dict, "workload").items()}
    buffers: list[str] = []
    for b in req.get("buffers") or []:
        shapes[b["name"]] = tuple(int(d) for d in b["shape"])
        names[b["name"]] = str(b["dtype"])
        buffers.append(b["name"])
    dtypes = {n: np_dtype(d) for n, d in names.items()} if numpy_dtypes else {}
    for name in [n for n, _ in task.inputs] + task.outputs:
        if name not in shapes or name not in names:
            raise WorkerError("bad_request", f"workload gives no shape or dtype for {name!r}")
    launches = _field(req, "launches", list)
    for launch in launches:
        for name in (*launch.get("inputs", []), *launch.get("outputs", [])):
            if name not in shapes:
                raise WorkerError("bad_request", f"launch of {launch.get('kernel')!r} names unknown array {name!r}")
        for s in launch.get("scalars") or []:
            if isinstance(s, bool) or not isinstance(s, (int, float)) or int(s) != s:
                raise WorkerError("bad_request", f"launch of {launch.get('kernel')!r}: scalar {s!r} is not an integer")
        launch["scalars"] = [int(s) for s in launch.get("scalars") or []]
    baselines = list(req.get("baselines") or [])
    for name in baselines:
        if name not in task.baselines:
            raise WorkerError("bad_request", f"baseline {name!r} is not available (loaded: {sorted(task.baselines)})")
    seeds = _field(req, "seeds", list)
    if not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise WorkerError("bad_request", "run: `seeds` must be a non-empty list of non-negative integers")
    return RunRequest(
        key=_field(req, "key", str), dims={k: int(v) for k, v in dims.items()}, shapes=shapes, dtypes=dtypes,
        mx_dtypes=names,
        buffers=buffers, launches=launches, seeds=seeds, timing=TimingConfig.from_json(req.get("timing")),
        baselines=baselines,
    )


def _arrays(r: RunRequest, task: Task, inputs: Arrays) -> ArraySet:
    """What one call of the candidate sees: copies of the inputs, poisoned outputs and buffers, in shared
    memory the kernel host maps (the CPU target runs kernels in that separate process)."""
    names = [*inputs, *task.outputs, *r.buffers]
    arrays = ArraySet([(n, r.shapes[n], r.dtypes[n]) for n in names])
    for name, a in inputs.items():
        np.copyto(arrays[name], a)
    for name in [*task.outputs, *r.buffers]:
        fill_poison(arrays[name])
    return arrays


def _differences(a: np.ndarray, b: np.ndarray) -> tuple[int, tuple[int, ...]]:
    """Elements whose bytes differ between two runs, and the first of them."""
    diff = a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1)
    bad = np.flatnonzero(diff.any(axis=1))
    first = tuple(int(i) for i in np.unravel_index(int(bad[0]), a.shape)) if bad.size else ()
    return int(bad.size), first


def check_seed(r: RunRequest, task: Task, target: Target, seed: int, twice: bool = False,
               into: ArraySet | None = None,
               expected: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[str], Arrays, Arrays]:
    """Runs the launches on fresh inputs; returns the check, its problems, the pristine inputs and copies
    of the outputs the kernel wrote.

    `twice` runs them a second time on separate copies of the same inputs: a correct CPU kernel is
    deterministic, so any difference is a race or state kept between calls. `into` writes the fresh
    inputs into existing arrays (the ones timing used, at the same addresses) instead of new ones.
    `expected`: the reference's outputs for this seed, when already computed."""
    pristine = make_inputs(task.inputs, r.shapes, r.dtypes, r.dims, np.random.default_rng(seed), task.make_inputs)
    if into is None:
        arrays = _arrays(r, task, pristine)
        call = target.bind(r.key, r.launches, arrays)
    else:
        arrays = into
        for n, a in pristine.items():
            np.copyto(arrays[n], a)
        for n in [*task.outputs, *r.buffers]:
            fill_poison(arrays[n])
        call = target.bind(r.key, r.launches, arrays)
    call()
    problems_first: list[str] = []
    if twice:
        again = _arrays(r, task, pristine)
        target.bind(r.key, r.launches, again)()
        for name in task.outputs:
            count, first = _differences(arrays[name], again[name])
            if count:
                problems_first.append(f"output {name}: nondeterministic: two runs on the same inputs differ in "
                                      f"{count} elements, first at {list(first)} (a race, or state kept between calls)")

    problems: list[str] = list(problems_first)
    over = overruns(arrays)
    role = {**{n: "buffer" for n in r.buffers}, **{n: "output" for n in task.outputs}, **{n: "input" for n in pristine}}
    problems += [f"{role[n]} {n}: written past its end" for n in over]
    changed = {n: msg for n in pristine if (msg := modified(n, arrays[n], pristine[n]))}
    problems += changed.values()

    # The reference sees float64 copies, out of the candidate's reach; integer and bool inputs keep their dtype.
    if expected is None:
        ref_inputs = {n: a.astype(np.float64) if a.dtype.kind == "f" else a.copy() for n, a in pristine.items()}
        expected = task.reference(ref_inputs, dict(r.dims))
    outputs: dict[str, Any] = {}
    for name in task.outputs:
        if name not in expected:
            raise WorkerError("bad_task", f"reference.py returned no output {name!r}")
        exp = np.asarray(expected[name])
        if exp.shape != r.shapes[name]:
            raise WorkerError("bad_task", f"reference.py returned {name!r} with shape {list(exp.shape)}, "
                              f"expected {list(r.shapes[name])}")
        dtype = str(r.dtypes[name])
        if dtype not in task.tolerances:
            raise WorkerError("bad_task", f"task.toml has no [tolerance.{dtype}] for output {name!r}")
        atol, rtol = task.tolerances[dtype]
        result = compare(name, arrays[name], exp, atol, rtol)
        outputs[name] = result.to_json()
        if result.problem:
            problems.append(result.problem)
    check = {"seed": seed, "passed": not problems, "outputs": outputs, "inputs_modified": list(changed),
             "overruns": over}
    return check, problems, pristine, {n: arrays[n].copy() for n in task.outputs}


IPC_FACTOR = 100  # a sample of the candidate lasts at least this many empty round trips to the kernel host


class TimedRunDiffers(Exception):
    """A timed batch left outputs other than the checked run's on the same inputs."""


class _Local:
    """Calls made in this process (the baselines), a sample's list built off the clock as timing.measure
    does, so that their figures stay comparable with it."""

    def __init__(self, calls: list[Callable[[], object]]) -> None:
        self.calls = calls
        self.ready: tuple[int, int, list[Callable[[], object]]] | None = None

    def _list(self, start: int, count: int) -> tuple[int, int, list[Callable[[], object]]]:
        return start, count, [self.calls[k % len(self.calls)] for k in range(start, start + count)]

    def prepare(self, start: int, count: int) -> None:
        """Before a sample: its list of calls, and as many calls off the clock on the copies before them
        (this process sat idle while the kernel host ran the candidate's sample, and a core that idled
        runs slower for a while after)."""
        self.ready = self._list(start, count)
        for k in range(start - count, start):
            self.calls[k % len(self.calls)]()

    def run(self, start: int, count: int) -> None:
        ready = self.ready if self.ready is not None and self.ready[:2] == (start, count) else self._list(start, count)
        self.ready = None
        for call in ready[2]:
            call()


def _time(r: RunRequest, task: Task, target: Target, inputs: Arrays,
          outputs: Arrays) -> tuple[dict[str, Any], dict[str, Any], ArraySet]:
    """Times the candidate next to the baselines on copies of `inputs`. Before every sample the outputs of
    the copies it uses are poisoned; after it they must hold `outputs` (the checked run's on these inputs)
    byte for byte, so a host that skips whole calls while timed is caught; one that skips repeated calls
    on a copy within a sample (outputs already right) is bounded only by the roofline check."""
    sample = _arrays(r, task, inputs)
    copies = copies_for(sum(a.nbytes for a in sample.values()), target.cache_bytes())
    sets = [sample] + [_arrays(r, task, inputs) for _ in range(copies - 1)]
    batch = target.batch(r.key, r.launches, sets)  # type: ignore[attr-defined]

    def touched(start: int, count: int) -> list[ArraySet]:
        return [sets[(start + i) % copies] for i in range(min(count, copies))]

    def poison(start: int, count: int) -> None:
        for arrays in touched(start, count):
            for name in task.outputs:
                fill_poison(arrays[name])

    def verify(start: int, count: int) -> None:
        for arrays in touched(start, count):
            for name in task.outputs:
                count_, first = _differences(arrays[name], outputs[name])
                if count_:
                    raise TimedRunDiffers(
                        f"output {name}: a timed run left {count_} elements other than the checked run on the "
                        f"same inputs, first at {list(first)} (work skipped while timed, or state kept between calls)")

    entries = [Batches(batch.run, copies, poison, verify, overhead_factor=IPC_FACTOR)]
    views = [{n: arrays[n] for n in inputs} for arrays in sets]
    for name in r.baselines:
        fn, dims = task.baselines[name], dict(r.dims)
        try:
            fn(views[0], dims)
        except Exception:
            raise WorkerError("bad_task", f"baseline {name} raised:\n{tail(traceback.format_exc())}") from None

        local = _Local([functools.partial(fn, v, dims) for v in views])
        entries.append(Batches(local.run, copies, local.prepare))
    stats = measure(entries, r.timing)
    return stats[0], dict(zip(r.baselines, stats[1:], strict=True)), sets


def run(req: Mapping[str, Any], task: Task | None, target: Target) -> dict[str, Any]:
    if task is None:
        raise WorkerError("bad_request", "run before load_task")
    own = getattr(target, "evaluate", None)  # MLX targets check and time on the device themselves
    r = parse_request(req, task, numpy_dtypes=own is None)
    if not target.compiled(r.key):
        raise WorkerError("not_compiled", f"key {r.key} has not been compiled by this worker")
    if own is not None:
        return own(r, task)
    checks: list[dict[str, Any]] = []
    try:
        pristine: Arrays = {}
        outputs: Arrays = {}
        for i, seed in enumerate(r.seeds):
            check, problems, pristine, outputs = check_seed(r, task, target, seed, twice=i == 0)
            checks.append(check)
            if problems:
                return {"status": "wrong", "message": "; ".join(problems), "checks": checks, "timing": None,
                        "baselines": {}}
        timing, baselines, timed = _time(r, task, target, pristine, outputs) if r.timing.enabled else (None, {}, None)
        # Fresh inputs in every set of buffers timing used: caches keyed by any of those addresses, stale
        # outputs and kernels that stop working after a number of calls all fail here.
        recheck_seed = (r.seeds[-1] * 6364136223846793005 + 1442695040888963407) % (1 << 63)
        expected = None  # one reference for every set: the same seed, the same inputs
        for i, arrays in enumerate(timed or []):
            if expected is None:
                fresh = make_inputs(task.inputs, r.shapes, r.dtypes, r.dims, np.random.default_rng(recheck_seed),
                                    task.make_inputs)
                expected = task.reference({n: a.astype(np.float64) if a.dtype.kind == "f" else a.copy()
                                           for n, a in fresh.items()}, dict(r.dims))
            check, problems, _, _ = check_seed(r, task, target, recheck_seed, into=arrays, expected=expected)
            check["after_timing"] = True
            check["input_set"] = i
            checks.append(check)
            if problems:
                where = f" (input set {i} of {len(timed or [])})" if timed and len(timed) > 1 else ""
                return {"status": "wrong", "message": f"after timing, on fresh inputs in the timed buffers{where}: "
                        + "; ".join(problems), "checks": checks, "timing": timing, "baselines": baselines}
    except WorkerError:
        raise
    except TimedRunDiffers as exc:
        return {"status": "wrong", "message": f"after timing: {exc}", "checks": checks, "timing": None,
                "baselines": {}}
    except KernelHostDied as exc:
        # The candidate crashed, trapped or exited in the kernel host; the next request gets a fresh host.
        return {"status": "crash", "message": str(exc), "checks": checks, "timing": None, "baselines": {}}
    except (KernelHostBroken, KernelHostRefused) as exc:
        return {"status": "error", "message": str(exc), "checks": checks, "timing": None, "baselines": {}}
    except Exception:
        # The candidate's, the reference's or our own failure; the worker itself keeps serving.
        return {"status": "error", "message": tail(traceback.format_exc()), "checks": checks, "timing": None,
                "baselines": {}}
    finally:
        release = getattr(target, "release", None)
        if release is not None:
            try:
                release()
            except (KernelHostDied, KernelHostBroken, KernelHostRefused):
                pass  # a host that fails here is gone; the next request starts a fresh one
    return {"status": "passed", "message": f"passed {len(r.seeds)} seeds", "checks": checks, "timing": timing,
            "baselines": baselines}
