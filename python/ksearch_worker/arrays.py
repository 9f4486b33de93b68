"""Dtypes, poison values and guarded allocation shared by inputs, checks and timing."""

from __future__ import annotations

import itertools
import math
import mmap
import os
import sys
import tempfile
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import WorkerError

SUPPORTED_DTYPES = (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint32", "bool",
)
# Bytes after every array, filled with GUARD_BYTE: a kernel writing past its end is caught.
GUARD_LEN = 64
GUARD_BYTE = 0xA5
# Every array starts on a cache line, in checks and in timing copies alike, so a kernel that assumes
# alignment behaves the same in both.
ALIGN = 64
# bool has no spare value, so its poison is a byte that is neither 0 nor 1.
BOOL_POISON = 0xFF
# Float poison is a quiet NaN with a payload no arithmetic produces (inputs hold no NaN to propagate),
# so a NaN the kernel computed is told apart from an element it never wrote.
FLOAT_POISON_BITS: dict[int, np.unsignedinteger[Any]] = {
    2: np.uint16(0x7E5A), 4: np.uint32(0x7FC5A5A5), 8: np.uint64(0x7FF8A5A5A5A5A5A5),
}


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        raise WorkerError("unsupported_dtype", "bfloat16 has no numpy dtype; the cpu target cannot run it")
    if name not in SUPPORTED_DTYPES:
        raise WorkerError("unsupported_dtype", f"unknown dtype {name!r}; expected one of {', '.join(SUPPORTED_DTYPES)}")
    return np.dtype(name)


def poison_scalar(dtype: np.dtype) -> float | int:
    """NaN for floats; for integers an extreme value a correct kernel rarely writes."""
    if dtype.kind == "f":
        return math.nan
    if dtype.kind == "i":
        return int(np.iinfo(dtype).min)
    if dtype.kind == "u":
        return int(np.iinfo(dtype).max)
    return BOOL_POISON


def describe_poison(dtype: np.dtype) -> str:
    return "NaN poison" if dtype.kind == "f" else f"poison {poison_scalar(dtype)}"


def fill_poison(arr: np.ndarray) -> None:
    if arr.dtype.kind == "f":
        bits = FLOAT_POISON_BITS[arr.dtype.itemsize]
        arr.view(bits.dtype).fill(bits)
    elif arr.dtype == np.bool_:
        arr.view(np.uint8).fill(BOOL_POISON)
    else:
        arr.fill(poison_scalar(arr.dtype))


def poison_mask(arr: np.ndarray) -> np.ndarray:
    """Elements that still hold the poison (bit for bit)."""
    mask: np.ndarray
    if arr.dtype.kind == "f":
        bits = FLOAT_POISON_BITS[arr.dtype.itemsize]
        mask = arr.view(bits.dtype) == bits
    elif arr.dtype == np.bool_:
        mask = arr.view(np.uint8) == BOOL_POISON
    else:
        mask = arr == poison_scalar(arr.dtype)
    return mask


def as_float64(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == np.bool_:
        # Any nonzero byte is true in C; read the raw bytes so numpy does not reinterpret them.
        arr = arr.view(np.uint8) != 0
    return arr.astype(np.float64)


def alloc(shape: Sequence[int], dtype: np.dtype, *, poison: bool = True) -> np.ndarray:
    """A C-contiguous, ALIGN-aligned array followed by GUARD_LEN guard bytes (see `guard_intact`)."""
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + GUARD_LEN + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    raw[start + nbytes: start + nbytes + GUARD_LEN] = GUARD_BYTE
    arr = raw[start: start + nbytes].view(dtype).reshape(tuple(shape))
    if poison:
        fill_poison(arr)
    return arr


def guard_intact(arr: np.ndarray) -> bool:
    """True when the guard bytes after an `alloc` array were not overwritten (for the arrays of an
    `ArraySet`, its own `guard_intact` also covers empty ones)."""
    raw = arr
    while isinstance(raw.base, np.ndarray):
        raw = raw.base
    assert raw is not arr and raw.dtype == np.uint8, "array was not made by alloc() or ArraySet"
    end = arr.ctypes.data - raw.ctypes.data + arr.nbytes
    return bool(np.all(raw[end: end + GUARD_LEN] == GUARD_BYTE))


def _shared_fd(size: int) -> int:
    """A file descriptor for `size` bytes of memory another process can map: an anonymous memfd on Linux,
    elsewhere a temporary file (in the worker's private directory) removed at once."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("ksearch-arrays", os.MFD_CLOEXEC)
    else:
        fd, path = tempfile.mkstemp(prefix="ksearch-arrays-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


_bank_ids = itertools.count(1)


def _layout(specs: Sequence[tuple[str, Sequence[int], np.dtype]]) -> tuple[dict[str, int], int]:
    """Where each array of one call starts (ALIGN-aligned, GUARD_LEN guard bytes after each), and the size
    of one call's arrays rounded up to ALIGN."""
    offsets: dict[str, int] = {}
    end = 0
    for name, shape, dtype in specs:
        start = -(-end // ALIGN) * ALIGN
        offsets[name] = start
        end = start + math.prod(shape) * np.dtype(dtype).itemsize + GUARD_LEN
    return offsets, max(-(-end // ALIGN) * ALIGN, ALIGN)


class Bank:
    """`slots` copies of one call's arrays in one region of shared memory, each laid out as `alloc` lays out
    an array (ALIGN-aligned, GUARD_LEN guard bytes after it), so the kernel host can map the whole region
    once and run kernels on any slot while this process keeps every check to itself.

    `offsets` is where each array starts inside a slot, `stride` the distance between slots."""

    def __init__(self, specs: Sequence[tuple[str, Sequence[int], np.dtype]], slots: int = 1) -> None:
        self.id = next(_bank_ids)
        self.specs = [(name, tuple(int(d) for d in shape), np.dtype(dtype)) for name, shape, dtype in specs]
        self.offsets, self.stride = _layout(self.specs)
        self.slots = max(int(slots), 1)
        self.size = self.stride * self.slots
        self.fd = _shared_fd(self.size)
        weakref.finalize(self, os.close, self.fd)
        self._raw = np.frombuffer(mmap.mmap(self.fd, self.size), dtype=np.uint8)
        for i in range(self.slots):
            for name, shape, dtype in self.specs:
                end = i * self.stride + self.offsets[name] + math.prod(shape) * dtype.itemsize
                self._raw[end: end + GUARD_LEN] = GUARD_BYTE
        self._views: dict[int, Slot] = {}
        self.layout = tuple((name, shape, str(dtype)) for name, shape, dtype in self.specs)

    def slot(self, i: int) -> Slot:
        if not 0 <= i < self.slots:
            raise IndexError(f"slot {i} of a bank of {self.slots}")
        view = self._views.get(i)
        if view is None:
            view = self._views[i] = Slot(self, i)
        return view

    def column(self, name: str, count: int) -> np.ndarray:
        """Array `name` of slots 0..count-1 as one view of shape (count, *shape): poisoning and checking many
        calls' outputs is then one numpy operation."""
        shape, dtype = next((s, d) for n, s, d in self.specs if n == name)
        nbytes = math.prod(shape) * dtype.itemsize
        start = self.offsets[name]
        rows = self._raw[: self.stride * count].reshape(count, self.stride)
        return rows[:, start: start + nbytes].view(dtype).reshape((count, *shape))

    def guards_intact(self, name: str, count: int) -> np.ndarray:
        """Per slot 0..count-1, whether the guard bytes after array `name` are intact."""
        shape, dtype = next((s, d) for n, s, d in self.specs if n == name)
        end = self.offsets[name] + math.prod(shape) * dtype.itemsize
        rows = self._raw[: self.stride * count].reshape(count, self.stride)
        return np.all(rows[:, end: end + GUARD_LEN] == GUARD_BYTE, axis=1)

    def readonly_fd(self) -> int | None:
        """A new descriptor that maps the same memory read-only (the caller closes it), or None where the
        system offers none (then the bank is handed over writable and its inputs compared afterwards)."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            return os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None


class Slot(Mapping[str, np.ndarray]):
    """The arrays of one call: one slot of a bank."""

    def __init__(self, bank: Bank, index: int) -> None:
        self.bank = bank
        self.index = index
        base = index * bank.stride
        self.offsets = {name: base + off for name, off in bank.offsets.items()}
        raw = bank._raw
        self._raw = raw
        self._arrays = {
            name: raw[self.offsets[name]: self.offsets[name] + math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)
            for name, shape, dtype in bank.specs
        }

    def __getitem__(self, name: str) -> np.ndarray:
        return self._arrays[name]

    def guard_intact(self, name: str) -> bool:
        """True when the guard bytes after array `name` were not overwritten (found by offset, which
        works for empty arrays too)."""
        end = self.offsets[name] + self._arrays[name].nbytes
        return bool(np.all(self._raw[end: end + GUARD_LEN] == GUARD_BYTE))

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)
