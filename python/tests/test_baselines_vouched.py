"""Every shipped task's baselines compute the task's outputs: on its smallest workload (a reference set drawn as
the worker draws one), each baseline that runs here (numpy; MLX on its CPU back-end; PyTorch on the CPU where it
is installed) passes the check the worker makes before timing it (`evaluate._vouched`). A baseline failing it
would be named, not timed, on the device; this finds it first."""

from __future__ import annotations

import ast
import importlib.util
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ksearch_worker.evaluate import _vouched
from ksearch_worker.pool import Layout, Pool
from ksearch_worker.task import load_task

TASKS = Path(__file__).resolve().parents[2] / "tasks"


def _extent(expr: Any, dims: dict[str, int]) -> int:
    """A shape extent of task.toml (`B + 1`, `(N + CH - 1) // CH`): arithmetic over the dims only."""
    tree = ast.parse(str(expr), mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.Name, ast.Constant, ast.Load, ast.Add, ast.Sub, ast.Mult,
               ast.FloorDiv)
    assert all(isinstance(n, allowed) for n in ast.walk(tree)), expr
    return int(eval(compile(tree, "<extent>", "eval"), {"__builtins__": {}}, dict(dims)))


def _smallest(spec: dict[str, Any]) -> tuple[dict[str, Any], Layout]:
    def size(w: dict[str, Any]) -> int:
        return sum(int(np.prod([_extent(e, w["dims"]) for e in i["shape"]])) for i in spec["input"])
    w = min(spec["workload"], key=size)
    types = w.get("types", {})
    arrays = spec["input"] + spec["output"]
    shapes = {a["name"]: [_extent(e, w["dims"]) for e in a["shape"]] for a in arrays}
    dtypes = {a["name"]: types.get(a["dtype"], a["dtype"]) for a in arrays}
    return w, Layout.of(w["dims"], shapes, dtypes, [i["name"] for i in spec["input"]],
                        [o["name"] for o in spec["output"]])


def _cases() -> list[tuple[str, str]]:
    out = []
    for toml in sorted(TASKS.glob("*/task.toml")):
        spec = tomllib.loads(toml.read_text())
        targets = {t for b in spec.get("baseline", []) for t in b.get("targets", [])}
        for target in ("cpu", "mlx-cuda", "cuda"):
            if target in targets:
                out.append((toml.parent.name, target))
    return out


def _target(name: str) -> Any:
    if name == "cpu":
        from ksearch_worker.targets.cpu import CpuTarget
        return CpuTarget()
    if name == "mlx-cuda":
        pytest.importorskip("mlx.core")
        from ksearch_worker.targets.mlx import MlxTarget
        return MlxTarget("mlx-cuda")
    return _TorchCpu()


class _TorchCpu:
    """The cuda target's baselines on PyTorch's CPU tensors (their FlashInfer ones need a GPU: left out)."""

    def baseline_outputs(self, fn: Any, inputs: dict[str, np.ndarray], dims: dict[str, int],
                         layout: Layout) -> dict[str, np.ndarray]:
        torch = pytest.importorskip("torch")
        dtypes = {n: d for n, _, d in layout.inputs}
        tensors = {n: torch.from_numpy(np.ascontiguousarray(a)) for n, a in inputs.items()}
        tensors = {n: t.to(torch.bfloat16) if dtypes[n] == "bfloat16" else t for n, t in tensors.items()}
        got = fn(tensors, dict(dims))
        return {n: (t.float() if t.is_floating_point() else t).numpy() for n, t in got.items()}


@pytest.mark.parametrize(("task", "target"), _cases())
def test_every_baseline_computes_the_tasks_outputs(task: str, target: str) -> None:
    spec = tomllib.loads((TASKS / task / "task.toml").read_text())
    wanted = [b for b in spec["baseline"] if target in b.get("targets", [])]
    if target == "cuda":
        wanted = [b for b in wanted if not b["name"].startswith("flashinfer")]
    if target != "cpu" and importlib.util.find_spec("mlx" if target == "mlx-cuda" else "torch") is None:
        pytest.skip(f"{target}'s baselines need {'MLX' if target == 'mlx-cuda' else 'PyTorch'}")
    loaded = load_task(str(TASKS / task), {"inputs": spec["input"], "outputs": spec["output"],
                                           "tolerances": spec["tolerance"], "baselines": wanted}, target)
    assert sorted(loaded.baselines) == sorted(b["name"] for b in wanted)
    workload, layout = _smallest(spec)
    ref = Pool().reference(loaded, layout, "vouch", 7)
    ok, refused = _vouched(loaded, _target(target), layout, dict(workload["dims"]), loaded.baselines, ref)
    assert not refused, f"{task} ({workload['name']}): {refused}"
    assert sorted(ok) == sorted(loaded.baselines)


def test_a_baseline_of_another_shape_or_none_of_the_outputs_is_refused_with_why() -> None:
    """A transposed output, one of another length (which numpy would broadcast) or a reply without the task's
    outputs is named with why, not compared element by element (nor taken for a pass)."""
    from ksearch_worker.targets.cpu import CpuTarget

    layout = Layout.of({"M": 4, "N": 8}, {"A": (4, 8), "C": (4, 8)}, {"A": "float32", "C": "float32"}, ["A"], ["C"])

    def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
        return {"C": 2 * inputs["A"]}

    from ksearch_worker.task import Task
    task = Task(dir=TASKS, inputs=[("A", "uniform(-1, 1)")], outputs=["C"], tolerances={"float32": (1e-5, 1e-5)},
                reference=reference, make_inputs=None, baselines={})
    ref = Pool().reference(task, layout, "shapes", 3)
    fns = {
        "right": lambda i, d: {"C": 2 * i["A"]},
        "transposed": lambda i, d: {"C": (2 * i["A"]).T.copy()},
        "column": lambda i, d: {"C": (2 * i["A"]).reshape(-1, 1)},
        "misnamed": lambda i, d: {"out": 2 * i["A"]},
        "words": lambda i, d: {"C": np.full((4, 8), "x")},
        "not_a_dict": lambda i, d: 2 * i["A"],
    }
    ok, refused = _vouched(task, CpuTarget(), layout, {"M": 4, "N": 8}, {n: fns[n] for n in fns if n != "not_a_dict"},
                           ref)
    assert sorted(ok) == ["right"], refused
    why = {n: v["unavailable"] for n, v in refused.items()}
    assert "shape [8, 4]" in why["transposed"] and "[4, 8]" in why["transposed"], why
    assert "shape [32, 1]" in why["column"], why
    assert "none of the task's outputs" in why["misnamed"] and "out" in why["misnamed"], why
    assert "not numbers" in why["words"], why
    # A reply that is no dict at all is the task's own code failing: the whole task is refused, with its name.
    with pytest.raises(Exception, match="baseline not_a_dict"):
        _vouched(task, CpuTarget(), layout, {"M": 4, "N": 8}, {"not_a_dict": fns["not_a_dict"]}, ref)
