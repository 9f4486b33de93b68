"""The `__cluster_dims__` declaration of a cluster launch (ksearch_worker.cluster) against the signature MLX
generates. MLX's CUDA back-end is not on this machine: the generated text below is laid out the way
mlx/backend/cuda/custom_kernel.cpp (build_kernel) writes it; on a CUDA machine the worker compares the two
on the real text before a cluster kernel's first launch."""

from __future__ import annotations

import pytest

from ksearch_worker import cluster

SOURCE = "ksdec::decode_cluster<T, D, NTD, NC>(q, k, v, o); // reads k_shape\n"


def generated(function: str) -> str:
    """A kernel source as MLX generates it for SOURCE with inputs q, k (3-d, k_shape used), scalar n, output o."""
    return ('\n#include "mlx/backend/cuda/device/utils.cuh"\n\n#include <cooperative_groups.h>\n\n'
            "// the plan's header\nnamespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
            f"__global__ void {function}(\n    const __half* q,\n    const __half* k,\n"
            "    const __grid_constant__ Shape k_shape,\n    const int32_t* n,\n    __half* o) {\n"
            "  constexpr int D = 128;\n  constexpr int NC = 8;\n  using T = __half;\n\n" + SOURCE +
            "\n}\n\n} // namespace mlx::core::cu\n")


def test_kernel_name_carries_the_template_hash() -> None:
    template = [("D", 128), ("NC", 8), ("CAUSAL", False), ("T", "mlx.core.float16"), ("U", "bfloat16")]
    assert cluster.kernel_name("attn_decode_ab12", template) == "custom_kernel_attn_decode_ab12_128_8_f_float16_t_bfloat16_t"
    assert cluster.kernel_name("k", []) == "custom_kernel_k"


def test_declaration_matches_the_generated_signature() -> None:
    inputs = [("q", "float16", 3), ("k", "float16", 3), ("n", "int32", 0)]
    template = [("D", 128), ("NC", 8), ("T", "float16")]
    function = cluster.kernel_name("attn", template)
    decl = cluster.declaration("attn", SOURCE, inputs, [("o", "float16")], template, (8, 1, 1))
    assert f"__global__ void __cluster_dims__(8, 1, 1) {function}(" in decl
    assert decl.strip().startswith("namespace mlx::core::cu {") and decl.strip().endswith("}")
    declared = cluster.parameters(SOURCE, inputs, [("o", "float16")])
    assert declared == ["const __half* q", "const __half* k", "const __grid_constant__ Shape k_shape",
                        "const int32_t* n", "__half* o"]
    assert cluster.generated_parameters(generated(function), function) == declared
    # A mismatch is seen: another dtype, a shape parameter left out, another function.
    assert cluster.generated_parameters(generated(function), function) != cluster.parameters(
        SOURCE, [("q", "bfloat16", 3), ("k", "float16", 3), ("n", "int32", 0)], [("o", "float16")])
    assert cluster.generated_parameters(generated(function), function) != cluster.parameters(
        "no shapes", inputs, [("o", "float16")])
    assert cluster.generated_parameters(generated(function), function + "_1") is None


def test_scalars_and_unused_shapes_get_no_shape_parameters() -> None:
    # A 0-d input has no shape parameters even when the body names one; an unnamed shape is not passed.
    ps = cluster.parameters("x_shape n_shape", [("x", "float32", 2), ("n", "int32", 0), ("y", "bfloat16", 1)],
                            [("out", "float32")])
    assert ps == ["const float* x", "const __grid_constant__ Shape x_shape", "const int32_t* n",
                  "const __nv_bfloat16* y", "float* out"]


def test_clusters_are_refused_under_cuda_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLX_USE_CUDA_GRAPHS", raising=False)
    monkeypatch.delenv("KSEARCH_ALLOW_CLUSTERS", raising=False)
    why = cluster.refusal()
    assert why is not None and "MLX_USE_CUDA_GRAPHS=0" in why and "KSEARCH_ALLOW_CLUSTERS=1" in why
    monkeypatch.setenv("MLX_USE_CUDA_GRAPHS", "1")
    assert cluster.refusal() is not None
    monkeypatch.setenv("MLX_USE_CUDA_GRAPHS", "0")
    assert cluster.refusal() is None
    monkeypatch.delenv("MLX_USE_CUDA_GRAPHS")
    monkeypatch.setenv("KSEARCH_ALLOW_CLUSTERS", "1")
    assert cluster.refusal() is None

