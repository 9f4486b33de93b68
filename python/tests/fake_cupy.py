"""A stand-in for the part of CuPy the cuda target uses, on numpy, for machines without an NVIDIA GPU.

Device arrays are numpy arrays (views stay views, so a guard region is real memory next to an array); a
compiled function is looked up by the kernel name inside its lowered name among the Python functions a test
registers (`KERNELS`), and called with the device arrays and scalars in launch order. Streams run everything at
once; events read the host clock. What is under test is the target's own code around the launches: the
checks, guards, timing entries, rechecks; the modules themselves are compiled by the real NVRTC in the jail.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__version__ = "fake"
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
float16, float32, int32 = np.float16, np.float32, np.int32

# kernel name -> fn(args, blocks, threads, shared_mem)
KERNELS: dict[str, Callable[..., None]] = {}
LAUNCHES: list[tuple[str, tuple[int, int, int], tuple[int, int, int], int]] = []


class CUDADriverError(RuntimeError):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ndarray:  # noqa: N801 - CuPy's name
    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    size = property(lambda self: self.a.size)
    nbytes = property(lambda self: self.a.nbytes)
    ndim = property(lambda self: self.a.ndim)

    def __getitem__(self, idx: Any) -> ndarray:
        return ndarray(self.a[idx])

    def __setitem__(self, idx: Any, value: Any) -> None:
        self.a[idx] = value.a if isinstance(value, ndarray) else value

    def view(self, dtype: Any) -> ndarray:
        return ndarray(self.a.view(dtype))

    def reshape(self, *shape: Any) -> ndarray:
        return ndarray(self.a.reshape(*shape))

    def astype(self, dtype: Any) -> ndarray:
        return ndarray(self.a.astype(dtype))

    def fill(self, value: Any) -> None:
        self.a.fill(value)

    def get(self, stream: Any = None) -> np.ndarray:
        return self.a.copy()

    def set(self, arr: np.ndarray, stream: Any = None) -> None:
        arr = np.asarray(arr)
        if arr.shape != self.a.shape or arr.dtype != self.a.dtype:  # as CuPy refuses it
            raise ValueError(f"set: {arr.shape} {arr.dtype} into {self.a.shape} {self.a.dtype}")
        self.a[...] = arr

    def all(self) -> ndarray:
        return ndarray(np.asarray(self.a.all()))

    def __bool__(self) -> bool:
        return bool(self.a)

    def __eq__(self, other: object) -> ndarray:  # type: ignore[override]
        return ndarray(self.a == (other.a if isinstance(other, ndarray) else other))

    def __mul__(self, other: Any) -> ndarray:
        return ndarray(self.a * (other.a if isinstance(other, ndarray) else other))

    def __mod__(self, other: Any) -> ndarray:
        return ndarray(self.a % other)

    def __add__(self, other: Any) -> ndarray:
        return ndarray(self.a + (other.a if isinstance(other, ndarray) else other))

    def __iadd__(self, other: Any) -> ndarray:
        self.a += other
        return self


class OutOfMemoryError(MemoryError):
    pass


def empty(shape: Any, dtype: Any = np.float32) -> ndarray:
    if int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize > 1 << 30:  # the fake device's memory
        raise OutOfMemoryError(f"Out of memory allocating {int(np.prod(shape))} elements")
    return ndarray(np.empty(shape, dtype=dtype))


def zeros(shape: Any, dtype: Any = np.float32) -> ndarray:
    return ndarray(np.zeros(shape, dtype=dtype))


def ones(shape: Any, dtype: Any = np.float32) -> ndarray:
    # Broadcast, not allocated: the peaks' probes ask for a GiB, and nothing here measures them.
    return ndarray(np.broadcast_to(np.ones(1, dtype=dtype), shape))


def empty_like(x: ndarray) -> ndarray:
    return ndarray(np.broadcast_to(np.zeros(1, dtype=x.dtype), x.shape))


def asarray(x: Any) -> ndarray:
    return ndarray(np.array(x, copy=True))


def arange(n: int, dtype: Any = None) -> ndarray:
    return ndarray(np.arange(n, dtype=dtype))


def sum(x: ndarray) -> ndarray:  # noqa: A001 - CuPy's name
    return ndarray(np.asarray(x.a.sum(dtype=x.a.dtype)))


def stack(xs: Sequence[ndarray]) -> ndarray:
    return ndarray(np.stack([x.a for x in xs]))


def concatenate(xs: Sequence[ndarray]) -> ndarray:
    return ndarray(np.concatenate([x.a for x in xs]))


def copyto(dst: ndarray, src: ndarray) -> None:
    pass  # the bandwidth probe's copy: no device, nothing to measure


def matmul(a: ndarray, b: ndarray) -> ndarray:
    # The compute probe's product (8192 squared in float16, which numpy has no fast path for): not computed.
    return ndarray(np.broadcast_to(np.zeros(1, dtype=a.dtype), (a.shape[0], b.shape[1])))


class _Function:
    def __init__(self, name: str, fn: Callable[..., None]) -> None:
        self.name, self.fn = name, fn
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid: tuple[int, int, int], block: tuple[int, int, int], args: tuple[Any, ...],
                 shared_mem: int = 0) -> None:
        LAUNCHES.append((self.name, tuple(grid), tuple(block), shared_mem))  # type: ignore[arg-type]
        self.fn(list(args), grid, block, shared_mem)


class RawModule:
    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self.code = f.read()
        assert self.code.startswith(b"\x7fELF"), "NVRTC's cubin is an ELF file"

    def get_function(self, lowered: str) -> _Function:
        for name, fn in sorted(KERNELS.items(), key=lambda kv: -len(kv[0])):
            if f"{len(name)}{name}" in lowered:  # the Itanium mangling of the kernel's name
                return _Function(name, fn)
        raise CUDADriverError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {lowered}")


class RawKernel:
    """The worker's own kernels (the gate): nothing to hold back here, launches run at once."""

    def __init__(self, code: str, name: str) -> None:
        self.name = name

    def compile(self) -> None:
        pass

    def __call__(self, grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
        pass


class _Pinned(bytearray):
    ptr = 0


class _Stream:
    ptr = 0

    def __init__(self, non_blocking: bool = False) -> None:
        pass

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def synchronize(self) -> None:
        pass


class _Event:
    t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass


class _Device:
    id = 0


class _Runtime:
    @staticmethod
    def getDeviceCount() -> int:  # noqa: N802 - CuPy's name
        return 1

    @staticmethod
    def getDeviceProperties(device: int) -> dict[str, Any]:  # noqa: N802 - CuPy's name
        return {"name": b"Fake H200", "major": 9, "minor": 0, "multiProcessorCount": 132, "l2CacheSize": 1 << 20,
                "totalGlobalMem": 1 << 30, "sharedMemPerBlockOptin": 227 << 10}


class _Nvrtc:
    @staticmethod
    def getVersion() -> tuple[int, int]:  # noqa: N802 - CuPy's name
        return (13, 0)


class cuda:  # noqa: N801 - CuPy's module
    Stream = _Stream
    Event = _Event
    Device = _Device
    runtime = _Runtime
    nvrtc = _Nvrtc

    @staticmethod
    def get_elapsed_time(a: _Event, b: _Event) -> float:
        return (b.t - a.t) * 1e3

    @staticmethod
    def alloc_pinned_memory(n: int) -> _Pinned:
        return _Pinned(n)
