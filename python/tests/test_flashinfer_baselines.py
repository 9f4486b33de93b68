"""The FlashInfer baselines of the paged-attention tasks plan once per input set and run at every call (the
timed call is the run, as a serving engine plans once per step for all its layers), and plan again for a new
set; checked with stand-ins for torch and FlashInfer (neither runs here), counting what the wrappers are asked."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


class Tensor(np.ndarray):
    """What the baselines read of a torch tensor: values, a device, a dtype, `.to`."""
    device = "cuda:0"

    def to(self, *_: Any) -> Tensor:
        return self


def tensor(values: Any) -> Tensor:
    return np.asarray(values).view(Tensor)


class Wrapper:
    made = 0

    def __init__(self, workspace: Any, *args: Any, **kwargs: Any) -> None:
        Wrapper.made += 1
        self.plans = 0
        self.runs = 0

    def plan(self, *args: Any, **kwargs: Any) -> None:
        self.plans += 1

    def run(self, *args: Any, **kwargs: Any) -> tuple[str, str]:
        self.runs += 1
        return "out", "lse"


@pytest.fixture()
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = types.SimpleNamespace(int8="int8", int32="int32", zeros=lambda *a, **k: None,
                                  ones=lambda *a, **k: None, arange=lambda *a, **k: None)
    flashinfer = types.SimpleNamespace(BatchDecodeWithPagedKVCacheWrapper=Wrapper,
                                       mla=types.SimpleNamespace(BatchMLAPagedAttentionWrapper=Wrapper))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "flashinfer", flashinfer)
    Wrapper.made = 0


def baselines(task: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"baselines_{task.replace('-', '_')}", REPO / "tasks" / task /
                                                  "baselines.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def a_set() -> dict[str, Tensor]:
    return {"q": tensor([1.0]), "q_nope": tensor([1.0]), "q_pe": tensor([1.0]), "k_cache": tensor([1.0]),
            "v_cache": tensor([1.0]), "ckv_cache": tensor([1.0]), "kpe_cache": tensor([1.0]),
            "qo_indptr": tensor([0, 1]), "kv_indptr": tensor([0, 3]), "kv_indices": tensor([4, 5, 6])}


@pytest.mark.parametrize(("task", "fn"), [("gqa-paged-decode", "flashinfer_decode"),
                                          ("mla-paged-decode", "flashinfer_mla"),
                                          ("mla-paged-prefill", "flashinfer_mla")])
def test_each_input_set_is_planned_once_and_run_at_every_call(stand_ins: None, task: str, fn: str) -> None:
    m = baselines(task)
    call = getattr(m, fn)
    dims = {"B": 1, "Hq": 32, "Hkv": 4, "D": 128, "H": 16, "Dckv": 512, "Dkpe": 64}
    a, b = a_set(), a_set()
    for s in (a, a, b, a, b, a):
        call(dict(s), dims)
    wrappers = [entry if isinstance(entry, Wrapper) else entry[0] for entry in m._wrappers.values()]
    assert Wrapper.made == 2 and sorted(w.plans for w in wrappers) == [1, 1], [w.plans for w in wrappers]
    assert sorted(w.runs for w in wrappers) == [2, 4]
    # Another set made of new tensor objects is planned afresh, whatever addresses it reuses.
    call(dict(a_set()), dims)
    assert Wrapper.made == 3
