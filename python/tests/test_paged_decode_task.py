"""The gqa-paged-decode task's own Python: its input maker keeps the page-list invariants the kernels rely
on, its float64 reference equals the attention written plainly, and the MLX baseline (run on MLX's CPU
build) agrees with the reference, on shapes small enough for a unit test."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "gqa-paged-decode"
SMALL = {"B": 3, "Hq": 8, "Hkv": 2, "D": 16, "N": 40, "P": 64}
FLOATS = {"q": "float32", "k_cache": "float32", "v_cache": "float32", "kv_indptr": "int32", "kv_indices": "int32"}


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"paged_{name}", TASK_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    return load("reference")


@pytest.mark.parametrize("seed", range(5))
def test_page_lists_split_the_read_pages_among_the_sequences(reference: ModuleType, seed: int) -> None:
    dims = dict(SMALL)
    made = reference.make_inputs(dims, FLOATS, np.random.default_rng(seed))
    indptr, indices = made["kv_indptr"], made["kv_indices"]
    assert indptr.dtype == np.int32 and indices.dtype == np.int32
    assert indptr.shape == (dims["B"] + 1,) and indices.shape == (dims["N"],)
    assert indptr[0] == 0 and indptr[-1] == dims["N"]
    assert (np.diff(indptr) >= 1).all(), "every sequence reads at least one page"
    assert len(set(indices.tolist())) == dims["N"], "no page is read twice"
    assert indices.min() >= 0 and indices.max() < dims["P"]
    assert made["k_cache"].shape == (dims["P"], 1, dims["Hkv"], dims["D"])
    assert (made["q"] != 0).all()


def test_the_input_maker_refuses_a_batch_the_pages_cannot_hold(reference: ModuleType) -> None:
    with pytest.raises(ValueError, match="B <= N <= P"):
        reference.make_inputs({**SMALL, "N": 2}, FLOATS, np.random.default_rng(0))
    with pytest.raises(ValueError, match="B <= N <= P"):
        reference.make_inputs({**SMALL, "P": 10}, FLOATS, np.random.default_rng(0))


@pytest.mark.parametrize("seed", range(3))
def test_the_reference_is_the_attention_written_plainly(reference: ModuleType, seed: int) -> None:
    made = reference.make_inputs(dict(SMALL), FLOATS, np.random.default_rng(seed))
    got = reference.reference(made, SMALL)
    want = reference.dense(made, SMALL)
    np.testing.assert_allclose(got["o"], want["o"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["lse"], want["lse"], rtol=1e-12, atol=1e-12)


def test_the_reference_reads_only_the_named_pages(reference: ModuleType) -> None:
    """Pages no sequence names do not change the result; a named page does."""
    made = reference.make_inputs(dict(SMALL), FLOATS, np.random.default_rng(7))
    before = reference.reference(made, SMALL)
    unread = sorted(set(range(SMALL["P"])) - set(made["kv_indices"].tolist()))
    changed = {k: v.copy() for k, v in made.items()}
    changed["k_cache"][unread] = 1e4
    changed["v_cache"][unread] = -1e4
    np.testing.assert_array_equal(reference.reference(changed, SMALL)["o"], before["o"])
    changed["v_cache"][made["kv_indices"][0]] += 1.0
    assert not np.array_equal(reference.reference(changed, SMALL)["o"], before["o"])


def test_lse_is_base_two(reference: ModuleType) -> None:
    """One page per sequence: the softmax is that page's value row and lse = s / ln 2."""
    dims = {**SMALL, "N": 3}
    made = reference.make_inputs(dims, FLOATS, np.random.default_rng(1))
    out = reference.reference(made, dims)
    page = made["kv_indices"][made["kv_indptr"][1]]
    group = dims["Hq"] // dims["Hkv"]
    for h in range(dims["Hq"]):
        k = made["k_cache"][page, 0, h // group].astype(np.float64)
        s = float(made["q"][1, h].astype(np.float64) @ k) / math.sqrt(dims["D"])
        assert out["lse"][1, h] == pytest.approx(s / math.log(2.0), rel=1e-12)
        np.testing.assert_allclose(out["o"][1, h], made["v_cache"][page, 0, h // group], rtol=1e-12)


def test_the_mlx_baseline_agrees_with_the_reference(reference: ModuleType) -> None:
    mx = pytest.importorskip("mlx.core")
    baselines = load("baselines")
    made = reference.make_inputs(dict(SMALL), FLOATS, np.random.default_rng(3))
    want = reference.reference(made, SMALL)
    got = baselines.mlx_gather_sdpa({k: mx.array(v) for k, v in made.items()}, dict(SMALL))
    np.testing.assert_allclose(np.array(got["o"]), want["o"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(got["lse"]), want["lse"], rtol=1e-4, atol=1e-5)
