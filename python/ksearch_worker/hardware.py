"""What the CPU is and what it can do at best: the roofline the Rust side compares candidates with."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import numpy as np

FALLBACK_CACHE_BYTES = 8 << 20
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _sysctl(name: str) -> str | None:
    """macOS has no /proc or /sys; sysctl answers there."""
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _sysctl("machdep.cpu.brand_string") or platform.processor() or platform.machine()


def cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _parse_size(text: str) -> int:
    text = text.strip()
    if text and text[-1].upper() in _UNITS:
        return int(text[:-1]) * _UNITS[text[-1].upper()]
    return int(text)


@functools.cache
def cache_bytes() -> int:
    """The largest cache of cpu0, usually the last level."""
    sizes: list[int] = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        with contextlib.suppress(OSError, ValueError):
            sizes.append(_parse_size(path.read_text()))
    if not sizes:
        for name in ("hw.l3cachesize", "hw.perflevel0.l2cachesize", "hw.l2cachesize"):
            value = _sysctl(name)
            if value and value.isdigit() and int(value) > 0:
                sizes.append(int(value))
    return max(sizes, default=FALLBACK_CACHE_BYTES)


# The instruction-set extensions a kernel writer chooses code paths by (x86 and Arm names as the kernel
# reports them in /proc/cpuinfo).
_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
              "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
              "asimd", "asimdhp", "asimddp", "fphp", "sve", "sve2", "bf16", "i8mm", "sme")


def isa_extensions() -> list[str]:
    """The SIMD and matrix extensions of cpu0, in the order of _ISA_FLAGS (empty where not readable)."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags.update(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    if not flags and platform.system() == "Darwin":
        # Apple Silicon: every core has NEON (asimd) with half precision; sysctl names the rest.
        flags.update({"asimd", "asimdhp"})
        for name, flag in (("hw.optional.arm.FEAT_BF16", "bf16"), ("hw.optional.arm.FEAT_I8MM", "i8mm"),
                           ("hw.optional.arm.FEAT_SME", "sme")):
            if _sysctl(name) == "1":
                flags.add(flag)
    return [f for f in _ISA_FLAGS if f in flags]


def caches() -> list[dict[str, Any]]:
    """cpu0's caches by level: level, type, size in bytes, and how many logical CPUs share each."""
    out: list[dict[str, Any]] = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        entry: dict[str, Any] = {"level": level, "type": kind, "bytes": size}
        with contextlib.suppress(OSError, ValueError):
            shared = (index / "shared_cpu_list").read_text().strip()
            entry["shared_by"] = sum(int(b) - int(a) + 1 if "-" in part else 1
                                     for part in shared.split(",") if part
                                     for a, _, b in [part.partition("-")])
        if kind != "Instruction":
            out.append(entry)
    return out


def _best_of(fn: Any, max_runs: int, max_s: float) -> float:
    """Fastest of up to max_runs calls (at least 2), stopping early after max_s."""
    fn()  # first touch and lazy initialisation
    best = float("inf")
    start = time.perf_counter()
    for i in range(max_runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if i >= 1 and time.perf_counter() - start > max_s:
            break
    return best


def peak_bandwidth_gbs() -> float:
    """Memory bandwidth of a large copy, counting the bytes read and the bytes written."""
    nbytes = min(max(4 * cache_bytes(), 64 << 20), 256 << 20)
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    seconds = _best_of(lambda: np.copyto(dst, src), 8, 0.3)
    return 2 * src.nbytes / seconds / 1e9


FMA_CHAINS, FMA_LANES = 12, 16  # as in peak_fma.c


def compiled_peaks(compiler: tuple[str, ...], flags: tuple[str, ...]) -> tuple[float | None, float | None]:
    """Single-core float32 FMA rate (GFLOP/s) and read bandwidth (GB/s), measured with peak_fma.c built
    like a kernel; None where it won't build."""
    source = Path(__file__).with_name("peak_fma.c")
    with tempfile.TemporaryDirectory(prefix="ksearch-peak-") as tmp:
        lib_path = Path(tmp) / "peak.so"
        try:
            proc = subprocess.run([*compiler, *flags, str(source), "-o", str(lib_path)],
                                  capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None, None
        if proc.returncode != 0:
            return None, None
        lib = ctypes.CDLL(str(lib_path))
        fma = lib.ksearch_fma_peak
        fma.argtypes = [ctypes.c_long]
        fma.restype = ctypes.c_float
        iters = 2_000_000
        seconds = _best_of(lambda: fma(iters), 5, 0.3)
        gflops = 2 * FMA_CHAINS * FMA_LANES * iters / seconds / 1e9
        read = lib.ksearch_read_peak
        read.argtypes = [ctypes.c_void_p, ctypes.c_long]
        read.restype = ctypes.c_float
        x = np.ones(min(max(4 * cache_bytes(), 64 << 20), 256 << 20) // 4, dtype=np.float32)
        seconds = _best_of(lambda: read(x.ctypes.data, x.size), 6, 0.3)
        read_gbs = x.nbytes / seconds / 1e9
    return gflops, read_gbs


def blas_gflops() -> float:
    """Single-thread float32 matmul rate (BLAS is held to one thread; see __init__)."""
    n = 1024
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    seconds = _best_of(lambda: np.matmul(a, b, out=c), 5, 0.3)
    return 2 * n**3 / seconds / 1e9


PEAK_KEYS = ("peak_bandwidth_gbs", "peak_gflops")


def remembered_peaks(name: str, remembered: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The peaks the Rust side remembers for a device of this name (measured on it several times before,
    the best kept), or None: then they are measured now."""
    entry = (remembered or {}).get(name)
    if not isinstance(entry, dict):
        return None
    peaks = {k: entry.get(k) for k in PEAK_KEYS}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in peaks.values()):
        return None
    return {k: float(v) for k, v in peaks.items()}


@functools.cache
def measured_peaks(compiler: tuple[str, ...], flags: tuple[str, ...]) -> dict[str, Any]:
    """The peaks measured now (about a second). The compute peak is the larger of an FMA loop built with
    the kernels' own compiler and flags and a BLAS matmul, so a kernel that is genuinely fast cannot land
    above it."""
    blas = blas_gflops()
    fma, read = compiled_peaks(compiler, (*flags, "-shared", "-fPIC")) if compiler else (None, None)
    copy = peak_bandwidth_gbs()
    return {
        "peak_bandwidth_gbs": round(max(copy, read or 0.0), 2),
        "peak_bandwidth_copy_gbs": round(copy, 2),
        "peak_bandwidth_read_gbs": round(read, 2) if read else None,
        "peak_gflops": round(max(blas, fma or 0.0), 2),
        "peak_gflops_blas": round(blas, 2),
        "peak_gflops_fma": round(fma, 2) if fma else None,
    }


def describe(compiler: tuple[str, ...] = ("cc",), flags: tuple[str, ...] = (),
             remembered: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `hardware` object of the hello reply: the peaks remembered for this CPU, else measured now
    (`peaks` says which)."""
    name = cpu_name()
    known = remembered_peaks(name, remembered)
    return {
        "kind": "cpu",
        "name": name,
        "cores": cores(),
        "cache_bytes": cache_bytes(),
        **(known if known is not None else measured_peaks(compiler, flags)),
        "peaks": "remembered" if known is not None else "measured",
        "machine": platform.machine(),
        "system": platform.system(),
        "isa": isa_extensions(),
        "caches": caches(),
        # Kernels run single-threaded (one call per launch), so the peaks are one core's.
        "peak_scope": "one core",
    }


# -- NVIDIA GPUs (the mlx-cuda and cuda targets) ----------------------------------------------------------

def nvidia_smi() -> dict[str, Any]:
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
    info.update(cuda_device_attributes())
    return info


# CUdevice_attribute numbers (cuda.h) of what a kernel writer sizes tiles and grids by.
_CUDA_ATTRIBUTES = {"sms": 16, "l2_cache_bytes": 38, "compute_capability_major": 75,
                    "compute_capability_minor": 76, "shared_memory_per_sm_bytes": 81,
                    "shared_memory_per_block_optin_bytes": 97, "registers_per_sm": 82}


def cuda_device_attributes() -> dict[str, Any]:
    """The first GPU's multiprocessor count, compute capability, L2 and shared memory sizes, from the
    driver API (nvidia-smi reports none of them)."""
    import ctypes

    out: dict[str, Any] = {}
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, value = ctypes.c_int(), ctypes.c_int()
        if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0):
            return out
        for name, attribute in _CUDA_ATTRIBUTES.items():
            if not cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, dev):
                out[name] = int(value.value)
    except (OSError, AttributeError):
        return out
    if "compute_capability_major" in out and "compute_capability_minor" in out:
        out["compute_capability"] = f"{out.pop('compute_capability_major')}.{out.pop('compute_capability_minor')}"
    return out
