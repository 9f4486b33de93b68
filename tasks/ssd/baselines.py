"""Baseline timed next to every ssd candidate on the MLX targets.

It receives the task inputs as mx.arrays in their real dtypes (x, dt, Bm, Cm in T; A_log, Dskip, dt_bias in
float32) and returns lazy mx.arrays: y (B, L, H, P) in T and state (B, H, P, N) in float32.

- mlx_lm_ssm_attn: mlx-lm's own Mamba-2 SSD prefill, `mlx_lm.models.ssm.ssm_attn` (mlx-lm 0.32.2), exactly
  as Mamba2Block / nemotron_h call it (through `ssm_update`) for a prompt with no cache: state=None,
  time_step_limit=(0.001, 100.0), no mask, step=256 (its default chunk length).
"""
import mlx.core as mx
from mlx_lm.models.ssm import ssm_attn


def mlx_lm_ssm_attn(inputs: dict[str, mx.array], dims: dict[str, int]) -> dict[str, mx.array]:
    """mlx-lm's ssm_attn on the task's inputs. What is timed: ssm_attn itself (compute_dt, the Python loop
    over 256-step chunks of MLX ops: C B^T, segsum decays, the masked score matmul, the chunk state and the
    carried-state terms, then + D x) and a final cast of y to T: ssm_attn returns y as
    concatenate(chunks in T) + x * D, which is float32 when D is float32 (as here)."""
    y, state = ssm_attn(
        inputs["x"], inputs["A_log"], inputs["Bm"], inputs["Cm"], inputs["Dskip"], inputs["dt"],
        inputs["dt_bias"], state=None, time_step_limit=(0.001, 100.0),
    )
    return {"y": y.astype(inputs["x"].dtype), "state": state.astype(mx.float32)}
