"""The cuda target without a GPU: a plan's launches as the worker makes them (name expressions, blocks,
scalars, bfloat16 on the device), and every shipped cuda seed compiled by the jailed NVRTC for sm_90a with
the template values of every workload, as the worker compiles them before a candidate's first call."""

from __future__ import annotations

import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ksearch_worker import jail, nvrtc
from ksearch_worker.pool import round_bf16
from ksearch_worker.targets import CandidateFailure, cuda

REPO = Path(__file__).resolve().parents[2]


def test_a_launch_calls_its_kernel_with_template_values_then_type_arguments() -> None:
    # As the Rust side sends it: `template` keyed by name (in name order), `template_order` the plan's order.
    launch = {"kernel": "split", "template": {"CH": 256, "D": 128, "Hq": 32}, "template_order": ["D", "Hq", "CH"],
              "type_args": {"T": "bfloat16"}}
    assert cuda.name_expression("split", launch) == "split<128, 32, 256, __nv_bfloat16>"
    assert cuda.name_expression("k", {"type_args": {"U": "int32", "T": "float16"}}) == "k<__half, int>"
    assert cuda.name_expression("plain", {"template": {}, "type_args": {}}) == "plain"


def test_the_grid_counts_threads_and_the_device_launches_whole_blocks() -> None:
    assert cuda.blocks([4096, 4, 1], [128, 1, 1]) == (32, 4, 1)
    assert cuda.blocks([1000, 3, 5], [256, 2, 4]) == (4, 2, 2)  # a partial block still runs: kernels guard
    assert cuda.blocks([0, 1, 1], [32, 1, 1]) == (0, 1, 1)
    with pytest.raises(CandidateFailure):
        cuda.blocks([32, 1, 1], [0, 1, 1])


def test_scalars_reach_the_kernel_as_int_by_value_or_are_refused() -> None:
    got = cuda.scalar_args({"kernel": "k", "scalars": [7, -3, 2**31 - 1]})
    assert [type(x) for x in got] == [np.int32] * 3 and [int(x) for x in got] == [7, -3, 2**31 - 1]
    with pytest.raises(CandidateFailure, match="does not fit"):
        cuda.scalar_args({"kernel": "k", "scalars": [2**31]})


def test_bfloat16_travels_as_its_top_16_bits_exactly() -> None:
    x = round_bf16(np.random.default_rng(3).standard_normal(1000).astype(np.float32) * 100)
    bits = cuda.to_device_layout(x, "bfloat16")
    assert bits.dtype == np.uint16
    back = cuda.from_device_layout(bits, "bfloat16")
    assert back.dtype == np.float32 and np.array_equal(back.view(np.uint32), x.view(np.uint32))
    # A value between two bfloat16s, rounded to the nearest (ties to even) for an init fill.
    assert int(cuda.fill_bits(1.0, "bfloat16")) == 0x3F80
    assert int(cuda.fill_bits(1.0 + 2**-8, "bfloat16")) == 0x3F80  # a tie: even
    assert int(cuda.fill_bits(1.0 + 3 * 2**-8, "bfloat16")) == 0x3F82
    assert cuda.device_dtype("float16") == np.float16
    with pytest.raises(Exception, match="no dtype"):
        cuda.device_dtype("complex64")


def test_a_module_is_its_header_and_file_with_lines_that_point_into_the_file() -> None:
    spec = {"source": "__global__ void k(float* y) { y[0] = 1; }\n", "source_name": "k.cu",
            "header": "", "header_name": "helpers.cuh"}
    text = cuda.module_source(spec)
    assert text.startswith(cuda.PRELUDE)
    assert text.endswith('#include "helpers.cuh"\n#line 1 "k.cu"\n' + spec["source"])
    assert cuda.arch_of("9.0") == "90a" and cuda.arch_of("8.6") == "86" and cuda.arch_of(None) is None


# -- the seeds, compiled as the worker compiles them ---------------------------------------------------------

def _seeds() -> Iterator[tuple[Path, Path]]:
    for plan in sorted(REPO.glob("tasks/*/seeds/cuda/*/plan.toml")):
        yield plan.parents[3], plan.parent


def _compile(source: str, name: str, expression: str, files: dict[str, str]) -> nvrtc.Compiled:
    lib = cuda.library()
    if lib is None:
        pytest.fail("libnvrtc is missing: python/requirements-test.txt installs nvidia-cuda-nvrtc")
    include = cuda.include_paths()
    if not any((Path(p) / "cuda_bf16.h").exists() for p in include):
        pytest.fail("the CUDA headers are missing: python/requirements-test.txt installs nvidia-cuda-runtime")
    request = cuda.compile_request(source, name, expression, files, "90a", include, lib)
    return nvrtc.compile_jailed(request, Path(tempfile.mkdtemp(prefix="ksearch-cuda-test-")),
                                [*include, str(Path(lib).parent)], jail.env)


def _instantiations(task: dict[str, Any], plan: dict[str, Any]) -> set[tuple[str, str]]:
    """(kernel, name expression) of every launch on every workload with the tunables' defaults, and on the
    first workload with each tunable's every value."""
    dtype_of = {t["name"]: t["dtype"] for t in task["input"] + task["output"]}
    for b in plan.get("buffer", []):
        dtype_of[b["name"]] = b["dtype"]
    defaults = {n: t["default"] for n, t in plan.get("tunable", {}).items()}
    choices = [defaults] + [{**defaults, n: v} for n, t in plan.get("tunable", {}).items() for v in t["values"]]
    out = set()
    for i, w in enumerate(task["workload"]):
        for params in choices if i == 0 else [defaults]:
            values = {**w["dims"], **params}
            types = w.get("types", {})
            for launch in plan["launch"]:
                # As the Rust side resolves it (crates/ksearch-model/src/candidate.rs, ResolvedLaunch).
                resolved = {"template": {n: values[n] for n in sorted(launch.get("template", []))},
                            "template_order": list(launch.get("template", [])),
                            "type_args": {t: types.get(dtype_of[a], dtype_of[a])
                                          for t, a in sorted(launch.get("type_args", {}).items())}}
                out.add((launch["kernel"], cuda.name_expression(launch["kernel"], resolved)))
    return out


@pytest.mark.parametrize("task_dir, seed", list(_seeds()), ids=lambda p: "/".join(Path(p).parts[-4:]))
def test_every_cuda_seed_compiles_for_sm90a_on_every_workload(task_dir: Path, seed: Path) -> None:
    task = tomllib.loads((task_dir / "task.toml").read_text())
    plan = tomllib.loads((seed / "plan.toml").read_text())
    files = {p.name: p.read_text() for p in seed.iterdir() if p.name != "plan.toml"}
    kernels = {k["name"]: k for k in plan["kernel"]}
    import concurrent.futures
    jobs = sorted(_instantiations(task, plan))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda job: _compile(cuda.module_source({
            "source": files[kernels[job[0]]["source"]], "source_name": kernels[job[0]]["source"],
            "header_name": kernels[job[0]].get("header")}), kernels[job[0]]["source"], job[1], files), jobs))
    for (kernel, expression), d in zip(jobs, done, strict=True):
        assert d.code is not None and not d.infrastructure, f"{seed.name} {expression}:\n{d.log}"
        assert d.lowered.startswith("_Z") and kernel in d.lowered, d.lowered


def _adversarial() -> Iterator[Path]:
    for plan in sorted(REPO.glob("tests/adversarial/cuda/*/plan.toml")):
        if 'status = "refused"' not in (plan.parent / "expect.toml").read_text():
            yield plan.parent


@pytest.mark.parametrize("cand", list(_adversarial()), ids=lambda p: Path(p).name)
def test_every_cuda_adversarial_candidate_compiles_for_sm90a(cand: Path) -> None:
    """The suite's cheats must reach the device (bench/adversarial_mlx.sh with SUITE=cuda): each compiles."""
    plan = tomllib.loads((cand / "plan.toml").read_text())
    files = {p.name: p.read_text() for p in cand.iterdir() if p.name not in ("plan.toml", "expect.toml")}
    for k in plan["kernel"]:
        spec = {"source": files[k["source"]], "source_name": k["source"], "header_name": k.get("header")}
        d = _compile(cuda.module_source(spec), k["source"], k["name"], files)
        assert d.code is not None and not d.infrastructure, f"{cand.name} {k['name']}:\n{d.log}"


def test_a_compile_error_is_the_candidates_and_names_its_file_and_line() -> None:
    source = "template <typename T>\n__global__ void k(const T* x, T* y) {\n  y[0] = undeclared;\n}\n"
    d = _compile(cuda.module_source({"source": source, "source_name": "mine.cu"}), "mine.cu", "k<float>", {})
    assert d.code is None and not d.infrastructure
    assert 'mine.cu(3)' in d.log and "undeclared" in d.log, d.log


def test_a_candidate_header_is_found_by_name_and_nothing_outside_is() -> None:
    secret = Path(tempfile.mkdtemp()) / "secret.cuh"
    secret.write_text("#define LEAK 1\n")
    secret.chmod(0o600)
    ok = _compile(cuda.module_source({"source": '#include "mine.cuh"\n__global__ void k(float* y) { y[0] = TWO; }\n',
                                      "source_name": "k.cu"}), "k.cu", "k", {"mine.cuh": "#define TWO 2.0f\n"})
    assert ok.code is not None, ok.log
    leak = _compile(cuda.module_source({"source": f'#include "{secret}"\n__global__ void k(float* y) {{ y[0] = LEAK; }}\n',
                                        "source_name": "k.cu"}), "k.cu", "k", {})
    assert leak.code is None and "cannot open source file" in leak.log
