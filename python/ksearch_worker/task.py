"""A loaded task: its reference, optional make_inputs and baselines, and what `load_task` said of it."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from .errors import WorkerError
from .inputs import MakeInputs

Reference = Callable[[dict[str, np.ndarray], dict[str, int]], Mapping[str, Any]]

_module_ids = itertools.count()


@dataclass
class Task:
    dir: Path
    inputs: list[tuple[str, str | None]]  # (name, init) in task.toml order
    outputs: list[str]
    tolerances: dict[str, tuple[float, float]]  # dtype -> (atol, rtol)
    reference: Reference
    make_inputs: MakeInputs | None
    baselines: dict[str, Reference]  # name -> function, only those for this target


def tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def _import(path: Path) -> ModuleType:
    """Imports a task file under a fresh module name, so two tasks' reference.py never collide."""
    name = f"ksearch_task_{next(_module_ids)}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))  # lets a task file import a helper next to it
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise WorkerError("bad_task", f"{path.name} failed to import:\n{tail(traceback.format_exc())}") from None
    finally:
        sys.path.remove(str(path.parent))
    return module


def load_task(dir: str, spec: Mapping[str, Any], target: str) -> Task:
    root = Path(dir)
    ref_path = root / "reference.py"
    if not ref_path.is_file():
        raise WorkerError("bad_task", f"{ref_path} does not exist")
    ref = _import(ref_path)
    reference = getattr(ref, "reference", None)
    if not callable(reference):
        raise WorkerError("bad_task", f"{ref_path} defines no function `reference`")
    make_inputs = getattr(ref, "make_inputs", None)

    baselines: dict[str, Reference] = {}
    wanted = [b for b in spec.get("baselines") or [] if target in (b.get("targets") or [target])]
    if wanted:
        base_path = root / "baselines.py"
        if not base_path.is_file():
            raise WorkerError("bad_task", f"baselines.py: file not found in {root}, but task.toml lists baselines")
        module = _import(base_path)
        for b in wanted:
            fn = getattr(module, b["function"], None)
            if not callable(fn):
                raise WorkerError("bad_task", f"baselines.py: no function `{b['function']}` (baseline {b['name']})")
            baselines[b["name"]] = fn

    return Task(
        dir=root,
        inputs=[(i["name"], i.get("init")) for i in spec.get("inputs") or []],
        outputs=[o["name"] for o in spec.get("outputs") or []],
        tolerances={dtype: (float(t["atol"]), float(t["rtol"])) for dtype, t in (spec.get("tolerances") or {}).items()},
        reference=reference,
        make_inputs=make_inputs if callable(make_inputs) else None,
        baselines=baselines,
    )
