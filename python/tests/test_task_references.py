"""The Python of the tasks mla-paged-decode, mla-paged-prefill and trimul: their input makers keep the promises
the kernels rely on (page lists, query runs, masks, draws), their float64 references equal the same math
written plainly, and each reference tells a wrong kernel's answer from the right one by more than the task's
tolerance, on shapes small enough for a unit test. (Their baselines need torch and a GPU: not imported here.)"""

from __future__ import annotations

import ast
import importlib.util
import math
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

TASKS = Path(__file__).resolve().parents[2] / "tasks"


def load(task: str, name: str = "reference") -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{task.replace('-', '_')}_{name}", TASKS / task / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task_toml(task: str) -> dict[str, Any]:
    return tomllib.loads((TASKS / task / "task.toml").read_text())


def as_float64(made: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the worker hands a reference: float inputs as float64 copies, integers as they are."""
    return {k: v.astype(np.float64) if v.dtype.kind == "f" else v.copy() for k, v in made.items()}


def excess(got: np.ndarray, want: np.ndarray, tol: dict[str, float]) -> float:
    """The worst |got - want| / (atol + rtol |want|): a check passes at <= 1."""
    return float(np.max(np.abs(got - want) / (tol["atol"] + tol["rtol"] * np.abs(want))))


@pytest.mark.parametrize("task", ["mla-paged-decode", "mla-paged-prefill", "trimul"])
def test_every_baseline_names_a_function_of_baselines_py(task: str) -> None:
    tree = ast.parse((TASKS / task / "baselines.py").read_text())
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    baselines = task_toml(task)["baseline"]
    assert baselines
    for b in baselines:
        assert b["function"] in functions, b
        assert b["targets"] == ["cuda"], b


# ---------------------------------------------------------------------------------------------------------
# mla-paged-decode

MLA_FLOATS = {"q_nope": "float32", "q_pe": "float32", "ckv_cache": "float32", "kpe_cache": "float32"}
DECODE_SMALL = {"B": 3, "H": 4, "Dckv": 16, "Dkpe": 8, "N": 40, "P": 64}
# The definition's widths with few pages, for the wrong-kernel checks (where the scale's size matters).
DECODE_REAL = {"B": 4, "H": 16, "Dckv": 512, "Dkpe": 64, "N": 600, "P": 1000}


@pytest.fixture(scope="module")
def decode() -> ModuleType:
    return load("mla-paged-decode")


def check_page_lists(made: dict[str, np.ndarray], B: int, N: int, P: int) -> np.ndarray:
    """The promises kv_indptr and kv_indices keep; returns the lengths."""
    indptr, indices = made["kv_indptr"], made["kv_indices"]
    assert indptr.dtype == np.int32 and indices.dtype == np.int32
    assert indptr.shape == (B + 1,) and indices.shape == (N,)
    assert indptr[0] == 0 and indptr[-1] == N
    lengths = np.diff(indptr)
    assert (lengths >= 1).all(), "every sequence reads at least one page"
    assert len(set(indices.tolist())) == N, "no page is read twice"
    assert indices.min() >= 0 and indices.max() < P
    return lengths


@pytest.mark.parametrize("seed", range(5))
def test_decode_page_lists_split_the_read_pages_among_the_sequences(decode: ModuleType, seed: int) -> None:
    d = DECODE_SMALL
    made = decode.make_inputs(dict(d), MLA_FLOATS, np.random.default_rng(seed))
    check_page_lists(made, d["B"], d["N"], d["P"])
    assert made["q_nope"].shape == (d["B"], d["H"], d["Dckv"]) and made["q_pe"].shape == (d["B"], d["H"], d["Dkpe"])
    assert made["ckv_cache"].shape == (d["P"], 1, d["Dckv"]) and made["kpe_cache"].shape == (d["P"], 1, d["Dkpe"])
    assert all((made[n] != 0).all() for n in MLA_FLOATS)


def test_decode_workloads_can_be_made(decode: ModuleType) -> None:
    """Every workload's page counts satisfy make_inputs (drawn at narrow widths: the page lists are the same)."""
    for w in task_toml("mla-paged-decode")["workload"]:
        dims = {**w["dims"], "H": 1, "Dckv": 1, "Dkpe": 1}
        made = decode.make_inputs(dims, MLA_FLOATS, np.random.default_rng(0))
        lengths = check_page_lists(made, dims["B"], dims["N"], dims["P"])
        if dims["B"] > 4:
            assert lengths.max() >= 2 * lengths.min(), "lengths differ from sequence to sequence"


def test_decode_input_maker_refuses_a_batch_the_pages_cannot_hold(decode: ModuleType) -> None:
    with pytest.raises(ValueError, match="B <= N <= P"):
        decode.make_inputs({**DECODE_SMALL, "N": 2}, MLA_FLOATS, np.random.default_rng(0))
    with pytest.raises(ValueError, match="B <= N <= P"):
        decode.make_inputs({**DECODE_SMALL, "P": 10}, MLA_FLOATS, np.random.default_rng(0))


def test_decode_scale_is_the_definitions() -> None:
    assert load("mla-paged-decode").SM_SCALE == pytest.approx(1.0 / math.sqrt(192.0), rel=1e-15)
    assert load("mla-paged-prefill").SM_SCALE == pytest.approx(1.0 / math.sqrt(192.0), rel=1e-15)


@pytest.mark.parametrize("seed", range(3))
def test_decode_reference_is_the_attention_written_plainly(decode: ModuleType, seed: int) -> None:
    made = as_float64(decode.make_inputs(dict(DECODE_SMALL), MLA_FLOATS, np.random.default_rng(seed)))
    got = decode.reference(made, DECODE_SMALL)
    want = decode.dense(made, DECODE_SMALL)
    np.testing.assert_allclose(got["output"], want["output"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["lse"], want["lse"], rtol=1e-12, atol=1e-12)


def test_decode_reference_reads_only_the_named_pages(decode: ModuleType) -> None:
    """Pages no sequence names do not change the result; a named page's compressed row (a key and a value)
    and its rope row (a key) do."""
    made = as_float64(decode.make_inputs(dict(DECODE_SMALL), MLA_FLOATS, np.random.default_rng(7)))
    before = decode.reference(made, DECODE_SMALL)
    unread = sorted(set(range(DECODE_SMALL["P"])) - set(made["kv_indices"].tolist()))
    changed = {k: v.copy() for k, v in made.items()}
    changed["ckv_cache"][unread] = 1e4
    changed["kpe_cache"][unread] = -1e4
    np.testing.assert_array_equal(decode.reference(changed, DECODE_SMALL)["output"], before["output"])
    first = made["kv_indices"][0]
    changed["kpe_cache"][first] += 1.0
    assert not np.array_equal(decode.reference(changed, DECODE_SMALL)["lse"], before["lse"])
    changed["ckv_cache"][first] += 1.0
    assert not np.array_equal(decode.reference(changed, DECODE_SMALL)["output"], before["output"])


def test_decode_lse_is_base_two_and_one_page_returns_its_compressed_row(decode: ModuleType) -> None:
    dims = {**DECODE_SMALL, "N": 3}
    made = as_float64(decode.make_inputs(dims, MLA_FLOATS, np.random.default_rng(1)))
    out = decode.reference(made, dims)
    page = made["kv_indices"][made["kv_indptr"][1]]
    for h in range(dims["H"]):
        s = (made["q_nope"][1, h] @ made["ckv_cache"][page, 0] + made["q_pe"][1, h] @ made["kpe_cache"][page, 0])
        assert out["lse"][1, h] == pytest.approx(s / math.sqrt(192.0) / math.log(2.0), rel=1e-12)
        np.testing.assert_allclose(out["output"][1, h], made["ckv_cache"][page, 0], rtol=1e-12)


@pytest.mark.parametrize("wrong", ["scale_sqrt_576", "scale_5_percent", "no_q_pe"])
def test_decode_reference_fails_wrong_kernels_by_more_than_the_tolerance(decode: ModuleType, wrong: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels with the usual mistakes (the scale of the widths after absorption, 1 / sqrt(576); a scale 5%
    off; the rope part left out), at the definition's widths: their answers fail the task's bfloat16
    tolerance (lse: float32's) against the reference."""
    tol = task_toml("mla-paged-decode")["tolerance"]
    made = as_float64(decode.make_inputs(dict(DECODE_REAL), MLA_FLOATS, np.random.default_rng(11)))
    right = decode.reference(made, DECODE_REAL)
    bad = {k: v.copy() for k, v in made.items()}
    if wrong == "scale_sqrt_576":
        monkeypatch.setattr(decode, "SM_SCALE", 1.0 / math.sqrt(512 + 64))
    elif wrong == "scale_5_percent":
        monkeypatch.setattr(decode, "SM_SCALE", 1.05 / math.sqrt(192))
    else:
        bad["q_pe"][:] = 0.0
    got = decode.reference(bad, DECODE_REAL)
    assert excess(got["output"], right["output"], tol["bfloat16"]) > 2
    assert excess(got["lse"], right["lse"], tol["float32"]) > 2


# ---------------------------------------------------------------------------------------------------------
# mla-paged-prefill

PREFILL_SMALL = {"B": 4, "H": 3, "Dckv": 16, "Dkpe": 8, "Q": 17, "N": 40, "P": 64}
PREFILL_REAL = {"B": 3, "H": 16, "Dckv": 512, "Dkpe": 64, "Q": 60, "N": 200, "P": 256}


@pytest.fixture(scope="module")
def prefill() -> ModuleType:
    return load("mla-paged-prefill")


def check_query_runs(made: dict[str, np.ndarray], B: int, Q: int, N: int, P: int) -> tuple[np.ndarray, np.ndarray]:
    qo = made["qo_indptr"]
    assert qo.dtype == np.int32 and qo.shape == (B + 1,)
    assert qo[0] == 0 and qo[-1] == Q
    lq = np.diff(qo)
    assert (lq >= 1).all(), "every sequence has at least one query token"
    lkv = check_page_lists(made, B, N, P)
    assert (lkv >= lq).all(), "a sequence's pages include its queries' own: Lkv >= Lq"
    return lq, lkv


@pytest.mark.parametrize("seed", range(5))
def test_prefill_query_runs_and_page_lists_keep_their_promises(prefill: ModuleType, seed: int) -> None:
    d = PREFILL_SMALL
    made = prefill.make_inputs(dict(d), MLA_FLOATS, np.random.default_rng(seed))
    check_query_runs(made, d["B"], d["Q"], d["N"], d["P"])
    assert made["q_nope"].shape == (d["Q"], d["H"], d["Dckv"]) and made["q_pe"].shape == (d["Q"], d["H"], d["Dkpe"])
    assert all((made[n] != 0).all() for n in MLA_FLOATS)


def test_prefill_workloads_can_be_made(prefill: ModuleType) -> None:
    """Every workload's counts satisfy make_inputs (narrow widths: the runs and page lists are the same); the
    draws hold plain prefills and prefixed ones across a few sets."""
    for w in task_toml("mla-paged-prefill")["workload"]:
        dims = {**w["dims"], "H": 1, "Dckv": 1, "Dkpe": 1}
        for seed in range(3):
            made = prefill.make_inputs(dims, MLA_FLOATS, np.random.default_rng(seed))
            lq, lkv = check_query_runs(made, dims["B"], dims["Q"], dims["N"], dims["P"])
            if dims["Q"] == dims["B"]:
                assert (lq == 1).all(), "a decode-like step: one query per sequence"


def test_prefill_input_maker_refuses_impossible_counts(prefill: ModuleType) -> None:
    for bad in ({"Q": 3}, {"N": 16}, {"P": 39}):
        with pytest.raises(ValueError, match="B <= Q <= N <= P"):
            prefill.make_inputs({**PREFILL_SMALL, **bad}, MLA_FLOATS, np.random.default_rng(0))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rows", [128, 2])
def test_prefill_reference_is_the_attention_written_plainly(prefill: ModuleType, seed: int, rows: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with blocks of 2 query rows: every sequence then spans several blocks, the last one partial."""
    monkeypatch.setattr(prefill, "_ROWS", rows)
    made = as_float64(prefill.make_inputs(dict(PREFILL_SMALL), MLA_FLOATS, np.random.default_rng(seed)))
    got = prefill.reference(made, PREFILL_SMALL)
    want = prefill.dense(made, PREFILL_SMALL)
    np.testing.assert_allclose(got["output"], want["output"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["lse"], want["lse"], rtol=1e-12, atol=1e-12)


def test_prefill_last_query_of_each_sequence_is_a_decode_over_all_its_pages(prefill: ModuleType,
                                                                             decode: ModuleType) -> None:
    """The definition's causal convention, bottom-right: a sequence's last query sees all its pages, as
    mla-paged-decode's one query does."""
    d = PREFILL_SMALL
    made = as_float64(prefill.make_inputs(dict(d), MLA_FLOATS, np.random.default_rng(5)))
    out = prefill.reference(made, d)
    last = made["qo_indptr"][1:] - 1
    as_decode = {"q_nope": made["q_nope"][last], "q_pe": made["q_pe"][last], "ckv_cache": made["ckv_cache"],
                 "kpe_cache": made["kpe_cache"], "kv_indptr": made["kv_indptr"], "kv_indices": made["kv_indices"]}
    dec = decode.reference(as_decode, d)
    np.testing.assert_allclose(out["output"][last], dec["output"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["lse"][last], dec["lse"], rtol=1e-12, atol=1e-12)


def test_prefill_query_i_sees_keys_up_to_its_own_position(prefill: ModuleType) -> None:
    """Query i of a sequence with Lq queries and Lkv pages sees keys 0 .. Lkv - Lq + i: changing the key
    just past that leaves it alone, changing the last one it sees does not."""
    d = PREFILL_SMALL
    made = as_float64(prefill.make_inputs(dict(d), MLA_FLOATS, np.random.default_rng(3)))
    before = prefill.reference(made, d)
    qo, kv = made["qo_indptr"], made["kv_indptr"]
    b = int(np.argmax(np.diff(qo)))  # the sequence with the most queries
    lq, lkv = int(qo[b + 1] - qo[b]), int(kv[b + 1] - kv[b])
    assert lq >= 2
    i = lq // 2
    t = int(qo[b]) + i
    last_seen = lkv - lq + i
    past = made["kv_indices"][kv[b] + last_seen + 1]
    seen = made["kv_indices"][kv[b] + last_seen]
    changed = {k: v.copy() for k, v in made.items()}
    changed["ckv_cache"][past] += 3.0
    changed["kpe_cache"][past] += 3.0
    after = prefill.reference(changed, d)
    np.testing.assert_array_equal(after["output"][t], before["output"][t])
    np.testing.assert_array_equal(after["lse"][t], before["lse"][t])
    assert not np.array_equal(after["output"][t + 1], before["output"][t + 1]), "the next query sees it"
    changed["kpe_cache"][seen] += 3.0
    assert not np.array_equal(prefill.reference(changed, d)["lse"][t], before["lse"][t])


def masked_attention(made: dict[str, np.ndarray], dims: dict[str, int], sees: Any, scale: float) -> dict[str, np.ndarray]:
    """A second, straightforward implementation with the mask rule and scale as parameters:
    sees(i, j, lq, lkv) says whether query i of a sequence sees its key j."""
    H, Dckv = dims["H"], dims["Dckv"]
    qo, kv, idx = made["qo_indptr"], made["kv_indptr"], made["kv_indices"]
    output = np.zeros((dims["Q"], H, Dckv))
    lse = np.zeros((dims["Q"], H))
    for b in range(dims["B"]):
        lq, lkv = int(qo[b + 1] - qo[b]), int(kv[b + 1] - kv[b])
        pages = idx[kv[b]:kv[b + 1]]
        kc, kp = made["ckv_cache"][pages, 0], made["kpe_cache"][pages, 0]
        for i in range(lq):
            t = int(qo[b]) + i
            visible = np.array([sees(i, j, lq, lkv) for j in range(lkv)])
            s = (made["q_nope"][t] @ kc.T + made["q_pe"][t] @ kp.T) * scale  # (H, Lkv)
            s = np.where(visible[None, :], s, -np.inf)
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            output[t] = (e / e.sum(axis=-1, keepdims=True)) @ kc
            lse[t] = np.log2(np.exp(s).sum(axis=-1))
    return {"output": output, "lse": lse}


RULES = {
    "bottom_right": lambda i, j, lq, lkv: j <= lkv - lq + i,  # the definition's
    "non_causal": lambda i, j, lq, lkv: True,
    "top_left": lambda i, j, lq, lkv: j <= i,
    "one_key_too_many": lambda i, j, lq, lkv: j <= lkv - lq + i + 1,
}


@pytest.mark.parametrize("rule", RULES)
def test_prefill_reference_passes_the_right_mask_and_fails_wrong_ones(prefill: ModuleType, rule: str) -> None:
    """At the definition's widths and the task's bfloat16 tolerance (lse's at float32): the bottom-right
    causal mask agrees with the reference to rounding; no mask, a top-left one and one a key too wide fail it."""
    tol = task_toml("mla-paged-prefill")["tolerance"]
    made = as_float64(prefill.make_inputs(dict(PREFILL_REAL), MLA_FLOATS, np.random.default_rng(2)))
    right = prefill.reference(made, PREFILL_REAL)
    got = masked_attention(made, PREFILL_REAL, RULES[rule], 1.0 / math.sqrt(192.0))
    if rule == "bottom_right":
        np.testing.assert_allclose(got["output"], right["output"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got["lse"], right["lse"], rtol=1e-12)
    else:
        assert excess(got["output"], right["output"], tol["bfloat16"]) > 2
        assert excess(got["lse"], right["lse"], tol["float32"]) > 2


def test_prefill_reference_fails_a_wrong_scale(prefill: ModuleType) -> None:
    tol = task_toml("mla-paged-prefill")["tolerance"]
    made = as_float64(prefill.make_inputs(dict(PREFILL_REAL), MLA_FLOATS, np.random.default_rng(4)))
    right = prefill.reference(made, PREFILL_REAL)
    got = masked_attention(made, PREFILL_REAL, RULES["bottom_right"], 1.0 / math.sqrt(512 + 64))
    assert excess(got["output"], right["output"], tol["bfloat16"]) > 2
    assert excess(got["lse"], right["lse"], tol["float32"]) > 2


# ---------------------------------------------------------------------------------------------------------
# trimul

TRIMUL_SMALL = {"B": 2, "S": 9, "D": 12, "H": 8, "MASKED": 1, "CAUCHY": 0}
TRIMUL_NAMES = ["x", "mask", "norm_weight", "norm_bias", "left_proj", "right_proj", "left_gate", "right_gate",
                "out_gate", "out_norm_weight", "out_norm_bias", "to_out"]
TRIMUL_FLOATS = {n: "float32" for n in TRIMUL_NAMES}


@pytest.fixture(scope="module")
def trimul() -> ModuleType:
    return load("trimul")


def test_trimul_inputs_are_the_tasks(trimul: ModuleType) -> None:
    """make_inputs returns every input of task.toml, in its shape."""
    spec = task_toml("trimul")
    assert [i["name"] for i in spec["input"]] == TRIMUL_NAMES
    d = TRIMUL_SMALL
    made = trimul.make_inputs(dict(d), TRIMUL_FLOATS, np.random.default_rng(0))
    for i in spec["input"]:
        shape = tuple(eval(e, {}, dict(d)) for e in i["shape"])  # plain names here
        assert made[i["name"]].shape == shape and made[i["name"]].dtype == np.float32, i["name"]


@pytest.mark.parametrize("masked", [0, 1])
@pytest.mark.parametrize("cauchy", [0, 1])
def test_trimul_draws_follow_gpu_mode(trimul: ModuleType, masked: int, cauchy: int) -> None:
    d = {"B": 2, "S": 24, "D": 32, "H": 16, "MASKED": masked, "CAUCHY": cauchy}
    made = trimul.make_inputs(dict(d), TRIMUL_FLOATS, np.random.default_rng(masked * 2 + cauchy))
    mask = made["mask"]
    if masked:
        assert set(np.unique(mask).tolist()) == {0.0, 1.0}
        assert 0.35 < mask.mean() < 0.65
    else:
        assert (mask == 1).all()
    x = made["x"]
    assert (x != 0).all() and np.isfinite(x).all()
    if cauchy:
        assert np.abs(x).max() > 100, "Cauchy draws have heavy tails"
        assert 1.5 < np.median(np.abs(x)) < 2.5, "scale 2: the median of |x| is 2"
    else:
        assert np.abs(x).max() < 8 and 0.9 < x.std() < 1.1
    assert 0.7 / math.sqrt(d["H"]) < made["left_gate"].std() < 1.3 / math.sqrt(d["H"])
    assert 0.7 / math.sqrt(d["D"]) < made["to_out"].std() < 1.3 / math.sqrt(d["D"])
    assert 0.6 < made["norm_weight"].std() < 1.4


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rows", [64, 4])
@pytest.mark.parametrize("cauchy", [0, 1])
def test_trimul_reference_is_the_module_written_plainly(trimul: ModuleType, seed: int, rows: int, cauchy: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Also in blocks of 4 rows (9 rows: two whole blocks and a partial one)."""
    monkeypatch.setattr(trimul, "_ROWS", rows)
    d = {**TRIMUL_SMALL, "CAUCHY": cauchy}
    made = as_float64(trimul.make_inputs(dict(d), TRIMUL_FLOATS, np.random.default_rng(seed)))
    np.testing.assert_allclose(trimul.reference(made, d)["out"], trimul.dense(made, d)["out"], rtol=1e-10, atol=1e-12)


def test_trimul_reference_element_by_element(trimul: ModuleType) -> None:
    """A few elements of out computed one at a time with loops: the sum over k written out, the LayerNorms
    and linears as sums."""
    d = TRIMUL_SMALL
    m = as_float64(trimul.make_inputs(dict(d), TRIMUL_FLOATS, np.random.default_rng(9)))
    out = trimul.reference(m, d)["out"]

    def ln(v: list[float], w: np.ndarray, c: np.ndarray) -> list[float]:
        mu = sum(v) / len(v)
        var = sum((a - mu) ** 2 for a in v) / len(v)
        return [(a - mu) / math.sqrt(var + 1e-5) * w[n] + c[n] for n, a in enumerate(v)]

    def lin(w: np.ndarray, v: list[float]) -> list[float]:
        return [sum(w[o, n] * v[n] for n in range(len(v))) for o in range(w.shape[0])]

    def sig(u: float) -> float:
        return 1.0 / (1.0 + math.exp(-u))

    def z(b: int, i: int, k: int) -> list[float]:
        return ln(list(m["x"][b, i, k]), m["norm_weight"], m["norm_bias"])

    def edge(b: int, i: int, k: int, proj: str, gate: str) -> list[float]:
        zz = z(b, i, k)
        return [m["mask"][b, i, k] * p * sig(g) for p, g in zip(lin(m[proj], zz), lin(m[gate], zz))]

    for b, i, j in [(0, 0, 0), (0, 2, 7), (1, 8, 3), (1, 5, 5)]:
        t = [0.0] * d["H"]
        for k in range(d["S"]):
            left, right = edge(b, i, k, "left_proj", "left_gate"), edge(b, j, k, "right_proj", "right_gate")
            t = [t[c] + left[c] * right[c] for c in range(d["H"])]
        gated = [a * sig(g) for a, g in zip(ln(t, m["out_norm_weight"], m["out_norm_bias"]), lin(m["out_gate"], z(b, i, j)))]
        np.testing.assert_allclose(out[b, i, j], lin(m["to_out"], gated), rtol=1e-10, atol=1e-12)


def trimul_variant(m: dict[str, np.ndarray], wrong: str) -> np.ndarray:
    """The module with one deliberate mistake, written with einsums."""
    def ln(v: np.ndarray, w: str, c: str) -> np.ndarray:
        mu = v.mean(axis=-1, keepdims=True)
        return (v - mu) / np.sqrt(((v - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5) * m[w] + m[c]

    def sig(u: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-u))

    z = ln(m["x"], "norm_weight", "norm_bias")
    lin = {n: z @ m[n].T for n in ("left_proj", "right_proj", "left_gate", "right_gate", "out_gate")}
    mask = np.ones_like(m["mask"])[..., None] if wrong == "no_mask" else m["mask"][..., None]
    lg, rg = ("right_gate", "left_gate") if wrong == "gates_swapped" else ("left_gate", "right_gate")
    left = lin["left_proj"] * mask * sig(lin[lg])
    right = lin["right_proj"] * mask * sig(lin[rg])
    t = np.einsum("bkic,bkjc->bijc", left, right) if wrong == "incoming" else np.einsum("bikc,bjkc->bijc", left, right)
    g = ln(t, "out_norm_weight", "out_norm_bias")
    if wrong != "no_out_gate":
        g = g * sig(lin["out_gate"])
    return g @ m["to_out"].T


@pytest.mark.parametrize("wrong", ["none", "incoming", "no_mask", "gates_swapped", "no_out_gate"])
def test_trimul_reference_fails_wrong_kernels_by_more_than_the_tolerance(trimul: ModuleType, wrong: str) -> None:
    """At H = 128 with a small S, masked, and GPU MODE's tolerance: the variant with no mistake agrees with the
    reference to rounding, each mistake fails it."""
    tol = task_toml("trimul")["tolerance"]["float32"]
    d = {"B": 1, "S": 32, "D": 32, "H": 128, "MASKED": 1, "CAUCHY": 0}
    made = as_float64(trimul.make_inputs(dict(d), TRIMUL_FLOATS, np.random.default_rng(6)))
    right = trimul.reference(made, d)["out"]
    got = trimul_variant(made, wrong)
    if wrong == "none":
        np.testing.assert_allclose(got, right, rtol=1e-10, atol=1e-12)
    else:
        assert excess(got, right, tol) > 2
