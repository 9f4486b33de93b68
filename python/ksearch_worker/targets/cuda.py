"""The cuda target: whole CUDA kernels, compiled by NVRTC in the jail and launched through CuPy, no MLX.

A candidate's kernel files are CUDA C++ holding `__global__` functions; the plan's launches name them. Each
launch is one module: the kernel's header (when the plan names one) then its file, every file of the
candidate includable by name, instantiated by the name expression `kernel<template values..., type
arguments...>` (`name_expression`). NVRTC runs in jailed children (`nvrtc.compile_jailed`: unprivileged,
reading only the system and the CUDA headers, writing nothing), all of a candidate's modules at once, for
the device's own architecture (`sm_90a` on Hopper, so wgmma, TMA and clusters are there). The worker loads
the cubins with the driver and launches each call on a stream of its own:

- parameters: the launch's inputs (`const T*`), outputs (`T*`) and scalars (`int`, by value), in order;
- ceil(grid / threadgroup) blocks of `threadgroup` threads (the plan's grid counts threads, as on every GPU
  target), with the launch's dynamic shared memory;
- outputs the plan gives an `init_value` are filled with it first, inside the call (as MLX does).

Checks run on arrays each allocated with guard bytes before and after it (a write past either end is
caught), outputs and buffers filled with all-ones bytes first (NaN in every float type, so an element never
written fails), inputs compared byte for byte afterwards, the first set run twice.

Timing: a sample is a run of calls between two CUDA events on the worker's stream, held behind a gate kernel
until every call is enqueued, so the device runs them back to back and the host's cost of launching is not
the candidate's. Calls on one stream cannot overlap (each launch starts when the one before has finished):
the chain of dependent launches the MLX targets build with links comes with the stream here. Each call
reads its own input set where memory allows (the plan's sets rotate through more than the L2 cache holds) and
writes one of two output groups in turn, so the calls drawn for comparison meet what every call meets (a kernel
that skips its work when its output already holds something, or at an address it saw, is caught there): their
outputs are copied aside right after them, between events whose span is taken off the sample.
After timing, fresh inputs are written where timing ran and checked (`recheck`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import hardware, jail, nvrtc
from ..errors import WorkerError
from ..log import say
from ..pool import round_bf16
from ..timing import Batches, Measurement, TimingConfig, measure
from . import RECHECK_SETS, BaselineUnavailable, CandidateFailure, CheckRun, TimedRunWrong, sets_beyond_cache

# CuPy is imported lazily: a worker for another target must not need it.
_cupy: Any = None


def _cp() -> Any:
    global _cupy
    if _cupy is None:
        try:
            import cupy
        except ImportError as exc:
            raise WorkerError("backend_unavailable", f"the cuda target needs CuPy ({exc}); the managed environment "
                              "installs it from python/requirements-cuda.txt, or pass --python with one that has "
                              "it") from None
        _cupy = cupy
    return _cupy


# Each element type as a kernel names it (cuda_fp16.h and cuda_bf16.h for the 16-bit floats).
CUDA_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
              "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
              "uint8": "unsigned char", "uint32": "unsigned int", "bool": "bool"}
# Guard bytes before and after each checked array; 256 keeps the array itself 256-byte aligned, as a
# fresh allocation is.
GUARD = 256
GUARD_BYTE = 0xA5
# NVRTC options besides the architecture and include paths.
OPTIONS = ["--std=c++17"]
# The gate holds a sample's calls back while they are enqueued; past this many launches the driver's queue
# could fill (the host would then wait on a held device): such samples run ungated.
GATE_MAX_LAUNCHES = 512
# A gate opens by itself after about this many clock cycles (a second or so), whatever the host does.
GATE_CYCLES = 2_000_000_000
_GATE = r"""
extern "C" __global__ void ksearch_gate(volatile int* flag, long long limit) {
  const long long start = clock64();
  while (*flag == 0 && clock64() - start < limit) {}
}
"""
# A variable of the module's own that kernels can write: state that outlives a call, so such a module is
# never shared between candidates.
_MODULE_STATE = re.compile(r"\b(__managed__|__device__\b[^;{}()]*[;=\[])")
# CUDA error codes that leave the context unusable (driver_types.h, CUDA 13): illegal address, launch timeout,
# hardware stack error, illegal instruction, misaligned address, invalid address space, invalid PC, launch
# failure, cooperative launch too large, contained, tensor memory leak; 710 is a device-side assert.
_STICKY_CODES = {700, 702, 710, 714, 715, 716, 717, 718, 719, 720, 226, 721}
_LAUNCH_REFUSED = ("too many resources requested", "invalid configuration argument", "OUT_OF_RESOURCES",
                   "INVALID_VALUE", "invalid argument")
_STICKY = ("illegal memory access", "illegal address", "unspecified launch failure", "illegal instruction",
           "misaligned address", "device-side assert", "hardware stack error", "LAUNCH_FAILED",
           "CUDA_ERROR_ILLEGAL", "launch timed out", "LAUNCH_TIMEOUT", "MISALIGNED", "ASSERT")


# -- the plan as launches (no device needed) -------------------------------------------------------------

def name_expression(kernel: str, launch: Mapping[str, Any]) -> str:
    """The function a launch calls: the kernel, instantiated with the launch's template values in the plan's
    order (`template_order`; `template` is keyed by name) then its type arguments (the dtypes of the tensors
    they name) in the order of their names."""
    template = launch.get("template") or {}
    order = list(launch.get("template_order") or template)
    args = [str(int(template[n])) for n in order]
    types = launch.get("type_args") or {}
    args += [CUDA_TYPES[str(types[n])] for n in sorted(types)]
    return f"{kernel}<{', '.join(args)}>" if args else kernel


def blocks(grid: Sequence[int], threadgroup: Sequence[int]) -> tuple[int, int, int]:
    """Blocks per dimension: the plan's grid counts threads, the device launches whole blocks."""
    g = [int(x) for x in grid]
    t = [int(x) for x in threadgroup]
    if len(g) != 3 or len(t) != 3 or min(t) < 1 or min(g) < 0:
        raise CandidateFailure("invalid", f"grid {g} and threadgroup {t}: three extents each, threadgroup at least 1")
    return (-(-g[0] // t[0]), -(-g[1] // t[1]), -(-g[2] // t[2]))


# Every module starts with the 16-bit float types' headers: `type_args` may name __half and __nv_bfloat16.
PRELUDE = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"


def module_source(spec: Mapping[str, Any]) -> str:
    """What NVRTC compiles for one kernel: the prelude, its header where the plan names one, then its file, with
    line numbers that point into the file."""
    head = f'#include "{spec["header_name"]}"\n' if spec.get("header_name") else ""
    return f'{PRELUDE}{head}#line 1 "{spec["source_name"]}"\n{spec["source"]}'


def scalar_args(launch: Mapping[str, Any]) -> list[np.int32]:
    """The launch's scalars as the kernel receives them: `int`, by value."""
    out = []
    for s in launch.get("scalars") or []:
        v = int(s)
        if not -(1 << 31) <= v < (1 << 31):
            raise CandidateFailure("invalid", f"launch of {launch['kernel']}: scalar {v} does not fit the `int` "
                                              "a cuda kernel receives")
        out.append(np.int32(v))
    return out


def device_dtype(name: str) -> np.dtype:
    """How an array of `name` is held on the device: bfloat16 as its 16-bit patterns."""
    if name not in CUDA_TYPES:
        raise WorkerError("unsupported_dtype", f"the cuda target has no dtype {name!r}")
    return np.dtype("uint16") if name == "bfloat16" else np.dtype(name)


def to_device_layout(a: np.ndarray, name: str) -> np.ndarray:
    """A host array in the device's representation: bfloat16 values (held as float32 by the pool, already
    rounded to bfloat16) become their top 16 bits, exactly."""
    if name == "bfloat16":
        return (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(a, dtype=device_dtype(name))


def from_device_layout(a: np.ndarray, name: str) -> np.ndarray:
    """Device bytes back as the host compares them: bfloat16 widened exactly to float32."""
    if name == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a


def fill_bits(value: float, name: str) -> Any:
    """`value` as an element of `name` on the device (bfloat16: its bit pattern, rounded to nearest even)."""
    if name == "bfloat16":
        return np.uint16(round_bf16(np.array([value], dtype=np.float32)).view(np.uint32)[0] >> 16)
    return np.dtype(name).type(value)


# -- compiling ---------------------------------------------------------------------------------------------

@dataclass
class _Build:
    kernels: dict[str, dict[str, Any]]  # name -> {source, source_name, header, header_name}
    files: dict[str, str]  # every file of the candidate, includable by name
    modules: dict[str, str] = field(default_factory=dict)  # name expression -> module id


@dataclass
class _Module:
    function: Any  # cupy.RawKernel of the lowered name
    lowered: str
    max_shared: int = 0  # dynamic shared memory the function was last allowed


@functools.cache
def include_paths() -> list[str]:
    """Where NVRTC finds the CUDA headers (cuda_fp16.h, cuda_bf16.h, CCCL): the toolkit's, then the nvidia
    wheels' beside this interpreter."""
    found: list[str] = []
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            for sub in ("include", "include/cccl", "targets/x86_64-linux/include", "targets/sbsa-linux/include"):
                p = Path(home) / sub
                if p.is_dir() and str(p) not in found:
                    found.append(str(p))
    for site in sys.path:
        for pattern in ("nvidia/cu*/include", "nvidia/cuda_runtime/include", "nvidia/cuda_nvrtc/include",
                        "nvidia/cuda_cccl/include"):
            for p in sorted(Path(site).glob(pattern)) if site and Path(site).is_dir() else []:
                if p.is_dir() and str(p) not in found:
                    found.append(str(p))
    return found


@functools.cache
def library() -> str | None:
    """The libnvrtc the jailed children load: one this process has mapped (CuPy's), a wheel's beside this
    interpreter, or whichever the dynamic linker finds."""
    mapped = nvrtc._mapped("libnvrtc.so")
    if mapped:
        return mapped
    for site in sys.path:
        if site and Path(site).is_dir():
            for p in sorted(Path(site).glob("nvidia/cu*/lib/libnvrtc.so.*")) + \
                    sorted(Path(site).glob("nvidia/cuda_nvrtc/lib/libnvrtc.so.*")):
                if "builtins" not in p.name:
                    return str(p)
    return nvrtc._load_mapped("libnvrtc.so", ("libnvrtc.so.13", "libnvrtc.so.12"))


def compile_request(source: str, source_name: str, expression: str, files: Mapping[str, str], arch: str,
                    include: Sequence[str], lib: str) -> bytes:
    """What a jailed child compiles for one module (nvrtc.child_compile reads it)."""
    return json.dumps({"source": source, "name": source_name, "kernel": expression,
                       "headers": sorted(files.items()), "include": list(include), "arch": arch, "nvrtc": lib,
                       "max_bytes": nvrtc.MAX_MODULE_BYTES, "options": OPTIONS}).encode()


def arch_of(compute_capability: str | None) -> str | None:
    """NVRTC's architecture for a compute capability: `90a` for 9.0 (the architecture-specific features from
    Hopper on), `86` for 8.6."""
    major, _, minor = (compute_capability or "").partition(".")
    if not (major.isdigit() and minor.isdigit()):
        return None
    return f"{major}{minor}{'a' if int(major) >= 9 else ''}"


# -- the target --------------------------------------------------------------------------------------------

class CudaTarget:
    name = "cuda"
    # Outputs start as all-ones bytes: NaN in every float type, so any NaN the reference lacks is unwritten.
    poisons_with_plain_nan = True

    def __init__(self) -> None:
        self._builds: dict[str, _Build] = {}
        self._modules: dict[str, _Module] = {}
        self._failed: dict[str, str] = {}  # module id -> NVRTC's log
        self._dir = Path(tempfile.mkdtemp(prefix="ksearch-cuda-modules-"))
        self._scratch = Path(tempfile.mkdtemp(prefix="ksearch-cuda-nvrtc-"))
        self._stream: Any = None
        self._gate: Any = None
        self._flag: Any = None  # pinned host memory the gate reads
        # Device copies of the run's input sets by set id, kept between candidates (least recently used
        # dropped first), each with its fingerprint at upload.
        self._sets: OrderedDict[tuple[str, int, int], tuple[dict[str, Any], Any]] = OrderedDict()
        self._available: bool | None = None
        self._why = ""  # why the target cannot run here, once `runs_here` found it cannot
        self._props: dict[str, Any] | None = None

    # -- hello ------------------------------------------------------------------------------------
    def runs_here(self) -> bool:
        if self._available is None:
            try:
                self._available = _cp().cuda.runtime.getDeviceCount() > 0
                if not self._available:
                    self._why = "no CUDA device is visible to this worker"
            except WorkerError as exc:  # no CuPy
                self._available, self._why = False, exc.message
            except Exception as exc:  # no driver, or no device
                self._available, self._why = False, f"CuPy cannot reach a CUDA device: {type(exc).__name__}: {exc}"
        return self._available

    def _properties(self) -> dict[str, Any]:
        """The device's facts a kernel writer sizes by (asked of the runtime once per worker)."""
        if self._props is None:
            cp = _cp()
            self._props = self._read_properties(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id))
        return self._props

    @staticmethod
    def _read_properties(p: Mapping[str, Any]) -> dict[str, Any]:
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        return {"name": name, "compute_capability": f"{p['major']}.{p['minor']}", "sms": int(p["multiProcessorCount"]),
                "l2_cache_bytes": int(p["l2CacheSize"]), "memory_bytes": int(p["totalGlobalMem"]),
                "shared_memory_per_block_optin_bytes": int(p.get("sharedMemPerBlockOptin", 0))}

    def describe(self, remembered: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {"kind": "gpu", "target": self.name, "backend_available": self.runs_here()}
        lib = library()
        version = "unknown"
        if self.runs_here():
            cp = _cp()
            info.update(hardware.nvidia_smi())
            info.update(self._properties())
            info["cupy"] = cp.__version__
            known = hardware.remembered_peaks(str(info.get("name", "")), remembered)
            if known is not None:
                info.update(known)
            else:
                info["peak_bandwidth_gbs"] = round(self._bandwidth(), 1)
                info["peak_gflops"] = round(self._matmul_rate(), 1)
            info["peaks"] = "remembered" if known is not None else "measured"
            info["peak_scope"] = "whole device"
            try:
                major, minor = cp.cuda.nvrtc.getVersion()
                version = f"{major}.{minor}"
            except Exception:
                pass
        arch = arch_of(info.get("compute_capability"))
        flags = [*OPTIONS, *([f"--gpu-architecture=sm_{arch}"] if arch else [])]
        return {"hardware": info, "compiler": {"name": "NVRTC (jailed)", "version": version, "flags": flags,
                                               "library": lib or "not found"}}

    def _events(self, fn: Callable[[], None], repeats: int) -> float:
        """The best device time of `fn` over `repeats` runs on the worker's stream."""
        cp = _cp()
        stream = self.stream()
        best = math.inf
        with stream:
            for _ in range(repeats):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record(stream)
                fn()
                b.record(stream)
                b.synchronize()
                best = min(best, cp.cuda.get_elapsed_time(a, b) / 1e3)
        return best

    def _bandwidth(self) -> float:
        """A device copy of 1 GiB, bytes read plus written, best of a few."""
        cp = _cp()
        with self.stream():
            x = cp.ones(256 << 20, dtype=cp.float32)
            y = cp.empty_like(x)
        seconds = self._events(lambda: cp.copyto(y, x), 6)
        return 2 * x.nbytes / seconds / 1e9

    def _matmul_rate(self) -> float:
        """cuBLAS's float16 matmul of 8192 squared (tensor cores), best of a few."""
        cp = _cp()
        n = 8192
        with self.stream():
            a = cp.ones((n, n), dtype=cp.float16)
            b = cp.ones((n, n), dtype=cp.float16)
        seconds = self._events(lambda: cp.matmul(a, b), 4)
        return 2 * n**3 / seconds / 1e9

    def stream(self) -> Any:
        """The worker's own stream (never the legacy default stream, which synchronises with others)."""
        if self._stream is None:
            self._stream = _cp().cuda.Stream(non_blocking=True)
        return self._stream

    def cache_bytes(self) -> int:
        try:
            return max(int(self._properties()["l2_cache_bytes"]), 1 << 20)
        except Exception:
            return 64 << 20

    # -- compile ----------------------------------------------------------------------------------
    def compile(self, key: str, dir: str, sources: Sequence[str], include: str | None) -> dict[str, Any]:
        raise WorkerError("bad_request", "the cuda target compiles through `compile` with `kernels` and `files`")

    def compile_kernels(self, key: str, kernels: Sequence[Mapping[str, Any]],
                        files: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Records the kernel files; each launch's module is compiled (in the jail) before its first call, for
        the template values and dtypes of that call."""
        start = time.perf_counter()
        k = {str(x["name"]): {"source": str(x["source"]), "source_name": str(x.get("source_name") or "kernel.cu"),
                              "header": str(x.get("header") or ""), "header_name": x.get("header_name") or None}
             for x in kernels}
        self._builds[key] = _Build(kernels=k, files={str(n): str(t) for n, t in (files or {}).items()})
        return {"status": "compiled", "log": "recorded; NVRTC compiles each launch's module before its first call",
                "seconds": time.perf_counter() - start, "command": "NVRTC in the jail", "compiler": "NVRTC"}

    def compiled(self, key: str) -> bool:
        return key in self._builds

    def _module_id(self, key: str, build: _Build, name: str, expression: str) -> str:
        """A module named by what it is made of (the kernel's file, header, every file it may include, the
        name expression, the options), so candidates sharing a kernel share its module; one with variables
        of its own is never shared (the build's key goes in too)."""
        spec = build.kernels[name]
        h = hashlib.sha256()
        parts = [module_source(spec), expression, json.dumps(sorted(build.files.items())), json.dumps(OPTIONS)]
        if any(_MODULE_STATE.search(t) for t in build.files.values()) or _MODULE_STATE.search(spec["source"]):
            parts.append(key)
        for part in parts:
            data = part.encode()
            h.update(len(data).to_bytes(8, "little") + data)
        return h.hexdigest()[:24]

    def ensure(self, key: str, launches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Every module these launches call, compiled in the jail at once where not yet loaded, then loaded.
        A module that does not compile is the candidate's compile error."""
        build = self._builds[key]
        wanted: dict[str, tuple[str, str]] = {}  # module id -> (kernel, expression)
        for launch in launches:
            name = str(launch["kernel"])
            expression = name_expression(name, launch)
            module = build.modules.get(expression) or self._module_id(key, build, name, expression)
            build.modules[expression] = module
            wanted[module] = (name, expression)
        jobs = {m: v for m, v in wanted.items() if m not in self._modules and m not in self._failed}
        start = time.perf_counter()
        if jobs:
            lib = library()
            arch = arch_of(self._properties()["compute_capability"]) if self.runs_here() else None
            if lib is None or arch is None:
                raise CandidateFailure("error", "the cuda target cannot compile here: "
                                       + ("libnvrtc was not found" if lib is None else "the GPU's architecture is unknown"))
            include = include_paths()
            read = [*include, os.path.dirname(lib)]

            def one(item: tuple[str, tuple[str, str]]) -> tuple[str, nvrtc.Compiled]:
                module, (name, expression) = item
                spec = build.kernels[name]
                request = compile_request(module_source(spec), spec["source_name"], expression, build.files, arch,
                                          include, lib)
                return module, nvrtc.compile_jailed(request, self._scratch, read, jail.env)

            workers = max(1, min(len(jobs), len(os.sched_getaffinity(0))))
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                done = dict(pool.map(one, jobs.items()))
            for module, d in done.items():
                if d.code is None and (d.infrastructure or d.jail_broken):
                    raise CandidateFailure("error", f"the jailed NVRTC failed (not the candidate's doing): {d.log[-2000:]}")
                if d.code is None:
                    self._failed[module] = d.log
                    continue
                path = self._dir / f"{module}.cubin"
                path.write_bytes(d.code)
                try:  # the driver loads the module here (its `__device__` arrays allocated, its symbols found)
                    function = _cp().RawModule(path=str(path)).get_function(d.lowered)
                except Exception as exc:
                    raise failure(exc, launches) from None
                self._modules[module] = _Module(function, d.lowered)
            say("modules compiled: " + ", ".join(f"{d.seconds:.2f} s {jobs[m][1][:80]}"
                                                  for m, d in sorted(done.items(), key=lambda kv: -kv[1].seconds)))
        for module, (_, expression) in wanted.items():
            if module in self._failed:
                raise CandidateFailure("compile_error", f"{expression}: {self._failed[module]}")
        return {"modules": len(wanted), "compiled": len(jobs), "seconds": time.perf_counter() - start}

    def precompile(self, key: str, builds: Sequence[Any]) -> dict[str, Any]:
        """Every module a candidate launches on these workloads, compiled at once before its first check; a
        compile error is kept for the run that meets it."""
        if key not in self._builds:
            raise WorkerError("not_compiled", f"key {key} has not been compiled by this worker")
        if not self.runs_here():
            return {"modules": 0, "compiled": 0}
        try:
            return self.ensure(key, [launch for b in builds for launch in b.launches])
        except CandidateFailure as exc:
            return {"modules": 0, "compiled": 0, "compile_error": exc.message[-4000:]}

    def function(self, key: str, launch: Mapping[str, Any]) -> _Module:
        return self._modules[self._builds[key].modules[name_expression(str(launch["kernel"]), launch)]]

    # -- the pipeline's hooks ---------------------------------------------------------------------
    def validate(self, r: Any) -> None:
        for b in [r.build, *([r.incumbent] if r.incumbent else [])]:
            for name in b.dtypes.values():
                device_dtype(name)

    def unavailable(self, r: Any, task: Any) -> dict[str, Any] | None:
        if not self.runs_here():
            raise WorkerError("backend_unavailable", f"cuda: {self._why}; the cuda target runs on a machine with an "
                              "NVIDIA GPU (translate the candidate for mlx-metal or mlx-cuda to run it elsewhere)")
        return None

    def finish(self, r: Any, result: dict[str, Any]) -> dict[str, Any]:
        """A candidate that left the device unusable (a fault surfacing after its last check) gets a fresh worker
        for the next request, and a pass does not stand."""
        broken = self.device_failure()
        if broken is not None:
            result["restart_worker"] = True
            if result.get("status") == "passed":
                result = {**result, "status": "crash", "timing": None, "baselines": {},
                          "message": f"the device failed after the candidate's calls: {broken}"}
        return result

    def device_failure(self) -> str | None:
        """Why the device can no longer run work, or None: a small copy on the stream and a synchronisation."""
        if not self.runs_here():
            return None
        cp = _cp()
        try:
            with self.stream():
                x = cp.zeros(16, dtype=cp.float32)
                x += 1
            self.stream().synchronize()
            if float(x[0].get()) != 1.0:
                return "a probe computed a wrong value"
        except Exception as exc:
            return str(exc)[:500]
        return None

    def session(self, build: Any, r: Any, task: Any) -> CudaSession:
        return CudaSession(self, build, task)

    def warm(self, layout: Any) -> None:
        """The gate kernel compiled (the worker's own, by CuPy in this process) before any candidate runs."""
        self.gate_kernel()

    def gate_kernel(self) -> Any:
        cp = _cp()
        if self._gate is None:
            self._gate = cp.RawKernel(_GATE, "ksearch_gate")
            self._gate.compile()  # now (in `prepare`), not at a candidate's first sample
            mem = cp.cuda.alloc_pinned_memory(4)
            self._flag = (mem, np.ndarray((1,), dtype=np.int32, buffer=mem))
        return self._gate

    # -- device input sets ------------------------------------------------------------------------
    def upload(self, arrays: Mapping[str, np.ndarray], dtypes: Mapping[str, str]) -> dict[str, Any]:
        cp = _cp()
        with self.stream():
            out = {n: cp.asarray(to_device_layout(a, dtypes[n])) for n, a in arrays.items()}
        self.stream().synchronize()
        return out

    def device_set(self, ident: tuple[str, int, int], arrays: Mapping[str, np.ndarray],
                   dtypes: Mapping[str, str]) -> dict[str, Any]:
        """The device copy of an input set, uploaded once and kept while device memory allows."""
        got = self._sets.get(ident)
        if got is not None:
            self._sets.move_to_end(ident)
            return got[0]
        dev = self.upload(arrays, dtypes)
        self._sets[ident] = (dev, fingerprint(dev))
        limit = self._sets_bytes()
        total = sum(_nbytes(d) for d, _ in self._sets.values())
        while total > limit and len(self._sets) > 1:
            _, (old, _) = self._sets.popitem(last=False)
            total -= _nbytes(old)
        return dev

    def _sets_bytes(self) -> int:
        """Device bytes of input sets kept between candidates: a quarter of the device's memory."""
        try:
            return self._properties()["memory_bytes"] // 4
        except Exception:
            return 4 << 30

    def changed_sets(self, idents: Sequence[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
        """The kept sets among `idents` whose contents differ from their upload (dropped: uploaded afresh when
        next asked for)."""
        changed = []
        for ident in dict.fromkeys(idents):
            got = self._sets.get(ident)
            if got is not None and fingerprint(got[0]) != got[1]:
                del self._sets[ident]
                changed.append(ident)
        return changed

    def forget(self, ident: tuple[str, int, int]) -> None:
        self._sets.pop(ident, None)

    # -- timing -----------------------------------------------------------------------------------
    def clocked(self, calls: Callable[[int, int], Any], launches_per_call: int) -> Callable[[int, int], float]:
        """`run(start, count)` of an entry: the calls between two events on the stream, held behind the gate
        while they are enqueued; the seconds between the events, less the spans between the pairs of events
        `calls` returns (work of the evaluator's own among the calls: copies of the compared calls' outputs)."""
        cp = _cp()
        stream = self.stream()
        gate = self.gate_kernel()
        mem, flag = self._flag
        pointer = np.uint64(mem.ptr)

        def run(start: int, count: int) -> float:
            gated = count * launches_per_call <= GATE_MAX_LAUNCHES
            before, after = cp.cuda.Event(), cp.cuda.Event()
            with stream:
                if gated:
                    flag[0] = 0
                    gate((1, 1, 1), (1, 1, 1), (pointer, np.int64(GATE_CYCLES)))
                before.record(stream)
                own: Any = ()
                try:
                    own = calls(start, count) or ()
                finally:
                    after.record(stream)
                    flag[0] = 1
            after.synchronize()
            spent = float(cp.cuda.get_elapsed_time(before, after))
            spent -= sum(float(cp.cuda.get_elapsed_time(a, b)) for a, b in own)
            return max(spent, 0.0) / 1e3

        return run

    def time(self, sessions: Sequence[CudaSession], plan: Any, verify: Any, cfg: TimingConfig,
             paired: bool) -> Measurement:
        """Each session's calls timed in samples on the device's clock (`clocked`), on the plan's sets."""
        first = sessions[0]
        changed_before = self.changed_sets(plan.ids)
        if changed_before:
            say(f"{len(changed_before)} kept input sets changed since upload, before this timing: uploaded afresh")
        dev = [self.device_set(i, s, first.dtypes) for i, s in zip(plan.ids, plan.sets, strict=True)]
        entries = [s.entry(dev, plan, verify, who) for s, who in zip(sessions, ("candidate", "incumbent"))]

        def grow(start: int, calls: int) -> int:
            last = plan.extend(start, calls)
            dev[:] = [self.device_set(i, s, first.dtypes) for i, s in zip(plan.ids, plan.sets, strict=True)]
            for e in entries:
                e.sets = len(dev)
            return last

        try:
            m = measure(entries, cfg, paired=paired, grow=grow)
        except (TimedRunWrong, CandidateFailure, WorkerError):
            raise
        except Exception as exc:
            raise failure(exc, first.launches) from None
        for s in sessions:
            s.timed_ids = list(plan.ids)
        changed = self.changed_sets(plan.ids)
        if changed:
            raise TimedRunWrong(f"a timed call changed its input sets while timed ({len(changed)} of {len(dev)} "
                                "sets no longer match their fingerprint)")
        return m

    def baseline_sets(self, layout: Any) -> int:
        """Input sets the baselines are timed on: enough to hold twice the L2 cache, at most 16."""
        return sets_beyond_cache(self.cache_bytes(), layout.input_bytes(), 16)

    def baseline_outputs(self, fn: Callable[..., Any], inputs: Mapping[str, np.ndarray], dims: dict[str, int],
                         layout: Any) -> dict[str, np.ndarray]:
        try:
            import torch
        except ImportError as exc:
            raise BaselineUnavailable(f"the cuda target's baselines take torch tensors; torch is missing: {exc}") \
                from None
        dtypes = {n: d for n, _, d in layout.inputs}
        tensors = {n: as_torch(torch, a, dtypes[n]) for n, a in self.upload(inputs, dtypes).items()}
        try:
            with torch.cuda.stream(torch.cuda.ExternalStream(self.stream().ptr)):
                got = dict(fn(tensors, dict(dims)))
            self.stream().synchronize()
            # Floating point widened to float32 on the device (exact from bfloat16 and float16), then copied.
            return {n: (t.float() if t.is_floating_point() else t).cpu().numpy() if torch.is_tensor(t) else t
                    for n, t in got.items()}
        except Exception as exc:
            # A library this machine lacks (FlashInfer's wheels, or the nvcc its JIT needs): named with why; one
            # that broke the device ends this worker.
            if sticky(exc) or self.device_failure() is not None:
                raise WorkerError("device_lost", f"a baseline left the device unusable: {exc}") from None
            raise BaselineUnavailable(f"{type(exc).__name__}: {exc}") from None

    def time_baselines(self, fns: Mapping[str, Callable[..., Any]], sets: Sequence[Mapping[str, np.ndarray]],
                       dims: dict[str, int], layout: Any, cfg: TimingConfig) -> dict[str, dict[str, Any]]:
        """Baselines (PyTorch or FlashInfer, on torch tensors) timed like the candidate, on sets of their own."""
        try:
            import torch
        except ImportError as exc:
            # Every baseline takes torch tensors: none can run here, and each says why.
            return {name: {"unavailable": f"it cannot run here: the cuda target's baselines take torch tensors; torch "
                                          f"is missing: {exc}"} for name in fns}
        dtypes = {n: d for n, _, d in layout.inputs}
        count = min(len(sets), self.baseline_sets(layout))
        dev = [self.upload(s, dtypes) for s in sets[:count]]
        tensors = [{n: as_torch(torch, a, dtypes[n]) for n, a in d.items()} for d in dev]
        stream = torch.cuda.ExternalStream(self.stream().ptr)
        out: dict[str, dict[str, Any]] = {}
        for name, fn in fns.items():
            def calls(start: int, n: int, fn: Callable[..., Any] = fn) -> None:
                with torch.cuda.stream(stream):
                    for i in range(start, start + n):
                        fn(dict(tensors[i % len(tensors)]), dict(dims))

            try:
                calls(0, 1)
                self.stream().synchronize()
            except Exception as exc:
                # A library this machine lacks (FlashInfer's wheels, or the nvcc its JIT needs): the baseline is
                # named with why, not timed; one that broke the device ends this worker.
                if sticky(exc) or self.device_failure() is not None:
                    raise WorkerError("device_lost", f"baseline {name} left the device unusable: {exc}") from None
                out[name] = {"unavailable": f"it cannot run here: {type(exc).__name__}: {exc}"}
                continue
            # A baseline's launches per call are unknown (a library's): its samples run ungated.
            entry = Batches(self.clocked(calls, GATE_MAX_LAUNCHES + 1), len(tensors), clocked=True)
            out[name] = measure([entry], cfg).stats[0]
        return out


def as_torch(torch: Any, a: Any, dtype: str) -> Any:
    """A CuPy array as a torch tensor on the same memory (bfloat16 from its 16-bit patterns)."""
    t = torch.from_dlpack(a)
    return t.view(torch.bfloat16) if dtype == "bfloat16" else t


def _nbytes(arrays: Mapping[str, Any]) -> int:
    return sum(int(a.nbytes) for a in arrays.values())


def fingerprint(arrays: Mapping[str, Any]) -> list[int]:
    """Two wrapping sums over each array's bytes as unsigned words (plain, and weighted by position modulo a
    prime), computed on the device: any change of a word changes them but for a crafted collision."""
    cp = _cp()
    parts = []
    for name in sorted(arrays):
        a = arrays[name]
        if not a.nbytes:
            continue
        width = next(w for w in (4, 2, 1) if int(a.nbytes) % w == 0)
        words = a.reshape(-1).view({4: cp.uint32, 2: cp.uint16, 1: cp.uint8}[width]).astype(cp.uint64)
        weights = cp.arange(words.size, dtype=cp.uint64) % 65521 + 1
        parts += [cp.sum(words), cp.sum(words * weights)]
    return [int(x) for x in cp.stack(parts).get()] if parts else []


def sticky(exc: Exception) -> bool:
    """Whether a CUDA error leaves this process's context unusable: by its code (the driver's and the runtime's
    share these numbers), else by its message."""
    return getattr(exc, "status", None) in _STICKY_CODES or any(n in f"{exc}" for n in _STICKY)


def failure(exc: Exception, launches: Sequence[Mapping[str, Any]]) -> CandidateFailure:
    """The candidate's failure, its status read from the driver's error."""
    text = f"{type(exc).__name__}: {exc}"
    if sticky(exc):
        # A sticky CUDA error leaves this process's context unusable: the crash is reported and the Rust side
        # starts a fresh worker, so the next candidate is not blamed.
        return CandidateFailure("crash", text, restart_worker=True)
    if any(n in text for n in _LAUNCH_REFUSED):
        sizes = ", ".join(f"{launch['kernel']}: threadgroup {launch['threadgroup']}, grid {launch['grid']}, shared "
                          f"memory {launch.get('shared_memory') or 0} bytes" for launch in launches)
        return CandidateFailure("error", f"the device refused the launch configuration ({sizes}). Limits: at most "
                                "1024 threads per block, fewer when registers per thread x threads exceed a "
                                "multiprocessor's 65536; dynamic shared memory up to the device's opt-in maximum "
                                f"per block. The driver said: {text}")
    return CandidateFailure("error", text)


@dataclass
class _Call:
    launch: Mapping[str, Any]
    module: _Module
    blocks: tuple[int, int, int]
    threads: tuple[int, int, int]
    shared: int
    scalars: list[np.int32]


class CudaSession:
    """One compiled candidate bound to one workload: its launches as calls on the worker's stream."""

    def __init__(self, target: CudaTarget, build: Any, task: Any) -> None:
        self.target, self.build = target, build
        self.launches: list[Mapping[str, Any]] = build.launches
        self.dtypes: dict[str, str] = build.dtypes
        self.shapes: dict[str, tuple[int, ...]] = build.shapes
        self.task_inputs = [n for n, _ in task.inputs]
        self.outputs: list[str] = list(task.outputs)
        self.buffers: list[str] = list(build.buffers)
        self.timed_ids: list[tuple[str, int, int]] = []
        self._calls: list[_Call] | None = None
        self._timing_buffers: dict[str, Any] | None = None
        self._ring: list[dict[str, Any]] = []
        self._checked_outputs: dict[int, dict[str, Any]] = {}

    def __enter__(self) -> CudaSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def calls(self) -> list[_Call]:
        """The launches as calls, their modules compiled and loaded first (all at once, in the jail)."""
        if self._calls is None:
            self.target.ensure(self.build.key, self.launches)
            out = []
            for launch in self.launches:
                module = self.target.function(self.build.key, launch)
                shared = int(launch.get("shared_memory") or 0)
                if shared > module.max_shared:
                    # The opt-in limit counts static and dynamic shared memory together, so any dynamic amount
                    # is allowed explicitly (48 KB of both is the default).
                    try:
                        module.function.max_dynamic_shared_size_bytes = shared
                    except Exception as exc:
                        raise failure(exc, self.launches) from None
                    module.max_shared = shared
                out.append(_Call(launch, module, blocks(launch["grid"], launch["threadgroup"]),
                                 tuple(int(t) for t in launch["threadgroup"]), shared, scalar_args(launch)))
            self._calls = out
        return self._calls

    def ready(self) -> bool:
        try:
            self.calls()
        except CandidateFailure:
            return False
        return True

    def close(self) -> None:
        self._timing_buffers = None
        self._ring = []
        self._checked_outputs = {}

    def _new(self, names: Sequence[str]) -> dict[str, Any]:
        cp = _cp()
        with self.target.stream(), too_big(self.shapes, self.dtypes, names):
            return {n: cp.empty(self.shapes[n], dtype=device_dtype(self.dtypes[n])) for n in names}

    def enqueue(self, env: Mapping[str, Any]) -> None:
        """Every launch of one call, in order, on the worker's stream (the caller holds it current)."""
        for c in self.calls():
            init = c.launch.get("init_value")
            if init is not None:
                for n in c.launch["outputs"]:
                    env[n].fill(fill_bits(float(init), self.dtypes[n]))
            if 0 in c.blocks:
                continue  # an empty grid runs nothing (CuPy would launch one block of it)
            args = [*(env[n] for n in c.launch["inputs"]), *(env[n] for n in c.launch["outputs"]), *c.scalars]
            c.module.function(c.blocks, c.threads, tuple(args), shared_mem=c.shared)

    def _run(self, env: Mapping[str, Any]) -> float:
        """One call, synchronised; its wall seconds."""
        stream = self.target.stream()
        t0 = time.perf_counter()
        try:
            with stream:
                self.enqueue(env)
            stream.synchronize()
        except CandidateFailure:
            raise
        except Exception as exc:
            raise failure(exc, self.launches) from None
        return time.perf_counter() - t0

    def _host(self, env: Mapping[str, Any], names: Sequence[str]) -> dict[str, np.ndarray]:
        return {n: from_device_layout(env[n].get(stream=self.target.stream()), self.dtypes[n]) for n in names}

    # -- checks -----------------------------------------------------------------------------------
    def check(self, inputs: Mapping[str, np.ndarray], twice: bool) -> CheckRun:
        """One call on guarded copies of `inputs`, outputs and buffers poisoned; with `twice`, again on the same
        inputs, the outputs compared bit for bit."""
        self.calls()
        names = [*self.task_inputs, *self.outputs, *self.buffers]
        with self.target.stream(), too_big(self.shapes, self.dtypes, names):
            guarded = Guarded(self.shapes, self.dtypes, names)
            guarded.write({n: inputs[n] for n in self.task_inputs})
        seconds = self._run(guarded.arrays)
        outputs = self._host(guarded.arrays, self.outputs)
        run = CheckRun(outputs=outputs, seconds=seconds)
        self._judge(run, guarded, inputs)
        if twice and not run.problems:
            with self.target.stream():
                guarded.poison([*self.outputs, *self.buffers])
            run.again_s = self._run(guarded.arrays)
            again = self._host(guarded.arrays, self.outputs)
            differ = [n for n in self.outputs if not np.array_equal(outputs[n].view(np.uint8), again[n].view(np.uint8))]
            if differ:
                run.problems.append(f"two runs on the same inputs gave different {', '.join(differ)} (a race, or "
                                    "state kept between calls)")
            self._judge(run, guarded, inputs)
        return run

    def _judge(self, run: CheckRun, guarded: Guarded, inputs: Mapping[str, np.ndarray]) -> None:
        for n in guarded.broken():
            if n not in run.overruns:
                run.overruns.append(n)
                run.problems.append(f"{n}: written outside its bounds (the guard bytes around it changed)")
        self._inputs_kept(run, guarded.arrays, inputs)

    def _inputs_kept(self, run: CheckRun, env: Mapping[str, Any], inputs: Mapping[str, np.ndarray]) -> None:
        """Each device input against what was written there, byte for byte in the device's layout."""
        stream = self.target.stream()
        for n in self.task_inputs:
            got = env[n].get(stream=stream)
            want = to_device_layout(inputs[n], self.dtypes[n])
            if not np.array_equal(want.view(np.uint8), got.view(np.uint8)) and n not in run.inputs_modified:
                run.inputs_modified.append(n)
                run.problems.append(f"input {n} modified by the kernel (inputs are read-only)")

    # -- timing -----------------------------------------------------------------------------------
    def entry(self, dev: list[dict[str, Any]], plan: Any, verify: Any, who: str) -> Batches:
        """The session's timed entry: call i runs on set i mod len(dev) and writes output group i mod 2, so a
        compared call meets what every call meets (outputs at the same two addresses, holding an earlier call's
        results): nothing tells it apart. Right after a compared call its outputs are copied aside, between two
        events whose span is taken off the sample, and compared after the sample. Intermediate buffers are the
        session's."""
        calls = self.calls()
        if self._timing_buffers is None:
            self._timing_buffers = self._new(self.buffers)
            self._ring = [self._new(self.outputs) for _ in range(2)]
        cp = _cp()

        def saved(index: int) -> dict[str, Any]:
            got = self._checked_outputs.get(index)
            if got is None:
                got = self._checked_outputs[index] = self._new(self.outputs)
            return got

        def run_calls(start: int, count: int) -> list[tuple[Any, Any]]:
            own = []
            for call in range(start, start + count):
                index = call % len(dev)
                outputs = self._ring[call % 2]
                self.enqueue({**dev[index], **self._timing_buffers, **outputs})
                if plan.compares(call, index):
                    a, b = cp.cuda.Event(), cp.cuda.Event()
                    a.record(self.target.stream())
                    keep = saved(index)
                    for n in self.outputs:
                        keep[n][...] = outputs[n]
                    b.record(self.target.stream())
                    own.append((a, b))
            return own

        def after(start: int, count: int) -> None:
            for call in range(start, start + count):
                index = call % len(dev)
                if plan.compares(call, index):
                    verify(index, self._host(saved(index), self.outputs), who)

        # Each call's launches: its kernels, a fill for every output with an init_value, and for a compared
        # call a copy of each output.
        launches = sum(1 + (len(c.launch["outputs"]) if c.launch.get("init_value") is not None else 0) for c in calls)
        launches += len(self.outputs)
        return Batches(self.target.clocked(run_calls, launches), len(dev), after=after, clocked=True)

    def recheck(self, inputs: Mapping[str, np.ndarray]) -> list[CheckRun]:
        """Fresh inputs written into the device sets timing ran on (a few of them), each call checked with the
        buffers timing used: results kept by address, stale outputs and kernels that stop working after many
        calls fail here."""
        if not self.timed_ids or self._timing_buffers is None:
            return []
        stream = self.target.stream()
        runs = []
        places = sorted(set(np.linspace(0, len(self.timed_ids) - 1, RECHECK_SETS).round().astype(int).tolist()))
        for where in places:
            ident = self.timed_ids[where]
            got = self.target._sets.get(ident)
            if got is None:
                continue  # dropped since (memory): nothing of timing's left there
            dev = got[0]
            with stream:
                for n in self.task_inputs:
                    dev[n].set(to_device_layout(inputs[n], self.dtypes[n]), stream=stream)
                out = self._ring[0]
                poison(out.values())
            self.target.forget(ident)  # no longer the set its id names
            seconds = self._run({**dev, **self._timing_buffers, **out})
            run = CheckRun(outputs=self._host(out, self.outputs), seconds=seconds, where=where)
            self._inputs_kept(run, dev, inputs)
            runs.append(run)
        return runs


@contextlib.contextmanager
def too_big(shapes: Mapping[str, Sequence[int]], dtypes: Mapping[str, str], names: Sequence[str]) -> Iterator[None]:
    """A plan whose arrays the device cannot hold is the candidate's `invalid` plan, with the sizes it asked for."""
    try:
        yield
    except Exception as exc:
        if "OutOfMemory" not in type(exc).__name__ and "out of memory" not in str(exc):
            raise
        asked = sum(math.prod(shapes[n]) * device_dtype(dtypes[n]).itemsize for n in names)
        biggest = max(names, key=lambda n: math.prod(shapes[n]) * device_dtype(dtypes[n]).itemsize)
        raise CandidateFailure("invalid", f"the device cannot hold the call's arrays ({asked / 2**30:.1f} GiB in all, "
                                          f"{biggest} the largest, shape {list(shapes[biggest])}): {exc}") from None


def poison(arrays: Any) -> None:
    """All-ones bytes (NaN in every float type, -1 in the integers) into device arrays, on the current stream."""
    for a in arrays:
        if a.nbytes:
            a.reshape(-1).view(_cp().uint8).fill(0xFF)  # flat first: a 0-d array has no byte view


class Guarded:
    """Device arrays each with GUARD bytes of GUARD_BYTE before and after it, inputs written, the rest
    poisoned: a write past either end of any of them is found by `broken`."""

    def __init__(self, shapes: Mapping[str, Sequence[int]], dtypes: Mapping[str, str], names: Sequence[str]) -> None:
        cp = _cp()
        self.dtypes = dtypes
        self.raw: dict[str, Any] = {}
        self.arrays: dict[str, Any] = {}
        for n in names:
            dt = device_dtype(dtypes[n])
            nbytes = math.prod(shapes[n]) * dt.itemsize
            raw = cp.empty(GUARD + nbytes + GUARD, dtype=cp.uint8)
            raw.fill(GUARD_BYTE)
            self.raw[n] = raw
            self.arrays[n] = raw[GUARD:GUARD + nbytes].view(dt).reshape(tuple(shapes[n]))
        self.poison(list(names))

    def write(self, host: Mapping[str, np.ndarray]) -> None:
        for n, a in host.items():
            self.arrays[n].set(to_device_layout(a, self.dtypes[n]))

    def poison(self, names: Sequence[str]) -> None:
        poison(self.arrays[n] for n in names)

    def broken(self) -> list[str]:
        """The arrays whose guard bytes changed."""
        out = []
        for n, raw in self.raw.items():
            nbytes = raw.size - 2 * GUARD
            guards = _cp().concatenate([raw[:GUARD], raw[GUARD + nbytes:]])
            if not bool((guards == GUARD_BYTE).all()):
                out.append(n)
        return out
