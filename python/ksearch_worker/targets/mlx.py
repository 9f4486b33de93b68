"""MLX targets: a plan's launches become `mx.fast.metal_kernel` / `mx.fast.cuda_kernel` calls.

MLX compiles a custom kernel when it is first evaluated, so `compile` only records the sources and a
compiler error surfaces on the first check, where it is reported as `compile_error`. Timing follows MLX's
rules: inputs materialised first, JIT warm-up, `mx.eval` plus `mx.synchronize` around the measured work,
and several launches per evaluation when a launch takes microseconds.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import cluster, hardware, header_file, jail, nvrtc
from ..errors import WorkerError
from ..log import say
from ..timing import Batches, Measurement, TimingConfig, chain_length, measure, paired_verdict, stats
from . import RECHECK_SETS, CandidateFailure, CheckRun, TimedRunWrong, sets_beyond_cache

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
    # MLX names by (kernel, launch signature): hashing the source at every call cost more than the calls.
    names: dict[tuple[str, str], str] = field(default_factory=dict)


class MlxTarget:
    poisons_with_plain_nan = True

    def __init__(self, name: str) -> None:
        self.name = name  # "mlx-metal" or "mlx-cuda"
        self._builds: dict[str, _Build] = {}
        # Device copies of the run's input sets, by set id, kept between candidates (least recently used
        # dropped first), each with the fingerprint it had when uploaded.
        self._sets: OrderedDict[tuple[str, int, int], tuple[dict[str, Any], Any]] = OrderedDict()
        # Device copies (float32) of the reference outputs of checked sets, by (set id, output), kept between
        # candidates as the input sets are ({output: copy}, fingerprint); None where the screen does not apply.
        self._expected: OrderedDict[tuple[tuple[str, int, int], str], tuple[dict[str, Any], Any] | None] = \
            OrderedDict()
        # What this timing has found unchanged since upload (`_unchanged`): a kept set or copy is checked before
        # a timing first hands it out, so a change made earlier (by an earlier candidate's later calls) is
        # never blamed on this one; one found changed after the timing is the timing's doing.
        self._checked: set[Any] = set()
        self._poisoner: Any = None
        self._warmed: set[str] = set()  # workload layouts whose worker kernels `warm` compiled
        self._sets_limit: int | None = None  # bytes of device input sets kept (`_sets_bytes`)
        # mlx-cuda: candidates' modules are compiled in the jail into MLX's module cache (nvrtc.py), a folder
        # of this worker's own, set before MLX first reads the variable (at its first compile).
        self._compiler: nvrtc.Compiler | None = None
        self._failed: dict[str, str] = {}  # module -> NVRTC's log, for candidates that do not compile
        self._sources: dict[str, str] = {}  # module -> SHA-256 of its source: one source per name, ever
        self._left: set[str] = set()  # modules the jailed NVRTC failed on otherwise: MLX compiles them
        if name == "mlx-cuda":
            os.environ["MLX_PTX_CACHE_DIR"] = tempfile.mkdtemp(prefix="ksearch-mlx-modules-")

    # -- hello ------------------------------------------------------------------------------------
    def describe(self, remembered: dict[str, Any]) -> dict[str, Any]:
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
            info.update(hardware.nvidia_smi())
        if info["backend_available"]:
            known = hardware.remembered_peaks(str(info.get("name", "")), remembered)
            if known is not None:
                info.update(known)
            else:
                info["peak_bandwidth_gbs"] = round(self._bandwidth(), 1)
                info["peak_gflops"] = round(self._matmul_rate(), 1)
            info["peaks"] = "remembered" if known is not None else "measured"
            info["peak_scope"] = "whole device"
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

    def _sets_bytes(self) -> int:
        if self._sets_limit is None:
            memory = None
            try:
                info = _mlx().device_info(_mlx().gpu)
                memory = int(info.get("total_memory") or info.get("memory_size") or 0) or None
            except Exception:
                pass  # no GPU device here: the floor
            self._sets_limit = device_sets_bytes(memory)
        return self._sets_limit

    def cache_bytes(self) -> int:
        return 64 << 20  # about an H200's L2 (60 MB); Apple's SLC is of the same order

    # -- compile ----------------------------------------------------------------------------------
    def compile(self, key: str, dir: str, sources: Sequence[str], include: str | None) -> dict[str, Any]:
        raise WorkerError("bad_request", "MLX targets compile through `compile` with `kernels`")

    def compile_kernels(self, key: str, kernels: Sequence[Mapping[str, Any]],
                        files: Mapping[str, str] | None = None) -> dict[str, Any]:
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
        signature = repr((inputs, outputs, launch.get("shared_memory") or 0, bool(launch.get("atomic_outputs")),
                          launch.get("cluster")))
        mlx_name = build.names.get((name, signature))
        if mlx_name is None:
            mlx_name = build.names[(name, signature)] = self._mlx_name(key, name, spec, signature)
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

    # A variable of the module's own that kernels can write (`__device__ int table[64];`, `__managed__`):
    # state that outlives a call.
    _MODULE_STATE = re.compile(r"\b(__managed__|__device__\b[^;{}()]*[;=\[])")

    @classmethod
    def _mlx_name(cls, key: str, name: str, spec: Mapping[str, str], signature: str) -> str:
        """The name MLX compiles a kernel under: a digest of what its generated code is made of (name, body,
        header, the launch's inputs, outputs, shared memory, atomics and cluster), first and at a fixed width,
        then the plan's name. MLX appends the template values to the name, so a name that ended in the digest
        could be spelled by another kernel and template values. Named by content, not by candidate, a kernel
        that candidates share (the parts an edit or a tunable left alone) is one module, compiled once per
        worker rather than once per candidate; a module with variables of its own is not shared (the build's
        key goes in too): what one candidate left there must not reach another whose plan differs."""
        h = hashlib.sha256()
        parts = [name, spec["source"], spec["header"], spec.get("header_name", ""), signature]
        if cls._MODULE_STATE.search(spec["source"]) or cls._MODULE_STATE.search(spec["header"]):
            parts.append(key)
        for part in parts:
            data = part.encode()
            h.update(len(data).to_bytes(8, "little") + data)
        return f"k{h.hexdigest()[:16]}_{name}"

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
                   shapes: Mapping[str, Sequence[int]], dtypes: Mapping[str, str], poison: bool = True,
                   scalars: Mapping[int, Any] | None = None, ensure: bool = False) -> dict[str, Any]:
        """Runs every launch lazily; returns the named arrays (inputs, buffers and outputs).

        `poison` fills outputs with NaN first (checks); timed runs skip it, since MLX does the fill with a
        kernel of its own that would be charged to the candidate. `ensure` (a session's first call) has every
        launch's module compiled in the jail first, where it was not already."""
        env, calls = self._calls(key, launches, arrays, shapes, dtypes, poison, scalars)
        # Nothing was evaluated, so nothing was compiled yet: the modules are, here, all at once.
        if ensure and self.name == "mlx-cuda":
            self.ensure_modules(calls)
        return env

    def _calls(self, key: str, launches: Sequence[Mapping[str, Any]], arrays: dict[str, Any],
               shapes: Mapping[str, Sequence[int]], dtypes: Mapping[str, str], poison: bool,
               scalars: Mapping[int, Any] | None) -> tuple[dict[str, Any], list[tuple[str, Any, dict[str, Any]]]]:
        """Every launch called lazily: the named arrays, and each call (build key, kernel, arguments)."""
        m = _mlx()
        env = dict(arrays)
        calls = []
        for launch in launches:
            ins = [env[n] for n in launch["inputs"]] + [(scalars or {}).get(int(s)) if scalars and int(s) in scalars
                                                         else m.array(int(s), dtype=m.int32)
                                                         for s in launch.get("scalars") or []]
            template: list[tuple[str, Any]] = [(k, int(v)) for k, v in (launch.get("template") or {}).items()]
            template += [(k, _mx_dtype(str(d))) for k, d in (launch.get("type_args") or {}).items()]
            out_dtypes = [_mx_dtype(dtypes[n]) for n in launch["outputs"]]
            if launch.get("cluster") and (why := cluster.refusal()):
                raise CandidateFailure("invalid", why)
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
            calls.append((key, kernel, kwargs))
            if declared is not None and sig not in build.verified:
                outs = self._first_cluster_call(kernel, kwargs, *declared)
                build.verified.add(sig)
            else:
                outs = kernel(**kwargs)
            env.update(zip(launch["outputs"], outs, strict=True))
        return env, calls

    # -- modules compiled in the jail (mlx-cuda: nvrtc.py) ------------------------------------------
    def compiler(self) -> nvrtc.Compiler | None:
        """The jailed compiler, once MLX is proven to load modules from the cache; None where it cannot be
        used (MLX then compiles in this process, as it would by itself, and `describe` says why)."""
        if self.name != "mlx-cuda" or not self._available():
            return None
        if self._compiler is None:
            self._compiler = nvrtc.Compiler(Path(os.environ["MLX_PTX_CACHE_DIR"]), _mlx(), jail.env,
                                             hardware.cuda_device_attributes().get("compute_capability"))
            if not self._compiler.ready(self._cache_probe):
                self._in_worker(self._compiler.why or "the module cache probe failed")
        return self._compiler if self._compiler.active else None

    def _in_worker(self, why: str) -> dict[str, Any]:
        """Turns the jailed compile off for this worker (MLX compiles at first launch, as it would by itself),
        saying why on stderr (`ksearch -vv`); what `precompile` answers then."""
        if self._compiler is not None:
            self._compiler.why = why
        say(f"kernels compile inside the worker: {why}")
        return {"modules": 0, "compiled": 0, "in_worker": True}

    def _cache_probe(self, body: str) -> tuple[Any, dict[str, Any]]:
        m = _mlx()
        kernel = m.fast.cuda_kernel(name="ksearch_cache_probe", input_names=["x"], output_names=["out"], source=body)
        return kernel, dict(inputs=[m.zeros((1,), dtype=m.float32)], output_shapes=[(1,)],
                            output_dtypes=[m.float32], grid=(1, 1, 1), threadgroup=(1, 1, 1), stream=m.gpu)

    def _include_headers(self, key: str) -> None:
        """On CUDA each kernel's header reaches MLX as a file (header_file.py), written again if something
        removed it since."""
        if self.name == "mlx-cuda":
            for spec in self._builds[key].kernels.values():
                spec["included"] = header_file.by_include(spec["header"])

    def ensure_modules(self, calls: Sequence[tuple[str, Any, dict[str, Any]]]) -> dict[str, Any]:
        """Compiles in the jail, all at once, the modules of these kernel calls (build key, kernel, the call's
        arguments) that MLX's cache lacks. A module that does not compile is the candidate's compile error;
        without a usable compiler nothing happens here and MLX compiles at the first launch."""
        compiler = self.compiler()
        if compiler is None:
            return {"modules": 0, "compiled": 0, "in_worker": True}
        jobs: dict[str, nvrtc.Job] = {}
        needed: list[str] = []
        files: dict[str, dict[str, str]] = {}  # build key -> its header files (include name -> text)
        for key, kernel, kwargs in calls:
            try:
                name, source = compiler.generated(kernel, kwargs)
            except ValueError as exc:
                # MLX printed something else than its generated source: MLX compiles this one at its launch.
                say(f"a module compiles inside the worker: {exc}")
                continue
            module = nvrtc.module_name(name, source)
            digest = hashlib.sha256(source).hexdigest()
            if self._sources.setdefault(module, digest) != digest:
                # Two sources under one name: MLX would run whichever it met first for both.
                raise CandidateFailure("invalid", f"kernel module {module} names two different sources in this "
                                                  "worker (a hash collision); the kernel is not run")
            needed.append(module)
            if module in jobs or module in self._failed or module in self._left or compiler.cached(module):
                continue
            if key not in files:
                files[key] = {header_file.header_path(spec["header"]) or "": spec["header"]
                              for spec in self._builds[key].kernels.values()
                              if spec["header"] and spec.get("included") != spec["header"]}
            jobs[module] = nvrtc.Job(module, f"mlx::core::cu::{name}", source, files[key])
        start = time.perf_counter()
        done = compiler.compile(list(jobs.values()))
        broken = [d.log for d in done.values() if d.jail_broken]
        if broken:  # the jail, not the candidate
            return self._in_worker(f"the jailed NVRTC could not start: {broken[0].strip()[-2000:]}")
        for module, d in done.items():
            if d.code is None and d.infrastructure:
                # NVRTC failed otherwise than on the program (memory, a crash, a hang): MLX compiles it at
                # its launch, as it would by itself; nothing is remembered against the candidate.
                say(f"module {module} compiles inside the worker: {d.log.strip()[-500:]}")
                self._left.add(module)
            elif d.code is None:
                self._failed[module] = d.log
        if done:
            # Each module's own seconds and kernel, slowest first (a debug line: which bounds the precompile).
            each = ", ".join(f"{d.seconds:.2f} s {jobs[mod].kernel.removeprefix('mlx::core::cu::')[:80]}"
                             for mod, d in sorted(done.items(), key=lambda kv: -kv[1].seconds))
            say(f"modules compiled: {each}")
        for module in needed:
            if module in self._failed:
                raise CandidateFailure("compile_error", f"Failed to compile kernel: {self._failed[module]}.")
        return {"modules": len(set(needed)), "compiled": len(done), "seconds": time.perf_counter() - start,
                "longest_s": max((d.seconds for d in done.values()), default=0.0)}

    def precompile(self, key: str, builds: Sequence[Any]) -> dict[str, Any]:
        """Every module a candidate will launch on these workloads (one build each), compiled in the jail at
        once, before its first check. The calls are built on stand-in arrays of the right dtypes and ranks,
        and never evaluated. A compile error is kept for the run that meets it."""
        if key not in self._builds:
            raise WorkerError("not_compiled", f"key {key} has not been compiled by this worker")
        if self.compiler() is None:  # nothing to build the calls for
            return {"modules": 0, "compiled": 0, "in_worker": True}
        self._include_headers(key)
        calls: list[tuple[str, Any, dict[str, Any]]] = []
        try:
            for b in builds:
                calls += self.stand_in_calls(key, b)
            return self.ensure_modules(calls)
        except CandidateFailure as exc:
            return {"modules": len(calls), "compiled": 0, "compile_error": exc.message[-4000:]}

    def stand_in_calls(self, key: str, b: Any) -> list[tuple[str, Any, dict[str, Any]]]:
        """The calls of a build's launches on stand-in arrays, never evaluated: MLX's source depends on the
        dtypes and ranks only, so every array (outputs too) has one element."""
        m = _mlx()
        tiny = {n: (1,) * len(shape) for n, shape in b.shapes.items()}
        stand_in = {n: m.zeros(tiny[n], dtype=_mx_dtype(b.dtypes[n]))
                    for launch in b.launches for n in launch["inputs"] if n not in b.buffers}
        return self._calls(key, b.launches, stand_in, tiny, b.dtypes, True, None)[1]

    # -- the pipeline's hooks ---------------------------------------------------------------------
    def validate(self, r: Any) -> None:
        for b in [r.build, *([r.incumbent] if r.incumbent else [])]:
            for name in b.dtypes.values():
                _mx_dtype(name)

    def runs_here(self) -> bool:
        return self._available()

    def unavailable(self, r: Any, task: Any) -> dict[str, Any] | None:
        """mlx-metal off a Mac: nothing runs; the Metal source MLX generates for every launch comes back."""
        if self.name == "mlx-metal" and not self._available():
            try:
                sources = self.metal_sources(r.build, r.build.dtypes)
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
        return None

    def finish(self, r: Any, result: dict[str, Any]) -> dict[str, Any]:
        """Compiler messages name each header file by its plan name; a run that let a launch in clusters run
        asks for a fresh worker (under MLX's CUDA graphs the cluster shape reaches later kernels)."""
        if self.name == "mlx-cuda" and isinstance(result.get("message"), str):
            for spec in self._builds[r.build.key].kernels.values():
                result["message"] = header_file.plain_path(result["message"], spec["header"], spec["header_name"])
        if any(launch.get("cluster") for launch in r.build.launches) and cluster.refusal() is None:
            result["restart_worker"] = True
        broken = self.device_failure()
        if broken is not None:
            # The candidate left the device unusable (a fault that surfaced after its last check): whatever
            # it was judged, the next request gets a fresh worker, and a pass does not stand.
            result["restart_worker"] = True
            if result.get("status") == "passed":
                result = {**result, "status": "crash", "timing": None, "baselines": {},
                          "message": f"the device failed after the candidate's calls: {broken}"}
        return result

    def device_failure(self) -> str | None:
        """Why the device can no longer run a launch (MLX's message), or None: one launch of the worker's
        own kernel through MLX's graph, and a synchronisation."""
        if not self._available():
            return None
        m = _mlx()
        try:
            self.poison([m.zeros((1,), dtype=m.float32)])
        except Exception as exc:
            return str(exc)[:500]
        return None

    def session(self, build: Any, r: Any, task: Any) -> MlxSession:
        return MlxSession(self, build, task)

    def _kept(self, key: Any) -> OrderedDict[Any, Any] | None:
        """The table holding kept device copy `key` (an input set by set id, a reference copy by (set id,
        output)), or None where nothing is kept under it. Both hold (arrays by name, fingerprint at upload)."""
        if key in self._sets:
            return self._sets
        return self._expected if self._expected.get(key) is not None else None

    def _drop_changed(self, keys: Sequence[Any]) -> list[Any]:
        """The kept copies among `keys` whose device contents changed since upload (fingerprinted in one batch),
        dropped so that they are uploaded afresh when next asked for."""
        m = _mlx()
        kept = [(key, table) for key in dict.fromkeys(keys) if (table := self._kept(key)) is not None]
        now = [fingerprint(table[key][0]) for key, table in kept]
        m.eval(now)
        changed = []
        for (key, table), after in zip(kept, now, strict=True):
            if not bool(m.array_equal(table[key][1], after).item()):
                del table[key]
                changed.append(key)
        return changed

    def _unchanged(self, keys: Sequence[Any]) -> None:
        """Checks the kept copies among `keys` this timing has not checked yet: one changed since upload is no
        fault of the timing about to use it (an earlier candidate's later calls wrote it), and is uploaded
        afresh."""
        fresh = [key for key in dict.fromkeys(keys) if key not in self._checked]
        self._checked.update(fresh)
        for key in self._drop_changed(fresh):
            say(f"a kept device copy ({key}) changed since upload, before this timing: uploaded afresh")

    @staticmethod
    def _keep(table: OrderedDict[Any, Any], key: Any, entry: Any, limit: int) -> None:
        """Keeps `entry` ((arrays by name, fingerprint), or None) under `key`, dropping the least recently used
        entries beyond `limit` bytes (the newest always stays)."""
        table[key] = entry
        total = sum(_nbytes(e[0]) for e in table.values() if e is not None)
        while total > limit and len(table) > 1:
            _, old = table.popitem(last=False)
            total -= _nbytes(old[0]) if old is not None else 0

    def device_set(self, ident: tuple[str, int, int], arrays: Mapping[str, np.ndarray],
                   dtypes: Mapping[str, str]) -> dict[str, Any]:
        """The device copy of an input set (uploaded once, kept while device memory allows)."""
        got = self._sets.get(ident)
        if got is not None:
            self._sets.move_to_end(ident)
            return got[0]
        dev = upload(arrays, dtypes)
        stamp = fingerprint(dev)
        _mlx().eval(stamp)  # now, before any candidate could touch the set
        self._keep(self._sets, ident, (dev, stamp), self._sets_bytes())
        return dev

    def verify_sets(self, idents: Sequence[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
        """The sets among `idents` whose device contents changed since upload, input sets or the device copies
        of their reference outputs (they are dropped, so the next candidate gets them afresh)."""
        wanted = set(idents)
        keys = [*idents, *(key for key in self._expected if key[0] in wanted)]
        return list(dict.fromkeys(key if key in wanted else key[0] for key in self._drop_changed(keys)))

    def expected_copy(self, ident: tuple[str, int, int], name: str, ref: np.ndarray) -> Any:
        """The device copy (float32) of reference output `name` of checked set `ident`, uploaded once per run
        and fingerprinted (`verify_sets` checks it after each timing); None where the screen does not apply
        (not floating point, or a reference with non-finite values). A kernel could read a copy, as it could any
        buffer MLX keeps; copies exist only for checked sets, a few of the timed calls' inputs, so one copied
        answer still leaves every other call to compute, and the host comparison of the drawn calls stays the
        authority."""
        key = (ident, name)
        self._unchanged([key])
        if key in self._expected:
            self._expected.move_to_end(key)
            got = self._expected[key]
            return None if got is None else got[0][name]
        m = _mlx()
        ref = np.asarray(ref)
        entry = None
        if ref.dtype.kind == "f" and bool(np.all(np.isfinite(ref))):
            copy = {name: m.array(ref.astype(np.float32, copy=False))}
            stamp = fingerprint(copy)
            m.eval(copy[name], stamp)  # now, before any candidate could touch the copy
            entry = (copy, stamp)
        self._keep(self._expected, key, entry, self._sets_bytes() // 2)
        return None if entry is None else entry[0][name]

    def poison(self, arrays: Sequence[Any]) -> None:
        """Fills device arrays with all-ones bytes (NaN in every float type) in place, before they go back to
        MLX's allocator: a buffer handed to a later call never holds an earlier call's correct output."""
        m = _mlx()
        arrays = [a for a in arrays if a.size]
        if not arrays:
            return
        if getattr(m, "cuda", None) is not None and m.cuda.is_available():
            if self._poisoner is None:
                self._poisoner = m.fast.cuda_kernel(
                    name="ksearch_poison", input_names=["dst", "nbytes"], output_names=["done"],
                    source=_POISON_CUDA, ensure_row_contiguous=False)
            done = []
            for a in arrays:
                nbytes = int(a.nbytes)
                threads = max(-(-nbytes // 4), 1)
                done += self._poisoner(inputs=[a, m.array(nbytes, dtype=m.uint64)], output_shapes=[(1,)],
                                       output_dtypes=[m.int32], grid=(-(-threads // 256) * 256, 1, 1),
                                       threadgroup=(256, 1, 1), stream=m.gpu)
            m.eval(done)
            m.synchronize()
            return
        # Unified memory (Apple silicon, MLX's CPU build): write through a view of the same memory.
        m.eval(arrays)
        m.synchronize()
        for a in arrays:
            try:
                view = np.array(a.view(m.uint8), copy=False)
                view[...] = 0xFF
            except (ValueError, TypeError):
                pass  # a copy would be needed: nothing to poison in place

    def time(self, sessions: Sequence[MlxSession], plan: Any, verify: Any, cfg: TimingConfig,
             paired: bool) -> Measurement:
        """Each session timed as a chain of dependent calls (`Chain`), with its calls per evaluation probed,
        minus a chain of the links alone at the same count (`NullChain`), interleaved with it."""
        first = sessions[0]
        self._checked = set()

        def device_sets() -> list[dict[str, Any]]:
            # The plan's sets on the device, each kept one checked first (`_unchanged`).
            self._unchanged(plan.ids)
            return [self.device_set(i, s, first.dtypes) for i, s in zip(plan.ids, plan.sets, strict=True)]

        dev = device_sets()
        link = smallest_input(first.task_inputs, dev[0])
        ks = [s.calls_per_eval(dev, link) for s in sessions]
        if paired:
            ks = [max(ks)] * len(ks)
        entries = [Chain(s, dev, k, link, plan, verify, who)
                   for s, k, who in zip(sessions, ks, ("candidate", "incumbent"))]
        nulls = {k: NullChain(dev, k, link) for k in sorted(set(ks))}

        def grow(start: int, evals: int) -> int:
            # Samples count evaluations of k calls; the plan counts calls.
            k = max(ks)
            last = plan.extend(start * k, evals * k)
            dev[:] = device_sets()
            for entry in [*(e.entry for e in entries), *(n.entry for n in nulls.values())]:
                entry.sets = len(dev)
            return last // k

        try:
            m = measure([*(e.entry for e in entries), *(n.entry for n in nulls.values())], cfg, paired=paired,
                        grow=grow)
        except (TimedRunWrong, CandidateFailure, WorkerError):
            raise
        except Exception as exc:  # the candidate failed while being timed (a fault surfaces at evaluation)
            raise _failure(exc, first) from None
        for s in sessions:
            s.timed_ids, s.checked = list(plan.ids), list(plan.checked)
        changed = self.verify_sets(plan.ids)
        if changed:
            raise TimedRunWrong(f"a timed call changed its input sets, or the evaluator's device copies of their "
                                f"reference outputs, while timed ({len(changed)} of {len(dev)} sets no longer match "
                                "their fingerprint)")
        for e in entries:
            for part, seconds in e.spent.items():
                m.parts[f"after_{part}"] = m.parts.get(f"after_{part}", 0.0) + seconds
        null_median = {k: m.stats[len(entries) + i]["median_s"] for i, k in enumerate(nulls)}
        out = per_call(m, ks, null_median, cfg, len(entries), len(dev))
        if cfg.throughput:
            for st, s, k in zip(out.stats, sessions, ks, strict=True):
                st.update(throughput(s, dev, k))
        return out

    def baseline_sets(self, layout: Any) -> int:
        """Input sets the baselines are timed on: enough to hold twice the cache, at most 16."""
        return sets_beyond_cache(self.cache_bytes(), layout.input_bytes(), 16)

    def warm(self, layout: Any) -> None:
        """Compiles the worker's own kernels this workload will use (the poison fill for each array dtype,
        the chain's link), so a candidate's first call does not wait for them (MLX compiles each kernel
        and dtype with NVRTC at its first launch, about 1.7 s on the H200)."""
        m = _mlx()
        # `prepare` precedes every run: the kernels compile once per worker and workload shape.
        if not self._available() or layout.key() in self._warmed:
            return
        self._warmed.add(layout.key())
        # float32 too: the health probe's, and the usual dtype of a candidate's own buffers (partial sums).
        dtypes = sorted({"float32", *(d for _, _, d in (*layout.inputs, *layout.outputs))})
        self.poison([m.zeros((1,), dtype=_mx_dtype(d)) for d in dtypes])
        sizes = {n: math.prod(s) * np.dtype(_host_dtype_name(d)).itemsize for n, s, d in layout.inputs}
        names = [n for n, _, _ in layout.inputs]
        if names and layout.outputs:
            small = min(names, key=lambda n: (sizes[n], names.index(n)))
            x = m.zeros((1,), dtype=_mx_dtype(dict((n, d) for n, _, d in layout.inputs)[small]))
            prev = m.zeros((1,), dtype=_mx_dtype(layout.outputs[0][2]))
            m.eval(link(x, prev))
            m.synchronize()

    def baseline_outputs(self, fn: Callable[..., Any], inputs: Mapping[str, np.ndarray], dims: dict[str, int],
                         layout: Any) -> dict[str, np.ndarray]:
        m = _mlx()
        dtypes = {n: d for n, _, d in layout.inputs}
        try:
            got = dict(fn(upload(inputs, dtypes), dict(dims)))
            m.eval(list(got.values()))
            return {n: _host(m, a, "bfloat16" if a.dtype == m.bfloat16 else "") for n, a in got.items()}
        except Exception as exc:
            raise WorkerError("bad_task", f"baseline raised: {exc}") from None

    def time_baselines(self, fns: Mapping[str, Callable[..., Any]], sets: Sequence[Mapping[str, np.ndarray]],
                       dims: dict[str, int], layout: Any, cfg: TimingConfig) -> dict[str, dict[str, Any]]:
        """Baselines timed as chains like the candidate, on sets uploaded afresh (no candidate ever held them)."""
        dtypes = {n: d for n, _, d in layout.inputs}
        count = min(len(sets), self.baseline_sets(layout))
        dev = [upload(s, dtypes) for s in sets[:count]]
        link = smallest_input([n for n, _, _ in layout.inputs], dev[0])
        out_name = layout.outputs[0][0]
        names = list(fns)
        runners = []
        for name in names:
            fn = fns[name]

            def call(s: Mapping[str, Any], fn: Callable[..., Any] = fn) -> dict[str, Any]:
                return dict(fn(dict(s), dict(dims)))
            try:
                _mlx().eval(list(call(dev[0]).values()))
            except Exception as exc:
                raise WorkerError("bad_task", f"baseline {name} raised: {exc}") from None
            runners.append(Baseline(self, call, out_name))
        ks = [b.calls_per_eval(dev, link) for b in runners]
        entries = [Chain(b, dev, k, link, None, None, "baseline") for b, k in zip(runners, ks, strict=True)]
        nulls = {k: NullChain(dev, k, link) for k in sorted(set(ks))}
        m = measure([*(e.entry for e in entries), *(n.entry for n in nulls.values())], cfg)
        null_median = {k: m.stats[len(entries) + i]["median_s"] for i, k in enumerate(nulls)}
        timed = per_call(m, ks, null_median, cfg, len(entries), len(dev))
        if cfg.throughput:
            for st, b, k in zip(timed.stats, runners, ks, strict=True):
                st.update(throughput(b, dev, k))
        return dict(zip(names, timed.stats, strict=True))

    # -- Metal without a Mac ----------------------------------------------------------------------
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
                ins = [env[n] for n in launch["inputs"]] + [m.array(int(s), dtype=m.int32)
                                                             for s in launch.get("scalars") or []]
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


# Device copies of input sets kept between candidates: a quarter of the device's memory, between 4 and 32 GiB.
# Too few and every candidate uploads its workloads' timed sets again (3-4.5 s a candidate on the H200 with
# 4 GiB for mamba-scan's and attention's; bench/results/h200-eval-cost-split-20261202.json).
DEVICE_SETS_MIN, DEVICE_SETS_MAX = 4 << 30, 32 << 30


def device_sets_bytes(device_memory: int | None) -> int:
    if not device_memory:
        return DEVICE_SETS_MIN
    return max(DEVICE_SETS_MIN, min(device_memory // 4, DEVICE_SETS_MAX))

# Fills `nbytes` bytes at `dst` with 0xFF (a NaN in every float type): the worker's own kernel, which writes
# through the pointer MLX hands it as a read-only input.
_POISON_CUDA = """
    unsigned long long n = nbytes[0];
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long words = n / 4;
    if (i < words) reinterpret_cast<unsigned int*>(const_cast<void*>((const void*)dst))[i] = 0xFFFFFFFFu;
    if (i < n % 4) reinterpret_cast<unsigned char*>(const_cast<void*>((const void*)dst))[words * 4 + i] = 0xFF;
    if (i == 0) done[0] = 1;
"""

_UINT = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def _host_dtype_name(name: str) -> str:
    return "uint16" if name == "bfloat16" else name


def _nbytes(arrays: Mapping[str, Any]) -> int:
    return sum(int(a.nbytes) for a in arrays.values())


def upload(arrays: Mapping[str, np.ndarray], dtypes: Mapping[str, str]) -> dict[str, Any]:
    """Device arrays of a set (bfloat16 inputs hold exactly the values the reference saw), materialised."""
    m = _mlx()
    out = {}
    for n, a in arrays.items():
        x = m.array(a)
        if dtypes.get(n) == "bfloat16":
            x = x.astype(m.bfloat16)  # exact: the pool rounded these values to bfloat16 already
        out[n] = x
    m.eval(list(out.values()))
    return out


def fingerprint(arrays: Mapping[str, Any]) -> Any:
    """Two wrapping sums over each array's bytes as unsigned words (plain and weighted by position modulo a
    prime), on the device: any change of a word changes them but for a crafted collision."""
    m = _mlx()
    parts = []
    for name in sorted(arrays):
        a = arrays[name]
        width = next(w for w in (4, 2, 1) if int(a.nbytes) % w == 0)
        words = a.reshape(-1).view(getattr(m, _UINT[width])).astype(m.uint32)
        weights = (m.arange(words.size, dtype=m.uint32) % 65521) + 1
        parts += [m.sum(words), m.sum(words * weights)]
    return m.stack(parts) if parts else m.zeros((0,), dtype=m.uint32)


def smallest_input(names: Sequence[str], arrays: Mapping[str, Any]) -> str:
    """The input that carries the dependency from one call to the next: the smallest, so the link is cheap."""
    return min(names, key=lambda n: (int(arrays[n].nbytes), names.index(n)))


# y = x, bit for bit; `previous` is an input only so that MLX runs the copy after the call that made it.
# The size is an argument, not a template: MLX compiles a module per template value (NVRTC, about 1.7 s on the
# H200), and every workload's smallest input has a size of its own.
_LINK_CUDA = """
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size[0]) y[i] = x[i];
"""
_LINK_METAL = """
    const uint i = thread_position_in_grid.x;
    if (i < size[0]) y[i] = x[i];
"""
_link_kernel: list[Any] = []


def _gpu_link_kernel() -> Any | None:
    """One kernel for a link (a copy that lists the previous output as an input) where MLX has a GPU back-end:
    a single launch per call, so the chain's own cost stays small beside the calls it links."""
    m = _mlx()
    if not _link_kernel:
        kernel = None
        if getattr(m, "cuda", None) is not None and m.cuda.is_available():
            kernel = m.fast.cuda_kernel(name="ksearch_link", input_names=["x", "previous", "size"],
                                        output_names=["y"], source=_LINK_CUDA, ensure_row_contiguous=True)
        elif getattr(m, "metal", None) is not None and m.metal.is_available():
            kernel = m.fast.metal_kernel(name="ksearch_link", input_names=["x", "previous", "size"],
                                         output_names=["y"], source=_LINK_METAL, ensure_row_contiguous=True)
        _link_kernel.append(kernel)
    return _link_kernel[0]


_sizes: dict[int, Any] = {}


def _size_array(size: int) -> Any:
    """The link kernel's size argument, one array per size: the worker's own, never handed to a candidate."""
    got = _sizes.get(size)
    if got is None:
        m = _mlx()
        cuda = getattr(m, "cuda", None) is not None and m.cuda.is_available()
        got = _sizes[size] = m.array(size, dtype=m.uint64 if cuda else m.uint32)
        m.eval(got)
    return got


def link(x: Any, previous: Any) -> Any:
    """`x`, bit for bit, made to depend on `previous` (a call's output), so the device runs the call that
    reads it only after the previous call finished. On a GPU one copy kernel; elsewhere MLX ops: the previous
    output's first element, as bits and-ed with zero, added to x's bits."""
    m = _mlx()
    kernel = _gpu_link_kernel()
    if kernel is not None:
        size = max(int(x.size), 1)
        threads = -(-size // 256) * 256
        (y,) = kernel(inputs=[x, previous.reshape(-1)[:1], _size_array(size)], output_shapes=[x.shape],
                      output_dtypes=[x.dtype], grid=(threads, 1, 1), threadgroup=(256, 1, 1), stream=m.gpu)
        return y
    tok = previous.reshape(-1)[:1]
    tok = tok.astype(m.uint8) if tok.dtype == m.bool_ else tok.view(getattr(m, _UINT[tok.dtype.size]))
    if x.dtype == m.bool_:
        zero = (tok & 0).astype(m.uint8).reshape(())
        return (x.astype(m.uint8) + zero).astype(m.bool_)
    unsigned = getattr(m, _UINT[x.dtype.size])
    zero = (tok & 0).astype(unsigned).reshape(())
    return (x.view(unsigned) + zero).view(x.dtype)


class Chain:
    """Timed evaluations of `k` dependent calls each: call j of an evaluation takes the next input set in the
    plan's order, its smallest input linked to call j-1's output. The graph is built in `before` (off the
    clock); `run` evaluates and synchronises; `after` compares the calls on checked sets, checks the plan's
    scalars, and poisons everything the calls produced before it goes back to MLX's allocator.

    Of the calls on checked sets, those drawn for comparison are compared on the host (`verify`, the
    authority); every other one is screened on the device against the reference (one reduction a call, read
    back once a sample), and compared on the host only if the screen finds a difference. So a kernel that
    skips or spoils calls it guesses are unchecked is caught at any call on a checked set, without copying
    every such call's outputs to the host (which cost seconds a candidate on large workloads)."""

    def __init__(self, runner: Any, sets: list[dict[str, Any]], k: int, link_name: str, plan: Any, verify: Any,
                 who: str) -> None:
        self.runner, self.sets, self.k, self.link_name = runner, sets, k, link_name
        self.plan, self.verify, self.who = plan, verify, who
        self.graphs: list[list[tuple[int, int, dict[str, Any]]]] = []  # (call number, set, outputs) per call
        self.entry = Batches(self.run, len(sets), self.before, self.after)
        # Seconds `after` spent comparing and screening, and giving outputs back poisoned (the debug split).
        self.spent = {"checks_s": 0.0, "release_s": 0.0}

    def before(self, start: int, count: int) -> None:
        self.graphs = []
        for e in range(count):
            calls: list[tuple[int, int, dict[str, Any]]] = []
            previous = None
            for j in range(self.k):
                call = (start + e) * self.k + j
                index = call % len(self.sets)
                inputs = self.sets[index]
                if previous is not None:
                    inputs = {**inputs, self.link_name: link(inputs[self.link_name], previous)}
                produced = self.runner.call(inputs)
                previous = produced[self.runner.out_name]
                calls.append((call, index, produced))
            self.graphs.append(calls)

    def run(self, start: int, count: int) -> None:
        m = _mlx()
        for calls in self.graphs:
            m.eval([a for _, _, produced in calls for a in produced.values()])
            m.synchronize()
        if self.graphs and self.graphs[-1]:
            # The sets of the runner's latest timed call and of its latest unlinked one (the chain's first
            # call, whose linked input is the set's own array too).
            self.runner.last_sets = [self.graphs[-1][-1][1], self.graphs[-1][0][1]]

    def after(self, start: int, count: int) -> None:
        t0 = time.perf_counter()
        try:
            if self.plan is not None:
                screened: list[tuple[int, dict[str, Any], Any]] = []
                for calls in self.graphs:
                    for call, index, produced in calls:
                        if self.plan.compares(call, index):
                            self.verify(index, self.runner.host_outputs(produced), self.who)
                        elif index in self.plan.checked:
                            ok = self.screen(index, produced)
                            if ok is None:
                                self.verify(index, self.runner.host_outputs(produced), self.who)
                            else:
                                screened.append((index, produced, ok))
                if screened:
                    _mlx().eval([ok for _, _, ok in screened])
                    for index, produced, ok in screened:
                        if not bool(ok.item()):
                            self.verify(index, self.runner.host_outputs(produced), self.who)
            self.runner.check_scalars()
        finally:
            t1 = time.perf_counter()
            self.runner.release([a for calls in self.graphs for _, _, produced in calls
                                 for a in produced.values()])
            self.graphs = []
            self.spent["checks_s"] += t1 - t0
            self.spent["release_s"] += time.perf_counter() - t1


    def screen(self, index: int, produced: Mapping[str, Any]) -> Any:
        """A device scalar, true where every output of a call on checked set `index` is within tolerance of
        the reference (NaN, an unwritten element, fails it); None where the screen does not apply (an output
        that is not floating point, a reference with non-finite values): compare on the host then. The
        reference's device copy is the run's (`MlxTarget.expected_copy`), checked after timing."""
        m = _mlx()
        tolerances = self.verify.tolerances  # the evaluator's `Verifier`
        ok = None
        for name, out in produced.items():
            if name not in tolerances:
                continue  # an intermediate buffer, not an output
            exp = self.runner.target.expected_copy(self.plan.ids[index], name,
                                                   self.plan.checked[index].expected[name])
            if exp is None or not m.issubdtype(out.dtype, m.floating) or exp.shape != out.shape:
                return None
            atol, rtol = tolerances[name]
            within = m.all(m.abs(out.astype(m.float32) - exp) <= atol + rtol * m.abs(exp))
            ok = within if ok is None else m.logical_and(ok, within)
        return ok


class NullChain:
    """What a chain of k calls costs besides the calls: one evaluation of k-1 links alone (and MLX's fixed
    cost of an evaluation), taken off the chains of the same k."""

    def __init__(self, sets: list[dict[str, Any]], k: int, link_name: str) -> None:
        self.sets, self.k, self.link_name = sets, k, link_name
        self.graphs: list[Any] = []
        self.entry = Batches(self.run, len(sets), self.before)

    def before(self, start: int, count: int) -> None:
        self.graphs = []
        for e in range(count):
            x = self.sets[((start + e) * self.k) % len(self.sets)][self.link_name]
            for j in range(1, self.k):
                x = link(self.sets[((start + e) * self.k + j) % len(self.sets)][self.link_name], x)
            self.graphs.append(x)

    def run(self, start: int, count: int) -> None:
        m = _mlx()
        for x in self.graphs:
            m.eval(x)
            m.synchronize()


def per_call(m: Measurement, ks: Sequence[int], null_median: Mapping[int, float], cfg: TimingConfig,
             n: int, sets: int) -> Measurement:
    """Per-call figures of the first `n` entries: each sample (one evaluation of k calls) less the null chain's
    median at that k, over k; statistics and the pair's verdict recomputed from those."""
    samples = [[max(s - null_median[k], 1e-12) / k for s in m.samples[i]] for i, k in enumerate(ks[:n])]
    stats_ = []
    for i, k in enumerate(ks[:n]):
        st = stats(samples[i], m.stats[i]["reps"] * k, m.stats[i]["distinct_inputs"], cfg.noisy_iqr)
        st.update(launches_per_eval=k, link_s=null_median[k] / k, evals_per_sample=m.stats[i]["reps"])
        st["calls"] = m.stats[i]["calls"] * k
        st["distinct_inputs"] = min(st["calls"], sets)
        stats_.append(st)
    verdict = paired_verdict(samples[0], samples[1], cfg.verdict_z, cfg.min_effect) if m.verdict is not None else None
    return Measurement(stats_, samples, verdict, m.sampled_s, m.parts)


def throughput(runner: Any, sets: list[dict[str, Any]], k: int, evals: int = 15,
               budget_s: float = 1.0) -> dict[str, float]:
    """What the clock used to report, beside the chained latency: `independent_s`, per call, k independent
    calls in one evaluation (the GPU may overlap them: a throughput, not the latency a model sees), and
    `alone_s`, one call per evaluation (MLX's fixed cost of an evaluation included). Medians of up to
    `evals` evaluations, within `budget_s` each (at least three)."""
    m = _mlx()
    out = {}
    for name, n in (("independent_s", max(k, 8)), ("alone_s", 1)):
        times: list[float] = []
        start = time.perf_counter()
        for e in range(evals + 2):
            if len(times) >= 3 and time.perf_counter() - start > budget_s:
                break
            produced = [runner.call(sets[(e * n + i) % len(sets)]) for i in range(n)]
            t0 = time.perf_counter()
            m.eval([a for p in produced for a in p.values()])
            m.synchronize()
            if e >= 2:
                times.append((time.perf_counter() - t0) / n)
            runner.release([a for p in produced for a in p.values()])
        out[name] = float(np.median(times))
    return out


class Runner:
    """What a Chain calls: one call of the candidate (every launch), its first output, host copies of its
    outputs, and the clean-up after a sample."""
    out_name: str

    def call(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def host_outputs(self, produced: Mapping[str, Any]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def check_scalars(self) -> None:
        pass

    def release(self, arrays: Sequence[Any]) -> None:
        pass

    def calls_per_eval(self, sets: list[dict[str, Any]], link_name: str) -> int:
        """From one call per evaluation (timing.chain_length), after three warm-up calls (a library's first
        calls may build plans; a kernel's first compiles it)."""
        m = _mlx()

        def once() -> float:
            chain = Chain(self, sets, 1, link_name, None, None, "probe")
            chain.before(0, 1)
            t0 = time.perf_counter()
            chain.run(0, 1)
            dt = time.perf_counter() - t0
            chain.after(0, 1)
            return dt

        for _ in range(3):
            once()
        one = min(once() for _ in range(3))
        m.synchronize()
        return chain_length(one)


class Baseline(Runner):
    def __init__(self, target: MlxTarget, fn: Callable[[Mapping[str, Any]], dict[str, Any]], out_name: str) -> None:
        self.target, self.fn, self.out_name = target, fn, out_name

    def call(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return self.fn(inputs)


class MlxSession(Runner):
    """One candidate build on one workload: checks, the chain's calls, rechecks in the timed sets."""

    def __init__(self, target: MlxTarget, build: Any, task: Any) -> None:
        self.target, self.build = target, build
        self.key, self.launches = build.key, build.launches
        self.task_inputs = [n for n, _ in task.inputs]
        self.outputs = list(task.outputs)
        self.out_name = self.outputs[0]
        self.dtypes = dict(build.dtypes)
        self.shapes = dict(build.shapes)
        # The plan's scalars as int32 arrays, made for this session alone and checked after every run: a
        # kernel that wrote one would change every later call's work, and no other candidate shares them.
        m = _mlx()
        values = sorted({int(s) for launch in build.launches for s in launch.get("scalars") or []})
        self.scalars = {v: m.array(v, dtype=m.int32) for v in values}
        m.eval(list(self.scalars.values()))
        target._include_headers(build.key)
        self.ensured = False  # this session's modules compiled (at its first call)
        self.timed_ids: list[tuple[str, int, int]] = []
        self.checked: list[int] = []
        self.last_sets: list[int] = []  # the sets of the last timed calls (Chain.run)

    def __enter__(self) -> MlxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ready(self) -> bool:
        """Every module of this session's launches compiled (mlx-cuda, in the jail) before any of its calls;
        False where one does not compile. The evaluator asks it of the incumbent before timing the two side by
        side: an incumbent that no longer compiles is not compared, and never blamed on the candidate."""
        if self.target.name != "mlx-cuda":
            return True
        try:
            self.target.ensure_modules(self.target.stand_in_calls(self.key, self.build))
        except CandidateFailure:
            return False
        self.ensured = True
        return True

    def close(self) -> None:
        # A fault of the candidate's last launch may surface only here (a sticky CUDA error): its failure,
        # and a fresh worker for the next one.
        try:
            _mlx().synchronize()
        except Exception as exc:
            raise _failure(exc, self) from None

    def call(self, inputs: Mapping[str, Any], poison: bool = False) -> dict[str, Any]:
        """One call of every launch, lazily; the arrays the launches produced (outputs and buffers)."""
        env = self.target.launch_all(self.key, self.launches, dict(inputs), self.shapes, self.dtypes, poison=poison,
                                     scalars=self.scalars, ensure=not self.ensured)
        self.ensured = True
        given = [*inputs.values(), *self.scalars.values()]
        return {n: a for n, a in env.items() if n not in inputs and not any(a is x for x in given)}

    def host_outputs(self, produced: Mapping[str, Any]) -> dict[str, np.ndarray]:
        m = _mlx()
        return {n: _host(m, produced[n], self.dtypes[n]) for n in self.outputs}

    def check_scalars(self) -> None:
        m = _mlx()
        bad = [v for v, a in self.scalars.items() if int(a.item()) != v]
        if bad:
            m.synchronize()
            raise TimedRunWrong(f"a launch changed the plan's scalar arrays (values {bad} no longer hold): work "
                                "skipped or changed for later calls")

    def release(self, arrays: Sequence[Any]) -> None:
        self.target.poison(list(arrays))

    def calls_per_eval(self, sets: list[dict[str, Any]], link_name: str) -> int:
        try:
            return super().calls_per_eval(sets, link_name)
        except (TimedRunWrong, CandidateFailure, WorkerError):
            raise
        except Exception as exc:
            raise _failure(exc, self) from None

    def _launch(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """One poisoned run of every launch, evaluated; the candidate's failures become CandidateFailure."""
        m = _mlx()
        try:
            produced = self.call(inputs, poison=True)
            m.eval(list(produced.values()))
            m.synchronize()
        except CandidateFailure:
            raise
        except Exception as exc:
            raise _failure(exc, self) from None
        return produced

    def check(self, inputs: Mapping[str, np.ndarray], twice: bool) -> CheckRun:
        dev = upload({n: inputs[n] for n in self.task_inputs}, self.dtypes)
        return self._check(dev, inputs, twice)

    def _check(self, dev: Mapping[str, Any], pristine: Mapping[str, np.ndarray], twice: bool,
               where: int | None = None, on_device: Mapping[str, Any] | None = None) -> CheckRun:
        # A launch's fault surfaces at the next device call, which may be a read of its outputs: the
        # candidate's failure all the same (and one that broke the device context restarts the worker).
        try:
            return self._checked(dev, pristine, twice, where, on_device)
        except (CandidateFailure, TimedRunWrong, WorkerError):
            raise
        except Exception as exc:
            raise _failure(exc, self) from None

    def _checked(self, dev: Mapping[str, Any], pristine: Mapping[str, np.ndarray], twice: bool,
                 where: int | None, on_device: Mapping[str, Any] | None) -> CheckRun:
        """One checked call. The inputs are compared with `pristine` on the host, or, for a recheck, with
        `on_device` (a second device copy of the same inputs, which the kernel is not handed) on the device:
        the recheck's outputs are still compared on the host, and a recheck's inputs would otherwise cross
        to the host once more for each set it writes."""
        m = _mlx()
        t0 = time.perf_counter()
        produced = self._launch(dev)
        seconds = time.perf_counter() - t0
        run = CheckRun(outputs=self.host_outputs(produced), seconds=seconds, where=where)
        if on_device is not None:
            same = _same_on_device(m, [(dev[n], on_device[n]) for n in self.task_inputs])
            run.inputs_modified = [n for n, ok in zip(self.task_inputs, same, strict=True) if not ok]
        else:
            run.inputs_modified = self._changed_on_host(dev, pristine)
        run.problems += [f"input {n} modified by the kernel (inputs are read-only)" for n in run.inputs_modified]
        if twice and not run.inputs_modified:
            # The second run is compared bit for bit on the device, with a device copy of the first run's
            # outputs taken before it runs (so it cannot make the two agree by writing into the first run's
            # arrays); its outputs cross to the host only if they differ. The first run's host copy stays
            # the one judged against the reference.
            first = {n: _bits(m, produced[n]) + 0 for n in self.outputs}
            m.eval(list(first.values()))
            t1 = time.perf_counter()
            again = self._launch(dev)
            run.again_s = time.perf_counter() - t1
            same = _same_on_device(m, [(again[n], first[n]) for n in self.outputs])
            for n, ok in zip(self.outputs, same, strict=True):
                if ok:
                    continue
                b = _host(m, again[n], self.dtypes[n])
                if not _same_bits(b, run.outputs[n]):
                    diff = int(np.sum(run.outputs[n].view(np.uint8) != b.view(np.uint8)))
                    run.problems.append(f"output {n}: nondeterministic: two runs on the same inputs differ in {diff} "
                                        "bytes (a race between threads, or state kept between launches)")
            # The copy holds a correct output: poisoned before MLX's allocator hands it to a later call.
            self.release([*again.values(), *first.values()])
        try:
            self.check_scalars()
        except TimedRunWrong as exc:
            run.problems.append(str(exc))
        self.release(list(produced.values()))
        return run

    def _changed_on_host(self, dev: Mapping[str, Any], pristine: Mapping[str, np.ndarray]) -> list[str]:
        """The inputs whose device contents, copied to the host, are not bit for bit `pristine`'s (bfloat16
        inputs are held on the host as their exact float32 values)."""
        m = _mlx()
        return [n for n in self.task_inputs
                if not _same_bits(_host(m, dev[n], self.dtypes[n]), np.asarray(pristine[n], dtype=np.float32)
                                  if self.dtypes[n] == "bfloat16" else pristine[n])]

    def recheck(self, inputs: Mapping[str, np.ndarray]) -> list[CheckRun]:
        """Fresh inputs written into timed input sets in place (the last timed call's, the first and the checked
        ones), where MLX allows it, each checked: a cache keyed by an address timing used is stale there. The
        last call's set is the one any such cache still holds, however few entries it keeps (device input sets
        stay put between calls and candidates, so addresses come back with their contents unchanged while
        timed). Where it cannot write them, fresh arrays (MLX's allocator tends to hand out the buffers just
        freed)."""
        try:
            return self._recheck(inputs)
        except (CandidateFailure, TimedRunWrong, WorkerError):
            raise
        except Exception as exc:
            raise _failure(exc, self) from None

    def _recheck(self, inputs: Mapping[str, np.ndarray]) -> list[CheckRun]:
        m = _mlx()
        fresh = upload({n: inputs[n] for n in self.task_inputs}, self.dtypes)
        last = [self.timed_ids[i] for i in self.last_sets if i < len(self.timed_ids)]
        ids = list(dict.fromkeys([*last, *self.timed_ids[:1],
                                  *[self.timed_ids[i] for i in self.checked[:RECHECK_SETS - 1]]]))
        host = {n: _host_bits(inputs[n], self.dtypes[n]) for n in self.task_inputs}
        runs = []
        for ident in ids:
            got = self.target._sets.get(ident)
            if got is None:
                continue
            dev = got[0]
            if _refill(m, dev, fresh, host):
                # The set now holds the recheck's inputs: it is uploaded afresh for the next candidate.
                self.target._sets.pop(ident, None)
                runs.append(self._check(dev, inputs, False, where=self.timed_ids.index(ident), on_device=fresh))
        if not runs:
            runs.append(self._check(fresh, inputs, False))
        else:
            # The device copy the sets were compared with, against the host once: a kernel that found it in
            # device memory and wrote it as it wrote its own input is caught here (and no later set could have
            # been refilled to match it), at one copy per recheck rather than one per set.
            changed = self._changed_on_host(fresh, inputs)
            runs[-1].inputs_modified += [n for n in changed if n not in runs[-1].inputs_modified]
            runs[-1].problems += [f"input {n} modified by the kernel (inputs are read-only; found in the recheck's "
                                  "device copy of its inputs)" for n in changed]
        return runs


def _failure(exc: Exception, session: Any) -> CandidateFailure:
    """The candidate's failure, its status read from MLX's message."""
    text = str(exc)
    if any(n in text for n in _LAUNCH_REFUSED):
        sizes = ", ".join(f"{launch['kernel']}: threadgroup {math.prod(launch['threadgroup'])} threads, "
                          f"grid {launch['grid']}, shared memory {launch.get('shared_memory') or 0} bytes"
                          for launch in session.launches)
        return CandidateFailure("error", (
            f"the device refused the launch configuration ({sizes}). Limits: at most 1024 threads per "
            "threadgroup, fewer when registers per thread x threads exceed a multiprocessor's 65536 "
            "registers (CUDA) or the pipeline's maxTotalThreadsPerThreadgroup (Metal); dynamic shared "
            f"memory up to the device's per-block maximum; grid extents within the device's. MLX said: {text}"))
    if _breaks_the_context(text):
        # A sticky CUDA error leaves this process's device context unusable: report the crash and have the
        # Rust side start a fresh worker, so the next candidate is not blamed.
        return CandidateFailure("crash", text, restart_worker=True)
    if _looks_like_compile_error(text):
        return CandidateFailure("compile_error", text)
    return CandidateFailure("error", text)



def _host(m: Any, a: Any, dtype: str) -> np.ndarray:
    """An array's current device contents on the host, bfloat16 widened exactly to float32: copied as its
    16-bit patterns (half the bytes of a float32 copy, and no conversion on the device) and widened here,
    which is exact (a bfloat16 is the top half of the float32 of the same value)."""
    if dtype == "bfloat16":
        bits = np.array(a.view(m.uint16))
        # One pass into the result (a 33M-element output: 26 ms here, against 100 ms for astype then shift).
        wide = np.empty(bits.shape, dtype=np.uint32)
        np.left_shift(bits, 16, out=wide, dtype=np.uint32)
        return wide.view(np.float32)
    return np.array(a)


def _refill(m: Any, target: dict[str, Any], fresh: dict[str, Any], host: Mapping[str, np.ndarray]) -> bool:
    """Writes `host` (the contents of `fresh`, as the device arrays' element bits: `_host_bits`) into the
    memory of `target`'s arrays, in place, and confirms on the device that the kernel will see `fresh`'s
    contents there. False (nothing relied on) where MLX hands out copies, or the two do not match."""
    try:
        for n, a in target.items():
            if a.shape != fresh[n].shape or a.dtype != fresh[n].dtype:
                return False
            # numpy has no bfloat16: those arrays are written as their 16-bit patterns.
            dst = a.view(m.uint16) if a.dtype == m.bfloat16 else a
            m.eval(dst)
            view = np.array(dst, copy=False)  # raises where a copy would be needed
            if not view.flags.writeable or view.shape != host[n].shape or view.dtype != host[n].dtype:
                return False
            view[...] = host[n]
        m.synchronize()
        # Compared on the default device (the GPU where there is one), which reads what a kernel would read.
        return all(_same_on_device(m, [(target[n], fresh[n]) for n in target]))
    except Exception:
        return False


def _host_bits(a: np.ndarray, dtype: str) -> np.ndarray:
    """A host input as its device array's elements: bfloat16 values (held as float32 on the host, each exactly
    a bfloat16) as their 16-bit patterns, the top half of their float32 bits; other dtypes as they are."""
    if dtype == "bfloat16":
        return (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(a)


def _bits(m: Any, a: Any) -> Any:
    """An array's elements as unsigned integers of the same width: equal exactly when bit for bit equal (NaN
    payloads and signed zeros included)."""
    width = {1: m.uint8, 2: m.uint16, 4: m.uint32, 8: m.uint64}.get(a.itemsize)
    return a.view(width) if width is not None else a


def _same_on_device(m: Any, pairs: Sequence[tuple[Any, Any]]) -> list[bool]:
    """For each pair of device arrays, whether they are bit for bit equal, computed on the device (one
    evaluation for all) so that neither crosses to the host."""
    same = [m.all(m.equal(_bits(m, a), _bits(m, b))) for a, b in pairs]
    m.eval(same)
    return [bool(x.item()) for x in same]


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
