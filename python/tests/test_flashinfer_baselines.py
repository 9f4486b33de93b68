"""The FlashInfer baselines of the paged-attention tasks against the wrappers of the release they are staged with
(bench/stage_flashinfer.sh: 0.7.4), of its one-call fallback (0.6.18.post1) and of the oldest they keep working with
(0.2.14): every constructor, `plan` and `run` call binds to that release's real parameter list (read from its
sources; the stand-ins below define the same names, order, kinds and defaults), and means what the task needs (NHD
pages of one token, the scale, causality, the base-2 log-sum-exp). Also: each input set is planned once and run at
every call (the timed call is the run, as a serving engine plans once per step for all its layers), and a new set
is planned afresh. Neither torch nor FlashInfer runs here; where FlashInfer is importable, the stand-ins' parameter
lists are compared with its own."""

from __future__ import annotations

import functools
import importlib.util
import inspect
import math
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


def tensor(values: Any, dtype: Any = None) -> Tensor:
    return np.asarray(values, dtype=dtype).view(Tensor)


class Recorder:
    """Counts wrappers and keeps every call's arguments by parameter name (defaults filled in)."""
    made = 0

    def record(self, method: str, args: dict[str, Any]) -> None:
        args = {k: v for k, v in args.items() if k not in ("self", "__class__")}
        self.calls.append((method, args))
        if method == "plan":
            self.plans += 1
        if method == "run":
            self.runs += 1

    def start(self) -> None:
        Recorder.made += 1
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.plans = 0
        self.runs = 0

    def last(self, method: str) -> dict[str, Any]:
        return [a for m, a in self.calls if m == method][-1]


# flashinfer 0.7.4 (flashinfer/decode.py): plan takes its options past page_size by name (positional ones are
# deprecated), checked against the keyword-only parameters of its shared implementation.
class Decode074(Recorder):
    def __init__(self, float_workspace_buffer: Any, kv_layout: str = "NHD", use_cuda_graph: bool = False,
                 use_tensor_cores: bool = False, paged_kv_indptr_buffer: Any = None,
                 paged_kv_indices_buffer: Any = None, paged_kv_last_page_len_buffer: Any = None,
                 backend: str = "auto", jit_args: Any = None, jit_kwargs: Any = None) -> None:
        self.start()
        self.record("__init__", locals())

    def plan(self, indptr: Any, indices: Any, last_page_len: Any, num_qo_heads: int, num_kv_heads: int,
             head_dim: int, page_size: int, *deprecated_positional_args: Any, **kwargs: Any) -> None:
        assert not deprecated_positional_args, "0.7.4 deprecates plan's options passed by position"
        self._plan_impl(indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, **kwargs)

    def _plan_impl(self, indptr: Any, indices: Any, last_page_len: Any, num_qo_heads: int, num_kv_heads: int,
                   head_dim: int, page_size: int, *, pos_encoding_mode: str = "NONE", window_left: int = -1,
                   window_right: int = 0, logits_soft_cap: Any = None, q_data_type: Any = "float16",
                   kv_data_type: Any = None, o_data_type: Any = None, data_type: Any = None, sm_scale: Any = None,
                   rope_scale: Any = None, rope_theta: Any = None, non_blocking: bool = True,
                   block_tables: Any = None, seq_lens: Any = None, fixed_split_size: Any = None,
                   disable_split_kv: bool = False, q_len_per_req: int = 1, is_causal: Any = None,
                   use_token_head_sf: bool = False) -> None:
        self.record("plan", locals())

    def run(self, q: Any, paged_kv_cache: Any, *args: Any, q_scale: Any = None, k_scale: Any = None,
            v_scale: Any = None, out: Any = None, lse: Any = None, return_lse: bool = False, enable_pdl: Any = None,
            window_left: Any = None, sinks: Any = None, q_len_per_req: Any = None,
            skip_softmax_threshold_scale_factor: Any = None, kv_cache_sf: Any = None) -> Any:
        self.record("run", locals())
        return ("o", "lse") if return_lse else "o"


def by_name_only(method: Any) -> Any:
    """0.7.4 warns that arguments given to MLA's plan or run by position are deprecated: the stand-in refuses them."""
    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        assert not args, f"{method.__name__} given {len(args)} argument(s) by position"
        return method(self, **kwargs)

    return wrapped


# flashinfer 0.7.4 (flashinfer/mla/_batch_mla/_wrapper.py): every plan parameter optional (flat CSR metadata, a
# `metadata=` object or a dense table); the log-sum-exp's form fixed at plan (`lse_mode`); positional arguments to
# plan and run deprecated.
class Mla074(Recorder):
    def __init__(self, float_workspace_buffer: Any, use_cuda_graph: bool = False, qo_indptr: Any = None,
                 kv_indptr: Any = None, kv_indices: Any = None, kv_len_arr: Any = None, backend: str = "auto") -> None:
        self.start()
        self.record("__init__", locals())

    @by_name_only
    def plan(self, qo_indptr: Any = None, kv_indptr: Any = None, kv_indices: Any = None, kv_len_arr: Any = None,
             num_heads: Any = None, head_dim_ckv: Any = None, head_dim_kpe: Any = None, page_size: Any = None,
             causal: Any = None, sm_scale: Any = None, q_data_type: Any = None, kv_data_type: Any = None,
             use_profiler: bool = False, *, metadata: Any = None, cum_seq_lens_q: Any = None,
             block_tables: Any = None, seq_lens: Any = None, max_q_len: Any = None, query_layout: Any = None,
             kv_cache_layout: Any = None, lse_mode: str = "none", output_dtype: Any = None,
             output_scale: str = "none", scale_mode: str = "default", skip_softmax: bool = False,
             enable_pdl: Any = None, use_sinks: bool = False) -> None:
        self.record("plan", locals())

    @by_name_only
    def run(self, q_nope: Any = None, q_pe: Any = None, ckv_cache: Any = None, kpe_cache: Any = None,
            out: Any = None, lse: Any = None, return_lse: bool = False, profiler_buffer: Any = None,
            kv_len: Any = None, page_table: Any = None, return_lse_base_on_e: bool = False, o_scale: Any = None, *,
            query: Any = None, kv_cache: Any = None, ckv_scale: Any = None, ckv_scale_arr: Any = None,
            kpe_scale: Any = None, sinks: Any = None, skip_softmax_threshold_scale_factor: Any = None,
            bmm1_scale: Any = None, bmm2_scale: Any = None) -> Any:
        self.record("run", locals())
        return ("output", "lse") if return_lse else "output"


# flashinfer 0.2.14 (flashinfer/decode.py): plan's options positional or by name.
class Decode0214(Recorder):
    def __init__(self, float_workspace_buffer: Any, kv_layout: str = "NHD", use_cuda_graph: bool = False,
                 use_tensor_cores: bool = False, paged_kv_indptr_buffer: Any = None,
                 paged_kv_indices_buffer: Any = None, paged_kv_last_page_len_buffer: Any = None,
                 backend: str = "auto", jit_args: Any = None) -> None:
        self.start()
        self.record("__init__", locals())

    def plan(self, indptr: Any, indices: Any, last_page_len: Any, num_qo_heads: int, num_kv_heads: int,
             head_dim: int, page_size: int, pos_encoding_mode: str = "NONE", window_left: int = -1,
             logits_soft_cap: Any = None, q_data_type: Any = "float16", kv_data_type: Any = None,
             data_type: Any = None, sm_scale: Any = None, rope_scale: Any = None, rope_theta: Any = None,
             non_blocking: bool = True, block_tables: Any = None, seq_lens: Any = None) -> None:
        self.record("plan", locals())

    def run(self, q: Any, paged_kv_cache: Any, *args: Any, q_scale: Any = None, k_scale: Any = None,
            v_scale: Any = None, out: Any = None, lse: Any = None, return_lse: bool = False, enable_pdl: Any = None,
            window_left: Any = None, sinks: Any = None) -> Any:
        self.record("run", locals())
        return ("o", "lse") if return_lse else "o"


# flashinfer 0.2.14 (flashinfer/mla.py): the shapes and dtypes all required; no `lse_mode` (base 2 from run).
class Mla0214(Recorder):
    def __init__(self, float_workspace_buffer: Any, use_cuda_graph: bool = False, qo_indptr: Any = None,
                 kv_indptr: Any = None, kv_indices: Any = None, kv_len_arr: Any = None, backend: str = "auto") -> None:
        self.start()
        self.record("__init__", locals())

    def plan(self, qo_indptr: Any, kv_indptr: Any, kv_indices: Any, kv_len_arr: Any, num_heads: int,
             head_dim_ckv: int, head_dim_kpe: int, page_size: int, causal: bool, sm_scale: float, q_data_type: Any,
             kv_data_type: Any, use_profiler: bool = False) -> None:
        self.record("plan", locals())

    def run(self, q_nope: Any, q_pe: Any, ckv_cache: Any, kpe_cache: Any, out: Any = None, lse: Any = None,
            return_lse: bool = False, profiler_buffer: Any = None, kv_len: Any = None, page_table: Any = None) -> Any:
        self.record("run", locals())
        return ("output", "lse") if return_lse else "output"


# flashinfer 0.6.18.post1 (the one-call fallback of bench/stage_flashinfer.sh): decode as 0.7.4 less a few options;
# MLA's plan as 0.2.14's, its run as 0.7.4's without the structural forms (base 2 unless `return_lse_base_on_e`).
class Decode0618(Decode074):
    def __init__(self, float_workspace_buffer: Any, kv_layout: str = "NHD", use_cuda_graph: bool = False,
                 use_tensor_cores: bool = False, paged_kv_indptr_buffer: Any = None,
                 paged_kv_indices_buffer: Any = None, paged_kv_last_page_len_buffer: Any = None,
                 backend: str = "auto", jit_args: Any = None) -> None:
        self.start()
        self.record("__init__", locals())

    def _plan_impl(self, indptr: Any, indices: Any, last_page_len: Any, num_qo_heads: int, num_kv_heads: int,
                   head_dim: int, page_size: int, *, pos_encoding_mode: str = "NONE", window_left: int = -1,
                   window_right: int = 0, logits_soft_cap: Any = None, q_data_type: Any = "float16",
                   kv_data_type: Any = None, o_data_type: Any = None, data_type: Any = None, sm_scale: Any = None,
                   rope_scale: Any = None, rope_theta: Any = None, non_blocking: bool = True,
                   block_tables: Any = None, seq_lens: Any = None, fixed_split_size: Any = None,
                   disable_split_kv: bool = False, q_len_per_req: int = 1) -> None:
        self.record("plan", locals())


class Mla0618(Mla0214):
    def run(self, q_nope: Any, q_pe: Any, ckv_cache: Any, kpe_cache: Any, out: Any = None, lse: Any = None,
            return_lse: bool = False, profiler_buffer: Any = None, kv_len: Any = None, page_table: Any = None,
            return_lse_base_on_e: bool = False, o_scale: Any = None, *, ckv_scale: Any = None,
            ckv_scale_arr: Any = None, kpe_scale: Any = None) -> Any:
        self.record("run", locals())
        return ("output", "lse") if return_lse else "output"


RELEASES = {"0.7.4": (Decode074, Mla074), "0.6.18.post1": (Decode0618, Mla0618),
            "0.2.14": (Decode0214, Mla0214)}
TASKS = [("gqa-paged-decode", "flashinfer_decode"), ("mla-paged-decode", "flashinfer_mla"),
         ("mla-paged-prefill", "flashinfer_mla")]
DIMS = {"B": 2, "Hq": 32, "Hkv": 4, "D": 128, "H": 16, "Dckv": 512, "Dkpe": 64}


@pytest.fixture(params=sorted(RELEASES))
def release(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Stand-ins for torch and for one FlashInfer release, in sys.modules."""
    decode, mla = RELEASES[request.param]
    torch = types.SimpleNamespace(
        int8="int8", int32="int32", zeros=lambda *a, **k: "workspace",
        ones=lambda n, dtype=None, device=None: tensor(np.ones(n), dtype),
        arange=lambda n, dtype=None, device=None: tensor(np.arange(n), dtype))
    flashinfer = types.SimpleNamespace(__version__=request.param, BatchDecodeWithPagedKVCacheWrapper=decode,
                                       mla=types.SimpleNamespace(BatchMLAPagedAttentionWrapper=mla))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "flashinfer", flashinfer)
    Recorder.made = 0
    return str(request.param)


def baselines(task: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"baselines_{task.replace('-', '_')}", REPO / "tasks" / task /
                                                  "baselines.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def a_set() -> dict[str, Tensor]:
    """Two sequences of 3 and 2 pages (page size 1); for the prefill, 1 and 2 query tokens."""
    floats = {n: tensor([1.0], "float16") for n in ("q", "k_cache", "v_cache", "q_nope", "q_pe", "ckv_cache",
                                                     "kpe_cache")}
    return {**floats, "qo_indptr": tensor([0, 1, 3], "int32"), "kv_indptr": tensor([0, 3, 5], "int32"),
            "kv_indices": tensor([4, 5, 6, 1, 0], "int32")}


def wrappers(m: Any) -> list[Any]:
    return [entry if isinstance(entry, Recorder) else entry[0] for entry in m._wrappers.values()]


@pytest.mark.parametrize(("task", "fn"), TASKS)
def test_each_input_set_is_planned_once_and_run_at_every_call(release: str, task: str, fn: str) -> None:
    m = baselines(task)
    call = getattr(m, fn)
    a, b = a_set(), a_set()
    for s in (a, a, b, a, b, a):
        call(dict(s), DIMS)
    made = wrappers(m)
    assert Recorder.made == 2 and sorted(w.plans for w in made) == [1, 1], [w.plans for w in made]
    assert sorted(w.runs for w in made) == [2, 4]
    # Another set made of new tensor objects is planned afresh, whatever addresses it reuses.
    call(dict(a_set()), DIMS)
    assert Recorder.made == 3


def test_gqa_decode_calls_mean_the_task(release: str) -> None:
    m = baselines("gqa-paged-decode")
    s = a_set()
    assert m.flashinfer_decode(dict(s), DIMS) == {"o": "o", "lse": "lse"}
    (w,) = wrappers(m)
    assert w.last("__init__")["kv_layout"] == "NHD"  # (P, 1, Hkv, D): pages, tokens in a page, heads, features
    plan, run = w.last("plan"), w.last("run")
    assert plan["indptr"] is s["kv_indptr"] and plan["indices"] is s["kv_indices"]
    assert plan["last_page_len"].tolist() == [1, 1] and plan["page_size"] == 1
    assert (plan["num_qo_heads"], plan["num_kv_heads"], plan["head_dim"]) == (32, 4, 128)
    assert plan["q_data_type"] == s["q"].dtype and plan["kv_data_type"] == s["k_cache"].dtype
    assert plan["sm_scale"] is None and plan["pos_encoding_mode"] == "NONE"  # 1 / sqrt(D), no rotary
    assert run["q"] is s["q"] and run["return_lse"] is True
    assert run["paged_kv_cache"][0] is s["k_cache"] and run["paged_kv_cache"][1] is s["v_cache"]


@pytest.mark.parametrize(("task", "causal"), [("mla-paged-decode", False), ("mla-paged-prefill", True)])
def test_mla_calls_mean_the_task(release: str, task: str, causal: bool) -> None:
    m = baselines(task)
    s = a_set()
    assert m.flashinfer_mla(dict(s), DIMS) == {"output": "output", "lse": "lse"}
    (w,) = wrappers(m)
    assert w.last("__init__")["backend"] == "auto"
    plan, run = w.last("plan"), w.last("run")
    if task == "mla-paged-prefill":
        assert plan["qo_indptr"] is s["qo_indptr"]
    else:
        assert plan["qo_indptr"].tolist() == [0, 1, 2]  # one query token each
    assert plan["kv_indptr"] is s["kv_indptr"] and plan["kv_indices"] is s["kv_indices"]
    assert plan["kv_len_arr"].tolist() == [3, 2] and plan["page_size"] == 1 and plan["causal"] is causal
    assert (plan["num_heads"], plan["head_dim_ckv"], plan["head_dim_kpe"]) == (16, 512, 64)
    assert plan["sm_scale"] == pytest.approx(1 / math.sqrt(128 + 64))
    assert plan["q_data_type"] == s["q_nope"].dtype and plan["kv_data_type"] == s["ckv_cache"].dtype
    if "lse_mode" in plan:  # 0.7.4: base 2 asked for at plan, so run's log-sum-exp is base 2 as the task's
        assert plan["lse_mode"] == "base2"
        assert plan["metadata"] is None and plan["query_layout"] is None  # the flat CSR form: split q and caches
    assert run["return_lse"] is True and not run.get("return_lse_base_on_e")
    assert run["q_nope"] is s["q_nope"] and run["q_pe"] is s["q_pe"]
    assert run["ckv_cache"] is s["ckv_cache"] and run["kpe_cache"] is s["kpe_cache"]


def _parameters(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_stand_ins_have_the_installed_releases_parameter_lists() -> None:
    """Where FlashInfer itself is importable (the device, after bench/stage_flashinfer.sh's install): the stand-ins
    of its release list the same parameters, in the same order, of the same kinds, with the same defaults."""
    try:
        import flashinfer
        import flashinfer.mla
    except Exception as exc:  # torch or FlashInfer missing (here: always), or broken
        pytest.skip(f"flashinfer not importable: {type(exc).__name__}")
    version = str(flashinfer.__version__).split("+")[0]
    if version not in RELEASES:
        pytest.skip(f"no stand-ins for flashinfer {version}")
    decode, mla = RELEASES[version]
    for fake, real in ((decode, flashinfer.BatchDecodeWithPagedKVCacheWrapper),
                       (mla, flashinfer.mla.BatchMLAPagedAttentionWrapper)):
        for method in ("__init__", "plan", "run"):
            assert _parameters(getattr(fake, method)) == _parameters(getattr(real, method)), (real, method)
    if hasattr(decode, "_plan_impl"):
        impl = flashinfer.BatchDecodeWithPagedKVCacheWrapper._plan_impl
        assert _parameters(decode._plan_impl) == _parameters(impl)
