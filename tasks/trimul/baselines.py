"""Baselines timed next to every trimul candidate on the cuda target.

Contract of the cuda target's baselines: each receives the task's inputs as torch.Tensors on the CUDA device,
in their real dtypes (what a candidate receives), and `dims`; it returns a dict of output tensors by name
(on the device).

Here every input is float32: x (B, S, S, D), mask (B, S, S), the LayerNorm scales and shifts, the five
projections (H, D) and to_out (D, H) in nn.Linear's layout; out (B, S, S, D) in float32.

- torch_trimul: GPU MODE's reference module written as PyTorch calls (layer_norm, linear, sigmoid, the
  triangle sum as a batched matrix product per channel, layer_norm, linear), in float32 as its reference
  runs: what its entries were measured against. Float32 matrix products follow PyTorch's own setting
  (full float32 unless a program allows TF32); the baseline does not change it.

It imports torch when called, so the task loads, and its candidates run, where torch is missing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

EPS = 1e-5  # nn.LayerNorm's default


def torch_trimul(inputs: dict[str, torch.Tensor], dims: dict[str, int]) -> dict[str, torch.Tensor]:
    import torch
    import torch.nn.functional as F

    D, H = dims["D"], dims["H"]
    z = F.layer_norm(inputs["x"], (D,), inputs["norm_weight"], inputs["norm_bias"], EPS)
    mask = inputs["mask"].unsqueeze(-1)
    left = F.linear(z, inputs["left_proj"]) * mask * torch.sigmoid(F.linear(z, inputs["left_gate"]))
    right = F.linear(z, inputs["right_proj"]) * mask * torch.sigmoid(F.linear(z, inputs["right_gate"]))
    out_gate = torch.sigmoid(F.linear(z, inputs["out_gate"]))
    # t[b, i, j, c] = sum_k left[b, i, k, c] right[b, j, k, c]: one (S x S) (S x S)^T product per (b, c).
    t = torch.matmul(left.permute(0, 3, 1, 2), right.permute(0, 3, 2, 1)).permute(0, 2, 3, 1)
    t = F.layer_norm(t, (H,), inputs["out_norm_weight"], inputs["out_norm_bias"], EPS)
    return {"out": F.linear(t * out_gate, inputs["to_out"])}
