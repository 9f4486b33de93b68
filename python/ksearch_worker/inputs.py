"""Fresh random inputs from the `init` distributions of task.toml (docs/formats.md §1.3)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .errors import WorkerError

DEFAULT_INIT = "normal(0, 1)"
_ARITY = {"normal": 2, "uniform": 2, "laplace": 2, "lognormal": 2, "randint": 2}
_CALL = re.compile(r"^\s*([a-z]+)\s*\((.*)\)\s*$")

MakeInputs = Callable[[dict[str, int], dict[str, str], np.random.Generator], Mapping[str, np.ndarray]]


def parse_init(init: str | None) -> tuple[str, list[float]]:
    """`"uniform(-1, 1)"` -> `("uniform", [-1.0, 1.0])`."""
    text = init if init is not None else DEFAULT_INIT
    match = _CALL.match(text)
    if match is None or match.group(1) not in _ARITY:
        raise WorkerError("bad_task", f"init {text!r}: expected one of {', '.join(f'{n}(a, b)' for n in _ARITY)}")
    name, body = match.groups()
    try:
        args = [float(part) for part in body.split(",")] if body.strip() else []
    except ValueError:
        raise WorkerError("bad_task", f"init {text!r}: arguments must be numbers") from None
    if len(args) != _ARITY[name]:
        raise WorkerError("bad_task", f"init {text!r}: {name} takes {_ARITY[name]} arguments")
    return name, args


def draw(init: str | None, shape: Sequence[int], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """One input array. Floats never hold an exact zero, so a kernel writing zeros cannot pass by luck."""
    name, (a, b) = parse_init(init)
    size = tuple(shape)
    if dtype == np.bool_:
        # A bool input is a random mask whatever its distribution says.
        return rng.integers(0, 2, size=size).astype(np.bool_)
    values: np.ndarray
    # Floats of 32 bits or fewer are drawn in float32 (several times faster than float64 for the large
    # inputs of GPU tasks; the distribution is the same to the precision they hold).
    narrow = dtype.kind == "f" and dtype.itemsize <= 4
    if name == "randint":
        values = rng.integers(int(a), int(b), size=size)
    elif name == "normal" and narrow:
        values = rng.standard_normal(size, dtype=np.float32) * np.float32(b) + np.float32(a)
    elif name == "uniform" and narrow:
        values = rng.random(size, dtype=np.float32) * np.float32(b - a) + np.float32(a)
    elif name == "normal":
        values = rng.normal(a, b, size)
    elif name == "uniform":
        values = rng.uniform(a, b, size)
    elif name == "laplace":
        values = rng.laplace(a, b, size)
    else:
        values = rng.lognormal(a, b, size)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    with np.errstate(over="ignore"):
        out = values.astype(dtype)
    # Replace zeros after the cast: small draws can underflow to zero in float16/float32.
    zeros = out == 0
    count = int(zeros.sum())
    if count:
        tiny = np.finfo(dtype).tiny
        out[zeros] = np.where(rng.random(count) < 0.5, -tiny, tiny).astype(dtype)
    return out


def make_inputs(
    specs: Sequence[tuple[str, str | None]],
    shapes: Mapping[str, Sequence[int]],
    dtypes: Mapping[str, np.dtype],
    dims: dict[str, int],
    rng: np.random.Generator,
    override: MakeInputs | None,
) -> dict[str, np.ndarray]:
    """Every task input, from `reference.make_inputs` when the task defines it, else from its `init`."""
    if override is None:
        return {name: draw(init, shapes[name], dtypes[name], rng) for name, init in specs}
    made = override(dict(dims), {name: str(dtypes[name]) for name, _ in specs}, rng)
    result: dict[str, np.ndarray] = {}
    for name, _ in specs:
        if name not in made:
            raise WorkerError("bad_task", f"reference.py make_inputs did not return input {name!r}")
        arr = np.ascontiguousarray(made[name], dtype=dtypes[name])
        if arr.shape != tuple(shapes[name]):
            raise WorkerError(
                "bad_task", f"reference.py make_inputs returned {name!r} with shape {list(arr.shape)}, "
                f"expected {list(shapes[name])}")
        result[name] = arr
    return result
