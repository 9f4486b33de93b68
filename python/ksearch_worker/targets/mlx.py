"""MLX targets: a plan's launches become `mx.fast.metal_kernel` / `mx.fast.cuda_kernel` calls.

MLX compiles a custom kernel when it is first evaluated, so `compile` only records the sources and a
compiler error surfaces on the first check, where it is reported as `compile_error`. Timing follows MLX's
rules: inputs materialised first, JIT warm-up, `mx.eval` plus `mx.synchronize` around the measured work,
and several launches per evaluation when a launch takes microseconds.
"""

from __future__ import annotations

import math
import platform
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import cluster, header_file
from ..check import compare
from ..errors import WorkerError
from ..inputs import make_inputs

# MLX is imported lazily: a worker for another target must not need it.
mx: Any = None


def _mlx() -> Any:
    global mx
    if mx is None:
        try:
            import mlx.core as mlx_core
        except ImportError as exc:
            raise WorkerError("bad_request", f"the MLX targets need the `mlx` package: {exc}") from None
        mx = mlx_core
    return mx


def _mx_dtype(name: str) -> Any:
    m = _mlx()
    table = {"float16": m.float16, "bfloat16": m.bfloat16, "float32": m.float32, "int32": m.int32,
             "int64": m.int64, "uint32": m.uint32, "int8": m.int8, "uint8": m.uint8, "int16": m.int16,
             "bool": m.bool_}
    if name not in table:
        raise WorkerError("unsupported_dtype", f"dtype {name} is not supported by the MLX targets")
    return table[name]


@dataclass
class _Build:
    files: dict[str, str]
    kernels: dict[str, dict[str, Any]]  # name -> {source, header}
    objects: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    # Cluster kernels whose declaration was compared with the signature MLX generates.
    verified: set[tuple[Any, ...]] = field(default_factory=set)


class MlxTarget:
    def __init__(self, name: str) -> None:
        self.name = name  # "mlx-metal" or "mlx-cuda"
        self._builds: dict[str, _Build] = {}
        self._scalars: dict[int, Any] = {}
        self._timed_sets: list[dict[str, Any]] | None = None

    # -- hello ------------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        m = _mlx()
        info: dict[str, Any] = {"kind": "gpu", "target": self.name, "mlx": m.__version__,
                                "system": platform.system(), "machine": platform.machine()}
        try:
            info.update({k: (v if isinstance(v, (int, float, str, bool)) else str(v))
                         for k, v in m.device_info(m.gpu).items()})
        except Exception as exc:  # a CPU-only MLX has no GPU device
            info["device_info_error"] = str(exc)
        info["backend_available"] = self._available()
        if self.name == "mlx-cuda":
            info.update(_nvidia_smi())
        if info["backend_available"]:
            info["peak_bandwidth_gbs"] = round(self._bandwidth(), 1)
            info["peak_gflops"] = round(self._matmul_rate(), 1)
        return {"hardware": info, "compiler": {"name": "MLX JIT", "version": m.__version__, "flags": []}}

    def _available(self) -> bool:
        m = _mlx()
        if self.name == "mlx-metal":
            return bool(getattr(m, "metal", None) and m.metal.is_available())
        return bool(getattr(m, "cuda", None) and m.cuda.is_available())

    def _bandwidth(self) -> float:
        """Device copy of 1 GiB, bytes read plus written, best of a few."""
        m = _mlx()
        x = m.random.uniform(shape=(256 << 20,), dtype=m.float32)
        m.eval(x)
        best = math.inf
        for _ in range(6):
            m.synchronize()
            t0 = time.perf_counter()
            y = x + 1.0
            m.eval(y)
            m.synchronize()
            best = min(best, time.perf_counter() - t0)
        return 2 * x.nbytes / best / 1e9

    def _matmul_rate(self) -> float:
        m = _mlx()
        n = 8192
        a = m.random.normal(shape=(n, n)).astype(m.bfloat16)
        b = m.random.normal(shape=(n, n)).astype(m.bfloat16)
        m.eval(a, b)
        best = math.inf
        for _ in range(4):
            m.synchronize()
            t0 = time.perf_counter()
            m.eval(a @ b)
            m.synchronize()
            best = min(best, time.perf_counter() - t0)
        return 2 * n**3 / best / 1e9

    def cache_bytes(self) -> int:
        return 64 << 20  # about an H200's L2 (60 MB); Apple's SLC is of the same order

    # -- compile ----------------------------------------------------------------------------------
    def compile(self, key: str, dir: str, sources: Sequence[str], include: str | None) -> dict[str, Any]:
        raise WorkerError("bad_request", "MLX targets compile through `compile_mlx`")

    def compile_mlx(self, key: str, kernels: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Records the kernel bodies; MLX compiles them at their first launch."""
        start = time.perf_counter()
        k = {str(x["name"]): {"source": str(x["source"]), "header": str(x.get("header") or ""),
                              "header_name": str(x.get("header_name") or "header")} for x in kernels}
        self._builds[key] = _Build(files={}, kernels=k)
        return {"status": "compiled", "log": "recorded; MLX compiles each kernel at its first launch",
                "seconds": time.perf_counter() - start, "command": f"mx.fast.{self._api()}", "compiler": "MLX JIT"}

    def compiled(self, key: str) -> bool:
        return key in self._builds

    def _api(self) -> str:
        return "metal_kernel" if self.name == "mlx-metal" else "cuda_kernel"

    # -- launching --------------------------------------------------------------------------------
    def _kernel(self, key: str, launch: Mapping[str, Any], ins: Sequence[Any] = (), out_dtypes: Sequence[Any] = (),
                template: Sequence[tuple[str, Any]] = ()) -> tuple[Any, tuple[Any, ...], tuple[str, list[str]] | None]:
        """The MLX kernel object of one launch, its cache key (MLX keys its compiled code by name and
        source), and for a launch in clusters the function and parameters it declared. Such a launch gets its
        function declared with `__cluster_dims__` at the end of its header (cluster.py): the declaration names
        the generated function, so it depends on the template arguments and the dtypes (`ins`,
        `out_dtypes`, `template`: those of this call)."""
        m = _mlx()
        build = self._builds[key]
        name = launch["kernel"]
        spec = build.kernels[name]
        inputs = tuple(launch["inputs"]) + tuple(launch.get("scalar_names") or [])
        outputs = tuple(launch["outputs"])
        mlx_name = f"{name}_{key[:10]}"
        # On CUDA the header is a file MLX's source includes (set by _evaluate; header_file.py): MLX hashes the
        # source at every call.
        header = spec.get("included", spec["header"]) if self.name == "mlx-cuda" else spec["header"]
        sig: tuple[Any, ...] = (name, inputs, outputs, launch.get("shared_memory") or 0, bool(launch.get("atomic_outputs")))
        declared = None
        if launch.get("cluster"):
            decl_ins, decl_outs = [(n, a.dtype, a.ndim) for n, a in zip(inputs, ins)], list(zip(outputs, out_dtypes))
            header += cluster.declaration(mlx_name, spec["source"], decl_ins, decl_outs, template, launch["cluster"])
            sig += (header,)
            declared = (cluster.kernel_name(mlx_name, template), cluster.parameters(spec["source"], decl_ins, decl_outs))
        if sig not in build.objects:
            if self.name == "mlx-metal":
                build.objects[sig] = m.fast.metal_kernel(
                    name=mlx_name, input_names=list(inputs), output_names=list(outputs), source=spec["source"],
                    header=header, ensure_row_contiguous=True, atomic_outputs=bool(launch.get("atomic_outputs")))
            else:
                build.objects[sig] = m.fast.cuda_kernel(
                    name=mlx_name, input_names=list(inputs), output_names=list(outputs), source=spec["source"],
                    header=header, ensure_row_contiguous=True, shared_memory=int(launch.get("shared_memory") or 0))
        return build.objects[sig], sig, declared

    def _first_cluster_call(self, kernel: Any, kwargs: dict[str, Any], function: str, declared: list[str]) -> Any:
        """A cluster kernel's first call, made verbose so that the source MLX generates can be compared with
        the declaration that carries the cluster dims: a mismatch would lose them without a word."""
        outs, text = cluster.stdout_of(lambda: kernel(**kwargs, verbose=True))
        generated = cluster.generated_parameters(text, function)
        if generated != declared:
            raise RuntimeError(
                f"thread-block clusters: MLX {_mlx().__version__} generated `{function}` with parameters "
                f"{generated}, ksearch declared {declared} (python/ksearch_worker/cluster.py follows MLX's "
                "custom_kernel.cpp); without an exact match the kernel would not be launched in clusters")
        return outs

    def launch_all(self, key: str, launches: Sequence[Mapping[str, Any]], arrays: dict[str, Any],
                   shapes: Mapping[str, Sequence[int]], dtypes: Mapping[str, str], poison: bool = True) -> dict[str, Any]:
        """Runs every launch lazily; returns the named arrays (inputs, buffers and outputs).

        `poison` fills outputs with NaN first (checks); timed runs skip it, since MLX does the fill with a
        kernel of its own that would be charged to the candidate."""
        m = _mlx()
        env = dict(arrays)
        for launch in launches:
            ins = [env[n] for n in launch["inputs"]] + [self._scalar(int(s)) for s in launch.get("scalars") or []]
            template: list[tuple[str, Any]] = [(k, int(v)) for k, v in (launch.get("template") or {}).items()]
            template += [(k, _mx_dtype(str(d))) for k, d in (launch.get("type_args") or {}).items()]
            out_dtypes = [_mx_dtype(dtypes[n]) for n in launch["outputs"]]
            if launch.get("cluster") and (why := cluster.refusal()):
                raise _KernelFailure(why, status="invalid")
            kernel, sig, declared = self._kernel(key, launch, ins, out_dtypes, template)
            init = launch.get("init_value")
            kwargs = dict(
                inputs=ins,
                output_shapes=[tuple(shapes[n]) for n in launch["outputs"]],
                output_dtypes=out_dtypes,
                grid=tuple(int(g) for g in launch["grid"]),
                threadgroup=tuple(int(t) for t in launch["threadgroup"]),
                template=template or None,
                # NaN poison unless the plan asks for a start value (e.g. 0 for atomic accumulation).
                init_value=float(init) if init is not None else (float("nan") if poison else None),
                stream=m.gpu,
            )
            build = self._builds[key]
            if declared is not None and sig not in build.verified:
                outs = self._first_cluster_call(kernel, kwargs, *declared)
                build.verified.add(sig)
            else:
                outs = kernel(**kwargs)
            env.update(zip(launch["outputs"], outs, strict=True))
        return env

    def _scalar(self, v: int) -> Any:
        """A plan scalar as a materialised int32 array, made once per value: a Python int would become
        a fresh array (an allocation and a host-to-device copy) at every launch, a cost that can exceed
        a microsecond kernel's own time and that no baseline pays."""
        m = _mlx()
        a = self._scalars.get(v)
        if a is None:
            a = m.array(v, dtype=m.int32)
            m.eval(a)
            self._scalars[v] = a
        return a

    # -- run --------------------------------------------------------------------------------------
    def metal_sources(self, r: Any, dtypes: Mapping[str, str]) -> list[str]:
        """The Metal source MLX generates for every launch, without a Metal device.

        Tracing the launches inside `mx.export_function` builds each kernel's full source (signature,
        template instantiation) and `verbose=True` prints it, on the C++ side's stdout (`cluster.stdout_of`).
        """
        import os
        import tempfile

        m = _mlx()
        names = list(r.shapes)
        inputs = [n for n in names if n in {i for launch in r.launches for i in launch["inputs"]}]

        def traced(*xs: Any) -> Any:
            env = dict(zip(inputs, xs, strict=True))
            outs: list[Any] = []
            for launch in r.launches:
                kernel, _, _ = self._kernel(r.key, launch)
                ins = [env[n] for n in launch["inputs"]] + [self._scalar(int(s)) for s in launch.get("scalars") or []]
                template = [(k, int(v)) for k, v in (launch.get("template") or {}).items()]
                template += [(k, _mx_dtype(str(d))) for k, d in (launch.get("type_args") or {}).items()]
                res = kernel(inputs=ins, output_shapes=[tuple(r.shapes[n]) for n in launch["outputs"]],
                             output_dtypes=[_mx_dtype(dtypes[n]) for n in launch["outputs"]],
                             grid=tuple(int(g) for g in launch["grid"]),
                             threadgroup=tuple(int(t) for t in launch["threadgroup"]),
                             template=template or None, init_value=launch.get("init_value"), verbose=True)
                env.update(zip(launch["outputs"], res, strict=True))
                outs += res
            return outs

        args = [m.zeros(tuple(r.shapes[n]), dtype=_mx_dtype(dtypes[n])) for n in inputs]
        with tempfile.TemporaryDirectory(prefix="ksearch-metal-") as tmp:
            _, text = cluster.stdout_of(lambda: m.export_function(os.path.join(tmp, "f.mlxfn"), traced, *args))
        return [part.split("```")[0].strip() for part in text.split("```\n")[1::2]] or [text]

    def evaluate(self, r: Any, task: Any) -> dict[str, Any]:
        """Checks every seed on fresh inputs, then times the candidate next to the baselines. A run that let a
        launch in thread-block clusters run asks for a fresh worker afterwards: under MLX's CUDA graphs the
        cluster shape reaches later kernels of the process (cluster.py), which must not be blamed for it."""
        result = self._evaluate(r, task)
        if self.name == "mlx-cuda" and isinstance(result.get("message"), str):
            # A header handed over as a file (header_file.py) is named by its path in compiler messages.
            for spec in self._builds[r.key].kernels.values():
                result["message"] = header_file.plain_path(result["message"], spec["header"], spec["header_name"])
        if any(launch.get("cluster") for launch in r.launches) and cluster.refusal() is None:
            result["restart_worker"] = True
        return result

    def _evaluate(self, r: Any, task: Any) -> dict[str, Any]:
        m = _mlx()
        if self.name == "mlx-metal" and not self._available():
            dtypes = dict(r.mx_dtypes)
            try:
                sources = self.metal_sources(r, dtypes)
            except Exception as exc:
                return {"status": "error", "message": f"generating the Metal source failed: {exc}", "checks": [],
                        "timing": None, "baselines": {}}
            return {"status": "unavailable", "checks": [], "timing": None, "baselines": {}, "metal_sources": sources,
                    "message": "Metal is not available on this machine, so nothing ran; checked instead: MLX "
                               "generated the Metal source of every launch (signature and template instantiation), "
                               "returned in metal_sources"}
        if not self._available():
            raise WorkerError("backend_unavailable", f"{self.name}: this machine's MLX has no "
                              f"{'Metal' if self.name == 'mlx-metal' else 'CUDA'} back-end")
        dtypes = {n: str(d) if not isinstance(d, str) else d for n, d in r.mx_dtypes.items()}
        if self.name == "mlx-cuda":
            # Each header as a file, written again if something removed it since the last workload (MLX
            # compiles at a workload's first call).
            for spec in self._builds[r.key].kernels.values():
                spec["included"] = header_file.by_include(spec["header"])
        checks: list[dict[str, Any]] = []
        try:
            pristine_mx: dict[str, Any] = {}
            for i, seed in enumerate(r.seeds):
                check, problems, mx_inputs = self._check_seed(r, task, seed, dtypes, twice=i == 0)
                checks.append(check)
                if problems:
                    return {"status": "wrong", "message": "; ".join(problems), "checks": checks, "timing": None,
                            "baselines": {}}
                pristine_mx = mx_inputs
            if not r.timing.enabled:
                return {"status": "passed", "message": f"passed {len(r.seeds)} seeds", "checks": checks,
                        "timing": None, "baselines": {}}
            try:
                timing, baselines, timed_sets = self._time(r, task, pristine_mx, dtypes)
            except (WorkerError, _KernelFailure):
                raise
            except Exception as exc:  # the candidate failed while being timed
                raise _KernelFailure(str(exc)) from None
            # Fresh inputs written into every input set timing used (or, where MLX cannot write them in
            # place, fresh arrays made after the timed ones are freed, so that its allocator hands their
            # buffers out again): caches keyed by address, stale outputs and kernels that stop working
            # after a number of calls or a span of time all fail here.
            pristine_mx = mx_inputs = {}
            recheck = (r.seeds[-1] * 6364136223846793005 + 1442695040888963407) % (1 << 63)
            self._timed_sets = timed_sets  # _check_seed takes the only reference (see there)
            del timed_sets
            check, problems, _ = self._check_seed(r, task, recheck, dtypes, into_timed=True)
            check["after_timing"] = True
            checks.append(check)
            if problems:
                where = "in the timed buffers" if check["in_place"] else "in fresh buffers"
                return {"status": "wrong", "message": f"after timing, on fresh inputs {where}: " + "; ".join(problems),
                        "checks": checks, "timing": timing, "baselines": baselines}
        except _KernelFailure as exc:
            return exc.result(checks)
        except WorkerError:
            raise
        except Exception as exc:
            # A launch error surfaces on the next device call, which may be a read of the outputs: the
            # candidate's failure all the same (and a sticky one restarts the worker).
            return _KernelFailure(str(exc)).result(checks)
        return {"status": "passed", "message": f"passed {len(r.seeds)} seeds", "checks": checks, "timing": timing,
                "baselines": baselines}

    def _launch_checked(self, r: Any, task: Any, mx_inputs: dict[str, Any], dtypes: Mapping[str, str]) -> dict[str, Any]:
        """One poisoned run of every launch, evaluated; the candidate's failures become _KernelFailure."""
        m = _mlx()
        try:
            env = self.launch_all(r.key, r.launches, mx_inputs, r.shapes, dtypes)
            m.eval([env[n] for n in task.outputs])
            m.synchronize()
        except _KernelFailure:
            raise  # already says what happened (a launch refused before it ran)
        except Exception as exc:
            text = str(exc)
            if any(n in text for n in _LAUNCH_REFUSED):
                sizes = ", ".join(f"{launch['kernel']}: threadgroup {math.prod(launch['threadgroup'])} threads, "
                                  f"grid {launch['grid']}, shared memory {launch.get('shared_memory') or 0} bytes"
                                  for launch in r.launches)
                text = (f"the device refused the launch configuration ({sizes}). Limits: at most 1024 threads per "
                        "threadgroup, fewer when registers per thread x threads exceed a multiprocessor's 65536 "
                        "registers (CUDA) or the pipeline's maxTotalThreadsPerThreadgroup (Metal); dynamic shared "
                        f"memory up to the device's per-block maximum; grid extents within the device's. MLX said: {text}")
                raise _KernelFailure(text, status="error") from None
            raise _KernelFailure(text) from None
        return env

    def _check_seed(self, r: Any, task: Any, seed: int, dtypes: Mapping[str, str], twice: bool = False,
                    into_timed: bool = False) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
        """Checks the candidate on the inputs of one seed against the reference: every output within
        tolerance and fully written, the inputs unchanged, and (with `twice`) a second run on the same
        inputs bit-identical to the first (races). With `into` (the input sets timing rotated through),
        the inputs are written into every one of them when MLX allows it, and the candidate is checked
        on each: a cache keyed by any address timing used is stale there."""
        m = _mlx()
        into, self._timed_sets = (self._timed_sets, None) if into_timed else (None, None)
        pristine, mx_inputs = self._inputs(r, task, seed, dtypes)
        targets = [mx_inputs]
        in_place = bool(into) and all(_refill(m, s, mx_inputs) for s in into or [])
        if in_place:
            assert into is not None
            targets = into
        elif into:
            # MLX would not let us write the timed arrays: free them first, then make fresh ones, which
            # its allocator places in the buffers just freed.
            into = None
            pristine, mx_inputs = self._inputs(r, task, seed, dtypes)
            targets = [mx_inputs]
        ref_inputs = {n: a.astype(np.float64) if a.dtype.kind == "f" else a.copy() for n, a in pristine.items()}
        expected = task.reference(ref_inputs, dict(r.dims))
        problems: list[str] = []
        outputs: dict[str, Any] = {}
        changed: list[str] = []
        for i, arrays in enumerate(targets):
            where = f" (timed input set {i})" if len(targets) > 1 else ""
            env = self._launch_checked(r, task, arrays, dtypes)
            got = {n: _host(m, env[n], dtypes[n]) for n in task.outputs}
            changed = [n for n in pristine if not _same_bits(_host(m, arrays[n], dtypes[n]), pristine[n])]
            problems += [f"input {n} modified by the kernel (inputs are read-only){where}" for n in changed]
            if twice and not changed:
                again = self._launch_checked(r, task, arrays, dtypes)
                for n in task.outputs:
                    if not _same_bits(_host(m, again[n], dtypes[n]), got[n]):
                        diff = int(np.sum(got[n].view(np.uint8) != _host(m, again[n], dtypes[n]).view(np.uint8)))
                        problems.append(f"output {n}: nondeterministic: two runs on the same inputs differ in {diff} "
                                        "bytes (a race between threads, or state kept between launches)")
            for name in task.outputs:
                atol, rtol = task.tolerances[dtypes[name]]
                result = compare(name, got[name], np.asarray(expected[name]), atol, rtol, any_nan_is_poison=True)
                outputs[name] = result.to_json()
                if result.problem:
                    problems.append(result.problem + where)
            if problems:
                break
        check = {"seed": seed, "passed": not problems, "outputs": outputs, "inputs_modified": changed,
                 "overruns": []}
        if into_timed:
            check["in_place"] = in_place
            check["input_sets"] = len(targets)
        return check, problems, mx_inputs

    def _inputs(self, r: Any, task: Any, seed: int, dtypes: Mapping[str, str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Fresh inputs; bfloat16 ones are drawn in float32 and rounded by MLX, and the reference sees
        exactly the rounded values."""
        m = _mlx()
        np_dtypes = {n: np.dtype("float32") if d == "bfloat16" else np.dtype(d) for n, d in dtypes.items()}
        raw = make_inputs(task.inputs, r.shapes, np_dtypes, r.dims, np.random.default_rng(seed), task.make_inputs)
        mx_in: dict[str, Any] = {}
        pristine: dict[str, np.ndarray] = {}
        for n, a in raw.items():
            x = m.array(a)
            if dtypes[n] == "bfloat16":
                x = x.astype(m.bfloat16)
                pristine[n] = np.array(x.astype(m.float32))
            else:
                pristine[n] = a
            mx_in[n] = x
        m.eval(list(mx_in.values()))
        return pristine, mx_in

    def _time(self, r: Any, task: Any, inputs: dict[str, Any],
              dtypes: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
        """Timing of the candidate and the baselines; also returns the input sets timing rotated through."""
        from ..timing import PROBE_EIGHT_UNDER_S, measure, shared_calls_per_eval

        m = _mlx()
        nbytes = sum(int(a.nbytes) for a in inputs.values())
        copies = max(1, min(8, math.ceil(2 * self.cache_bytes() / max(nbytes, 1)))) if nbytes < 2 * self.cache_bytes() else 1
        sets = [inputs] + [{n: m.array(a) + 0 if a.dtype != m.bool_ else m.array(a) for n, a in inputs.items()}
                           for _ in range(copies - 1)]
        for s in sets:
            m.eval(list(s.values()))

        def candidate(s: dict[str, Any]) -> list[Any]:
            env = self.launch_all(r.key, r.launches, s, r.shapes, dtypes, poison=False)
            return [env[n] for n in task.outputs]

        def baseline(fn: Any) -> Any:
            return lambda s: list(fn(dict(s), dict(r.dims)).values())

        runs = [candidate] + [baseline(task.baselines[n]) for n in r.baselines]
        names = ["candidate", *r.baselines]
        # Several calls per evaluation for short work: MLX's cost per evaluation (graph, launch, sync) is
        # tens of µs, which in a real program many operations share; one count for every short entry
        # (shared_calls_per_eval).
        probes: list[tuple[float, float]] = []  # (one call, eight calls) per entry
        for name, fn in zip(names, runs, strict=True):
            def once(k: int, fn: Any = fn) -> float:
                outs = [fn(sets[i % len(sets)]) for i in range(k)]
                t0 = time.perf_counter()
                m.eval(outs)
                m.synchronize()
                return time.perf_counter() - t0
            try:
                for _ in range(3):  # warm-up: a library's first calls on a shape may build plans (cuDNN)
                    once(1)
                one = min(once(1) for _ in range(3))
                eight = min(once(8) for _ in range(3)) if one < PROBE_EIGHT_UNDER_S else 8 * one
            except Exception as exc:
                if name == "candidate":
                    raise
                raise WorkerError("bad_task", f"baseline {name} raised: {exc}") from None
            probes.append((one, eight))
        per_eval = shared_calls_per_eval(probes)

        class Timed:
            """k calls of `fn`. `prepare` builds their lazy graph (Python work: our launch code for the
            candidate, the task's function for a baseline) before the clock starts; the clock sees MLX's
            dispatch, the device's work and one synchronisation."""

            def __init__(self, fn: Any, k: int) -> None:
                self.fn, self.k = fn, k
                self.next = 0  # the input set the next call takes: calls rotate through all of them

            def prepare(self) -> Any:
                outs = [self.fn(sets[(self.next + i) % len(sets)]) for i in range(self.k)]
                self.next = (self.next + self.k) % len(sets)

                def run() -> None:
                    m.eval(outs)
                    m.synchronize()
                    outs.clear()  # back to MLX's cache for the next run

                return run

            def __call__(self) -> None:
                self.prepare()()

        def timed(fn: Any, k: int) -> Any:
            return Timed(fn, k)

        stats = measure([[timed(fn, k)] for fn, k in zip(runs, per_eval, strict=True)], r.timing)
        for s, k, (one, eight) in zip(stats, per_eval, probes, strict=True):
            for key in ("median_s", "iqr_s", "min_s", "max_s"):
                s[key] /= k
            s.update(launches_per_eval=k, eval_of_1_s=one, eval_of_8_s=eight)
        # One more untimed call on the first set, so that the recheck, which starts there, meets a
        # cache keyed by address at its most recent entry whatever the rotation ended on.
        m.eval(candidate(sets[0]))
        m.synchronize()
        return stats[0], dict(zip(r.baselines, stats[1:], strict=True)), sets


class _KernelFailure(Exception):
    """The candidate failed to compile or to run; `result` is the reply's body. `status` is set when the
    cause is already known, else it is read from MLX's message."""

    def __init__(self, text: str, status: str | None = None) -> None:
        super().__init__(text)
        self.status = status

    def result(self, checks: list[dict[str, Any]]) -> dict[str, Any]:
        text = str(self)
        out: dict[str, Any] = {"message": text[-8000:], "checks": checks, "timing": None, "baselines": {}}
        if self.status is not None:
            out["status"] = self.status
        elif _breaks_the_context(text):
            # A sticky CUDA error leaves this process's device context unusable: report the crash and
            # have the Rust side start a fresh worker, so the next candidate is not blamed.
            out.update(status="crash", restart_worker=True)
        elif _looks_like_compile_error(text):
            out["status"] = "compile_error"
        else:
            out["status"] = "error"
        return out


def _host(m: Any, a: Any, dtype: str) -> np.ndarray:
    """An array's current device contents on the host (bfloat16 widened exactly to float32)."""
    return np.array(a.astype(m.float32) if dtype == "bfloat16" else a)


def _refill(m: Any, target: dict[str, Any], fresh: dict[str, Any]) -> bool:
    """Writes `fresh`'s contents into the memory of `target`'s arrays, in place, and confirms on the
    device that the kernel will see them. False (nothing relied on) where MLX hands out copies."""
    try:
        for n, a in target.items():
            if a.shape != fresh[n].shape or a.dtype != fresh[n].dtype:
                return False
            # numpy has no bfloat16: those arrays are written as their 16-bit patterns.
            bits = a.dtype == m.bfloat16
            dst = a.view(m.uint16) if bits else a
            src = fresh[n].view(m.uint16) if bits else fresh[n]
            m.eval(dst, src)
            view = np.array(dst, copy=False)  # raises where a copy would be needed
            if not view.flags.writeable:
                return False
            view[...] = np.array(src)
        m.synchronize()
        # Compared on the default device (the GPU where there is one), which reads what a kernel would read.
        same = [m.all(m.equal(target[n], fresh[n])) for n in target]
        m.eval(same)
        return all(bool(x.item()) for x in same)
    except Exception:
        return False


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a.view(np.uint8), b.view(np.uint8)))


# What a launch configuration the device refuses (threadgroup, grid, shared memory) says, on each back-end.
_LAUNCH_REFUSED = ("too many resources requested for launch", "invalid configuration argument",
                          "maxTotalThreadsPerThreadgroup", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")


def _breaks_the_context(text: str) -> bool:
    needles = ("illegal memory access", "illegal address", "unspecified launch failure", "illegal instruction",
               "misaligned address", "device-side assert", "hardware stack error", "cudaErrorLaunchFailure",
               "an illegal", "unrecoverable", "CUDA_ERROR_ILLEGAL", "launch timed out")
    return any(n in text for n in needles)


def _looks_like_compile_error(text: str) -> bool:
    needles = ("error:", "nvrtc", "NVRTC", "compile", "Unable to build", "program_source")
    return any(n in text for n in needles)


def _nvidia_smi() -> dict[str, Any]:
    fields = "name,memory.total,driver_version,clocks.max.sm"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {}
    line = out.stdout.strip().splitlines()[:1]
    if not line:
        return {}
    parts = [p.strip() for p in line[0].split(",")]
    info: dict[str, Any] = dict(zip(["name", "memory_total", "driver", "max_sm_clock"], parts, strict=False))
    sms = _multiprocessors()
    if sms:
        info["sms"] = sms
    return info


def _multiprocessors() -> int | None:
    """The first GPU's multiprocessor count, from the driver API (nvidia-smi does not report it)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, value = ctypes.c_int(), ctypes.c_int()
        if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0):
            return None
        multiprocessor_count = 16  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        if cuda.cuDeviceGetAttribute(ctypes.byref(value), multiprocessor_count, dev):
            return None
        return int(value.value)
    except (OSError, AttributeError):
        return None
