"""The `run` op, one pipeline for every target: check a compiled candidate on reference sets, time it (beside
the incumbent it is compared with, on the same inputs), compare a sample of its timed calls after timing,
recheck it on fresh inputs where timing ran, and give the baselines' times (timed once per run, with no
candidate code alive, on inputs no candidate saw).

Targets supply sessions (`targets/__init__.py`): a compiled candidate bound to one workload, which runs
checks, makes timed entries and rechecks. What decides a verdict stays here: the reference comparison,
the sampled comparison of timed calls, the statuses.
"""

from __future__ import annotations

import contextlib
import random
import time
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .check import compare
from .errors import WorkerError
from .log import say
from .pool import Layout, Pool, ReferenceSet
from .targets import BaselineUnavailable, CandidateFailure, CheckRun, Target, TimedPlan, TimedRunWrong
from .task import Task, tail
from .timing import TimingConfig
from .timing import account as timing_account

Arrays = dict[str, np.ndarray]

# How long baselines' times are reused before they are timed again (the machine's state may drift).
BASELINE_MAX_AGE_S = 600.0
# The key of a target's baseline entry that could not run here (its value says why).
UNAVAILABLE = "unavailable"


@dataclass
class Build:
    """A compiled candidate as a run request names it: its key, launches and intermediate buffers."""
    key: str
    launches: list[dict[str, Any]]
    buffers: list[str]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]


@dataclass
class RunRequest:
    build: Build
    workload: str
    dims: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]  # inputs and outputs by dtype name (bfloat16 included)
    fingerprint: str  # the task's identity, for the reference cache
    checks: list[int]  # reference seeds; the first runs twice
    recheck: int
    timed_checks: list[int]
    supply: int
    order: int
    timing: TimingConfig
    baselines: list[str]
    incumbent: Build | None

    def layout(self, task: Task) -> Layout:
        return Layout.of(self.dims, self.shapes, self.dtypes, [n for n, _ in task.inputs], task.outputs)


@dataclass
class RunState:
    """What the worker keeps between `run` requests of one run: the input pool and the baselines' times."""
    pool: Pool = field(default_factory=Pool)
    baselines: dict[tuple[str, str], tuple[float, dict[str, Any]]] = field(default_factory=dict)


def _field(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str = "run") -> Any:
    value = obj.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise WorkerError("bad_request", f"{where}: field `{name}` missing or not a {getattr(kind, '__name__', kind)}")
    return value


def _seed(obj: Mapping[str, Any], name: str, where: str = "run.inputs") -> int:
    value = _field(obj, name, int, where)
    if value < 0:
        raise WorkerError("bad_request", f"{where}: `{name}` must be a non-negative integer")
    return value


def _baseline_names(req: Mapping[str, Any], task: Task) -> list[str]:
    """The baseline names a request asks for, each one the task has."""
    names = [str(n) for n in req.get("baselines") or []]
    for name in names:
        if name not in task.baselines:
            raise WorkerError("bad_request", f"baseline {name!r} is not available (loaded: {sorted(task.baselines)})")
    return names


def _build(obj: Mapping[str, Any], shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str],
           where: str) -> Build:
    shapes, dtypes = dict(shapes), dict(dtypes)
    buffers: list[str] = []
    for b in obj.get("buffers") or []:
        shapes[b["name"]] = tuple(int(d) for d in b["shape"])
        dtypes[b["name"]] = str(b["dtype"])
        buffers.append(b["name"])
    launches = _field(obj, "launches", list, where)
    for launch in launches:
        for name in (*launch.get("inputs", []), *launch.get("outputs", [])):
            if name not in shapes:
                raise WorkerError("bad_request", f"{where}: launch of {launch.get('kernel')!r} names unknown array {name!r}")
        for s in launch.get("scalars") or []:
            if isinstance(s, bool) or not isinstance(s, (int, float)) or int(s) != s:
                raise WorkerError("bad_request", f"{where}: launch of {launch.get('kernel')!r}: scalar {s!r} is not an integer")
        launch["scalars"] = [int(s) for s in launch.get("scalars") or []]
    return Build(_field(obj, "key", str, where), launches, buffers, shapes, dtypes)


def _workload(workload: Mapping[str, Any], task: Task, op: str
              ) -> tuple[dict[str, int], dict[str, tuple[int, ...]], dict[str, str]]:
    """A request's `workload`: its dims, and the shape and dtype of every array, each task input and output
    among them."""
    where = f"{op}.workload"
    dims = {k: int(v) for k, v in _field(workload, "dims", dict, where).items()}
    shapes = {n: tuple(int(d) for d in s) for n, s in _field(workload, "shapes", dict, where).items()}
    dtypes = {n: str(d) for n, d in _field(workload, "dtypes", dict, where).items()}
    for name in [n for n, _ in task.inputs] + task.outputs:
        if name not in shapes or name not in dtypes:
            raise WorkerError("bad_request", f"{op}: the workload gives no shape or dtype for {name!r}")
    return dims, shapes, dtypes


def parse_request(req: Mapping[str, Any], task: Task) -> RunRequest:
    """Everything the Rust side must get right; a mistake here is `bad_request`, never the candidate's."""
    workload = _field(req, "workload", dict)
    dims, shapes, dtypes = _workload(workload, task, "run")
    inputs = _field(req, "inputs", dict)
    checks = _field(inputs, "checks", list, "run.inputs")
    timed_checks = _field(inputs, "timed_checks", list, "run.inputs")
    for s in [*checks, *timed_checks]:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise WorkerError("bad_request", "run.inputs: `checks` and `timed_checks` must hold non-negative integers")
    if not checks:
        raise WorkerError("bad_request", "run.inputs: `checks` must name at least one seed")
    if len({*checks, *timed_checks, inputs.get("recheck")}) != len(checks) + len(timed_checks) + 1:
        raise WorkerError("bad_request", "run.inputs: check, timed-check and recheck seeds must all differ")
    baselines = _baseline_names(req, task)
    incumbent = req.get("incumbent")
    return RunRequest(
        build=_build(req, shapes, dtypes, "run"), workload=str(workload.get("name", "")), dims=dims,
        shapes=shapes, dtypes=dtypes, fingerprint=_field(inputs, "pool", str, "run.inputs"),
        checks=list(checks), recheck=_seed(inputs, "recheck"), timed_checks=list(timed_checks),
        supply=_seed(inputs, "supply"), order=_seed(inputs, "order"),
        timing=TimingConfig.from_json(req.get("timing")), baselines=baselines,
        incumbent=_build(incumbent, shapes, dtypes, "run.incumbent") if isinstance(incumbent, dict) else None,
    )


def judge(task: Task, layout: Layout, ref: ReferenceSet, run: CheckRun, any_nan_is_poison: bool,
          where: str = "") -> tuple[dict[str, Any], list[str]]:
    """The check record and its problems: the target's own findings, then every output against the reference."""
    problems = [p + where for p in run.problems]
    outputs: dict[str, Any] = {}
    for name, _, dtype in layout.outputs:
        if dtype not in task.tolerances:
            raise WorkerError("bad_task", f"task.toml has no [tolerance.{dtype}] for output {name!r}")
        atol, rtol = task.tolerances[dtype]
        result = compare(name, run.outputs[name], ref.expected[name], atol, rtol, any_nan_is_poison=any_nan_is_poison)
        outputs[name] = result.to_json()
        if result.problem:
            problems.append(result.problem + where)
    check = {"seed": ref.seed, "passed": not problems, "outputs": outputs, "inputs_modified": run.inputs_modified,
             "overruns": run.overruns}
    return check, problems


# The sets the warm-up goes through before the plan grows for sampling: 64, or fewer where they would pass
# WARMUP_BYTES (a kernel on large inputs is slow, so its warm-up makes few calls; softmax's 64 sets of 4 MB
# cost 2.3 s to draw at each worker start).
WARMUP_SETS = 64
WARMUP_BYTES = 32 << 20


def _warmup_sets(state: RunState, task: Task, layout: Layout, seed: int, cfg: TimingConfig) -> list[Arrays]:
    """The supply sets of stream `seed` the warm-up goes through (drawn on first use, by `prepare`)."""
    return state.pool.supply(task, layout, seed, WARMUP_SETS, min(cfg.supply_bytes, WARMUP_BYTES))



def _plan(r: RunRequest, task: Task, state: RunState, layout: Layout) -> TimedPlan:
    """The input sets of the timed calls: supply sets for the warm-up, then (`extend`) enough for every
    sampled call within the supply's bytes, with the timed-check reference sets at positions drawn from the
    candidate's order seed among the sampled calls (so no position tells a checked call from another)."""
    cfg = r.timing
    refs = [state.pool.reference(task, layout, r.fingerprint, s) for s in r.timed_checks]
    supply = _warmup_sets(state, task, layout, r.supply, cfg)
    plan = TimedPlan(sets=list(supply), ids=[("supply", r.supply, i) for i in range(len(supply))], checked={})

    def extend(first: int, calls: int) -> int:
        got = state.pool.supply(task, layout, r.supply, max(first + calls, len(refs) + 1), cfg.supply_bytes)
        sets: list[Arrays] = list(got)
        ids: list[tuple[str, int, int]] = [("supply", r.supply, i) for i in range(len(sets))]
        total = len(sets)
        # The checked calls: at random among the calls sampling is expected to make (it goes on until it
        # has made the last of them). Where the sets last, each set is met once and a position is a call.
        rng = random.Random(r.order)
        calls_at = sorted(rng.sample(range(first, first + max(calls, len(refs))), len(refs)))
        positions = [c % total for c in calls_at]
        if len(set(positions)) < len(refs):
            # Fewer sets than checked calls: the checked sets join the supply.
            positions = list(range(total, total + len(refs)))
            sets += [ref.inputs for ref in refs]
            ids += [("reference", ref.seed, 0) for ref in refs]
            cycle = total + len(refs)
            calls_at = [first + (p - first) % cycle for p in positions]
        for p, ref in zip(positions, refs, strict=True):
            sets[p], ids[p] = ref.inputs, ("reference", ref.seed, 0)
        plan.sets, plan.ids = sets, ids
        plan.checked = dict(zip(positions, refs, strict=True))
        plan.checked_calls = set(calls_at)
        return max(calls_at) if calls_at else first

    plan.extend = extend
    return plan


@dataclass
class Verifier:
    """Compares a timed call's outputs (on the host) with the reference of the checked set it ran on; raises
    `TimedRunWrong` where they differ. `tolerances` (atol, rtol by output) let a target screen other calls
    on the device first."""
    task: Task
    layout: Layout
    plan: TimedPlan
    any_nan_is_poison: bool
    tally: dict[str, int]
    tolerances: dict[str, tuple[float, float]] = field(init=False)

    def __post_init__(self) -> None:
        self.tolerances = {name: self.task.tolerances[dtype] for name, _, dtype in self.layout.outputs}

    def __call__(self, index: int, outputs: Arrays, who: str) -> None:
        ref = self.plan.checked[index]
        self.tally[who] = self.tally.get(who, 0) + 1
        for name, _, _ in self.layout.outputs:
            atol, rtol = self.tolerances[name]
            result = compare(name, outputs[name], ref.expected[name], atol, rtol,
                             any_nan_is_poison=self.any_nan_is_poison)
            if result.problem:
                raise TimedRunWrong(f"{who}: a sampled timed call (input set {index} of {len(self.plan.sets)}) "
                                    f"differs from the reference: {result.problem}")


class Split:
    """Where a request's time went, by phase, each without the pool's work done inside it (drawing inputs,
    computing references: the run's cost, not the candidate's, reported apart). `kernel_s` is the part of the
    checks and samples that the clock saw running candidate calls."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.parts: dict[str, float] = {"kernel_s": 0.0}
        self.start = time.perf_counter()
        pool.take_times()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        before = self.pool.reference_s + self.pool.draw_s
        t0 = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - t0 - (self.pool.reference_s + self.pool.draw_s - before)
            self.parts[name] = self.parts.get(name, 0.0) + spent

    def report(self) -> dict[str, float]:
        out = {**self.parts, **self.pool.take_times()}
        out["total_s"] = time.perf_counter() - self.start
        # The evaluator's own cost: everything but running candidate code, references and inputs.
        out["overhead_s"] = max(out["total_s"] - out["kernel_s"] - out["reference_s"] - out["draw_s"]
                                - out.get("baselines_s", 0.0), 0.0)
        return out


def _phase(step: str, workload: str) -> None:
    """A phase line for the progress display (`src/progress.rs`)."""
    say(f"phase {step} {workload}")


def _wrong(message: str, checks: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"status": "wrong", "message": message, "checks": checks, "timing": None, "baselines": {}, **extra}


def run(req: Mapping[str, Any], task: Task | None, target: Target, state: RunState) -> dict[str, Any]:
    if task is None:
        raise WorkerError("bad_request", "run before load_task")
    r = parse_request(req, task)
    target.validate(r)
    for b in [r.build, *([r.incumbent] if r.incumbent else [])]:
        if not target.compiled(b.key):
            raise WorkerError("not_compiled", f"key {b.key} has not been compiled by this worker")
    layout = r.layout(task)
    early = target.unavailable(r, task)
    if early is not None:
        return early
    split = Split(state.pool)
    checks: list[dict[str, Any]] = []
    poison_nan = target.poisons_with_plain_nan
    try:
        result = _candidate(r, task, target, state, layout, checks, split, poison_nan)
    except CandidateFailure as exc:
        result = exc.result(checks)
    except TimedRunWrong as exc:
        result = _wrong(f"after timing: {exc}", checks)
    except WorkerError:
        raise
    except Exception:
        # The reference's or our own failure; the worker itself keeps serving.
        result = {"status": "error", "message": tail(traceback.format_exc()), "checks": checks, "timing": None,
                  "baselines": {}}
    result = target.finish(r, result)
    if result["status"] == "passed" and r.timing.enabled and r.baselines:
        # Timed by `prepare` (with no candidate alive, before this candidate ran): only their times here.
        result["baselines"] = {n: {**got[1], "cached": True} for n in r.baselines
                               if (got := state.baselines.get((layout.key(), n))) is not None
                               and UNAVAILABLE not in got[1]}
    result["split"] = split.report()
    return result


def _candidate(r: RunRequest, task: Task, target: Target, state: RunState, layout: Layout,
               checks: list[dict[str, Any]], split: Split, poison_nan: bool) -> dict[str, Any]:
    with split.phase("setup_s"):
        session = target.session(r.build, r, task)
    with session:
        _phase("checking", r.workload)
        with split.phase("checks_s"):
            for i, seed in enumerate(r.checks):
                ref = state.pool.reference(task, layout, r.fingerprint, seed)
                run_ = session.check(ref.inputs, twice=i == 0)
                split.parts["kernel_s"] += run_.seconds + run_.again_s
                check, problems = judge(task, layout, ref, run_, poison_nan)
                checks.append(check)
                if problems:
                    return _wrong("; ".join(problems), checks)
        if not r.timing.enabled:
            return {"status": "passed", "message": f"passed {len(r.checks)} seeds", "checks": checks, "timing": None,
                    "baselines": {}}
        _phase("timing", r.workload)
        with split.phase("timing_s"):
            plan = _plan(r, task, state, layout)
            tally: dict[str, int] = {}
            verify = Verifier(task, layout, plan, poison_nan, tally)
            incumbent = target.session(r.incumbent, r, task) if r.incumbent else None
            if incumbent is not None and not incumbent.ready():
                # The incumbent's own modules no longer compile here: it is not compared (never the candidate's
                # failure), as the Rust side does when its build fails.
                incumbent.close()
                incumbent = None
            try:
                sessions = [session, *([incumbent] if incumbent else [])]
                measurement = target.time(sessions, plan, verify, r.timing, paired=incumbent is not None)
            finally:
                if incumbent is not None:
                    incumbent.close()
            split.parts["kernel_s"] += measurement.sampled_s
            timing_account(measurement, r.workload)
        timing = measurement.stats[0]
        timing["sampled_checks"] = tally.get("candidate", 0)
        extra: dict[str, Any] = {}
        if incumbent is not None:
            extra["incumbent"] = {**measurement.stats[1], "sampled_checks": tally.get("incumbent", 0)}
            extra["verdict"] = measurement.verdict
        # Fresh inputs written where timing ran: caches keyed by address, stale outputs and kernels that stop
        # working after a number of calls or a span of time all fail here.
        _phase("rechecking", r.workload)
        with split.phase("recheck_s"):
            ref = state.pool.reference(task, layout, r.fingerprint, r.recheck)
            for i, run_ in enumerate(session.recheck(ref.inputs)):
                split.parts["kernel_s"] += run_.seconds
                where = f" (timed input set {run_.where})" if run_.where is not None else ""
                check, problems = judge(task, layout, ref, run_, poison_nan, where=where)
                check["after_timing"] = True
                check["input_set"] = run_.where if run_.where is not None else i
                checks.append(check)
                if problems:
                    return {**_wrong("after timing, on fresh inputs where timing ran: " + "; ".join(problems),
                                     checks), "timing": timing}
    return {"status": "passed", "message": f"passed {len(r.checks)} seeds", "checks": checks, "timing": timing,
            "baselines": {}, **extra}




def precompile(req: Mapping[str, Any], task: Task | None, target: Target) -> dict[str, Any]:
    """The `precompile` op: a build's modules for several workloads at once, before its first `run` (on
    targets that compile per launch; elsewhere nothing to do). `workloads` lists, for each, the `workload`,
    `launches` and `buffers` of its run request."""
    if task is None:
        raise WorkerError("bad_request", "precompile before load_task")
    key = _field(req, "key", str, "precompile")
    builds = []
    for item in _field(req, "workloads", list, "precompile"):
        if not isinstance(item, dict):
            raise WorkerError("bad_request", "precompile.workloads: each item must be an object")
        _, shapes, dtypes = _workload(_field(item, "workload", dict, "precompile"), task, "precompile")
        builds.append(_build({**item, "key": key}, shapes, dtypes, "precompile"))
    if not hasattr(target, "precompile"):
        return {"modules": 0, "compiled": 0}
    return target.precompile(key, builds)  # type: ignore[no-any-return]


def prepare(req: Mapping[str, Any], task: Task | None, target: Target, state: RunState) -> dict[str, Any]:
    """The `prepare` op: the run's own work for one workload, done before a candidate meets it and under a
    deadline of its own (a slow reference must not count against a candidate): every reference set of the
    pool computed or loaded, the timing supply drawn, the baselines timed (with no candidate code alive, on
    inputs of their own) unless their times are recent. Cheap once done, so it precedes every `run`."""
    if task is None:
        raise WorkerError("bad_request", "prepare before load_task")
    workload = _field(req, "workload", dict, "prepare")
    dims, shapes, dtypes = _workload(workload, task, "prepare")
    inputs = _field(req, "inputs", dict, "prepare")
    seeds = _field(inputs, "seeds", list, "prepare.inputs")
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds):
        raise WorkerError("bad_request", "prepare.inputs: `seeds` must hold non-negative integers")
    fingerprint = _field(inputs, "pool", str, "prepare.inputs")
    supply = _seed(inputs, "supply", "prepare.inputs")
    timing = TimingConfig.from_json(req.get("timing"))
    names = _baseline_names(req, task)
    layout = Layout.of(dims, shapes, dtypes, [n for n, _ in task.inputs], task.outputs)
    split = Split(state.pool)
    result: dict[str, Any] = {"baselines": {}, "baselines_timed_now": False, "baselines_unavailable": {}}
    if not target.runs_here():
        # Nothing will run (mlx-metal off a Mac): no reference, input or baseline is needed.
        result["split"] = split.report()
        return result
    try:
        state.pool.references(task, layout, fingerprint, [int(s) for s in seeds])
        with split.phase("warm_s"):
            try:
                target.warm(layout)
            except Exception as exc:
                # The worker's own kernels: a failure here is the device's state (an earlier candidate's
                # fault), never the task's.
                raise WorkerError("device_lost", f"the device cannot run the worker's own kernels: {exc}; "
                                  "a fresh worker is started") from None
        if timing.enabled:
            # Only the warm-up's sets: timing draws the rest when its samples need them (the same sets,
            # each has its seed); 256 MB drawn up front cost a CPU workload 0.45 s at every worker start.
            _warmup_sets(state, task, layout, supply, timing)
            if names:
                with split.phase("baselines_s"):
                    vouch = state.pool.reference(task, layout, fingerprint, min(int(s) for s in seeds)) \
                        if seeds else None
                    got, result["baselines_timed_now"] = _baselines(
                        task, target, state, layout, dims, supply, names, timing, bool(req.get("retime_baselines")),
                        vouch)
                    # A baseline whose library this machine lacks (FlashInfer) is named with why; the rest count.
                    result["baselines"] = {n: st for n, st in got.items() if UNAVAILABLE not in st}
                    result["baselines_unavailable"] = {n: str(st[UNAVAILABLE]) for n, st in got.items()
                                                       if UNAVAILABLE in st}
    except WorkerError:
        raise
    except Exception:
        raise WorkerError("bad_task", f"preparing workload {workload.get('name')!r} failed (the task's own code):\n"
                                      f"{tail(traceback.format_exc())}") from None
    result["split"] = split.report()
    return result


def _vouched(task: Task, target: Target, layout: Layout, dims: dict[str, int], fns: dict[str, Any],
             vouch: ReferenceSet | None) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The baselines that compute the task's outputs on a reference set (each output they give, within the
    task's tolerances), and the rest with why: a baseline computing something else (another layout, scale or
    mask) would be a time of another problem, and a score against it meaningless. Those that cannot run here
    (BaselineUnavailable) are named with why too."""
    if vouch is None:
        return fns, {}
    ok: dict[str, Any] = {}
    refused: dict[str, dict[str, Any]] = {}
    for name, fn in fns.items():
        try:
            got = target.baseline_outputs(fn, vouch.inputs, dict(dims), layout)
        except BaselineUnavailable as exc:
            refused[name] = {UNAVAILABLE: f"it cannot run here: {exc}"}
            continue
        except WorkerError as exc:
            raise WorkerError(exc.kind, f"baseline {name}: {exc.message}") from None
        problems = _differences(task, layout, got, vouch)
        if problems:
            refused[name] = {UNAVAILABLE: "its outputs differ from the task's reference on a checked input set, so "
                                          f"it times another computation: {'; '.join(problems)}"}
        else:
            ok[name] = fn
    return ok, refused


def _differences(task: Task, layout: Layout, got: Any, vouch: ReferenceSet) -> list[str]:
    """How a baseline's outputs differ from the reference: none of the task's outputs, another shape, values
    outside the tolerances (each output it gives is compared; one it leaves out is not its work)."""
    if not isinstance(got, Mapping) or not any(out in got for out, _, _ in layout.outputs):
        names = sorted(got) if isinstance(got, Mapping) else type(got).__name__
        return [f"it returned none of the task's outputs {[o for o, _, _ in layout.outputs]} (got {names})"]
    problems = []
    for out, shape, dtype in layout.outputs:
        if out not in got:
            continue
        try:
            value = np.asarray(got[out])
        except Exception as exc:  # a value that is no array
            problems.append(f"output {out}: {type(got[out]).__name__} is not an array ({exc})")
            continue
        if value.dtype.kind not in "biuf":
            problems.append(f"output {out} holds {value.dtype} values, not numbers")
            continue
        if tuple(value.shape) != tuple(shape):
            problems.append(f"output {out} has shape {list(value.shape)}, the task's is {list(shape)}")
            continue
        atol, rtol = task.tolerances[dtype]
        problem = compare(out, value, vouch.expected[out], atol, rtol).problem
        if problem:
            problems.append(problem)
    return problems


def _baselines(task: Task, target: Target, state: RunState, layout: Layout, dims: dict[str, int], supply: int,
               names: list[str], timing: TimingConfig, retime: bool,
               vouch: ReferenceSet | None) -> tuple[dict[str, Any], bool]:
    """The baselines' times: reused within a run unless older than BASELINE_MAX_AGE_S or asked to be timed
    again (beside the final best). Timed with no candidate code alive, on supply sets of their own, each once
    it has computed the task's outputs on a reference set (`vouch`)."""
    now = time.monotonic()
    cached = {n: state.baselines.get((layout.key(), n)) for n in names}
    if not retime and all(c is not None and now - c[0] < BASELINE_MAX_AGE_S for c in cached.values()):
        return {n: {**c[1], "cached": True} for n, c in cached.items() if c is not None}, False
    # The baselines' own inputs: another supply stream, never handed to a candidate.
    seed = (supply ^ 0x5A5A5A5A5A5A5A5A) & ((1 << 63) - 1)
    sets = state.pool.supply(task, layout, seed, target.baseline_sets(layout), timing.supply_bytes)
    fns, refused = _vouched(task, target, layout, dims, {n: task.baselines[n] for n in names}, vouch)
    timed = {**(target.time_baselines(fns, sets, dict(dims), layout, timing) if fns else {}), **refused}
    for n, st in timed.items():
        state.baselines[(layout.key(), n)] = (now, st)
    return {n: {**st, "cached": False} for n, st in timed.items()}, True
