"""Baselines timed next to every mamba-scan candidate on the MLX targets.

Each receives the task inputs as mx.arrays in their real dtypes (u, delta, Bm, Cm, z in T; A, Dskip,
delta_bias in float32) and returns lazy mx.arrays: y (B, D, L) in T and state (B, D, N) in float32.

- mlx_lm_step_loop: mlx-lm's own Mamba-1 recurrence, `mlx_lm.models.mamba.MambaBlock.ssm_step`, called
  once per token as MambaBlock._process_sequence calls it (mlx-lm 0.32.2; needs the `mlx_lm` package).
- mlx_naive: the same recurrence written directly as a per-token loop of vectorised MLX ops.
"""
import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.activations import swiglu
from mlx_lm.models.mamba import MambaBlock, ModelArgs


class _PrecomputedXProj(nn.Module):
    """Stands in for MambaBlock.x_proj, the Linear that maps a token's conv output to [delta | B | C].
    Here delta, B and C are inputs of the task, so it returns the current token's precomputed row;
    the loop sets `row` before each ssm_step."""

    def __call__(self, x: mx.array) -> mx.array:
        return self.row


class _DtBias(nn.Module):
    """Stands in for MambaBlock.dt_proj (Linear(time_step_rank, D) with a bias). delta arrives already
    projected, so what is left of dt_proj is its bias: delta + delta_bias. softplus stays mlx-lm's."""

    def __call__(self, x: mx.array) -> mx.array:
        return x + self.bias


_blocks: dict[tuple[int, int], MambaBlock] = {}


def _block(D: int, N: int) -> MambaBlock:
    """A real mlx-lm MambaBlock of width D and state size N. time_step_rank = D, so that ssm_step's
    split of x_proj's output at [rank, rank + N] yields delta (D), B (N) and C (N). Its in_proj, conv1d,
    out_proj and the replaced projections' weights are never evaluated (MLX is lazy)."""
    if (D, N) not in _blocks:
        args = ModelArgs(model_type="mamba", vocab_size=1, hidden_size=1, intermediate_size=D, state_size=N,
                         num_hidden_layers=1, conv_kernel=4, use_bias=False, use_conv_bias=True, time_step_rank=D)
        block = MambaBlock(args)
        block.x_proj = _PrecomputedXProj()
        block.dt_proj = _DtBias()
        _blocks[(D, N)] = block
    return _blocks[(D, N)]


def _tokens(a: mx.array) -> mx.array:
    """(B, X, L) -> (B, L, X): mlx-lm's token-major layout (a view)."""
    return mx.swapaxes(a, 1, 2)


def mlx_lm_step_loop(inputs: dict[str, mx.array], dims: dict[str, int]) -> dict[str, mx.array]:
    """mlx-lm's Mamba-1 prefill recurrence on precomputed inputs. What is timed:
    1. the inputs to mlx-lm's token-major layout: x = u^T, and [delta | B | C]^T concatenated into the
       (B, L, D + 2N) array that x_proj would produce for the whole sequence;
    2. L calls of mlx-lm's own `MambaBlock.ssm_step(x_t, A, state)`, exactly as
       MambaBlock._process_sequence makes them, with x_proj replaced by a lookup of token t's row and
       dt_proj by its bias add (the two Linear layers are outside the scan; the rest of ssm_step, i.e.
       split, softplus, the state update, y_t = h_t C_t + D x_t, is mlx-lm's code);
    3. mx.stack of the y_t and mlx-lm's compiled `swiglu(z, y)` = silu(z) * y (the input of out_proj);
    4. the transposes back to (B, D, L) and the cast of y to T.
    Not timed: in_proj, conv1d, out_proj and the x_proj / dt_proj matmuls, which the real block runs
    per token on top of this (so the real layer is slower than this baseline)."""
    D, N, L = dims["D"], dims["N"], dims["L"]
    block = _block(D, N)
    block.dt_proj.bias = inputs["delta_bias"]
    block.D = inputs["Dskip"]
    A = inputs["A"]  # mlx-lm computes A = -exp(A_log) once per sequence; here A is the input itself
    x = _tokens(inputs["u"])
    deltaBC = mx.concatenate([_tokens(inputs["delta"]), _tokens(inputs["Bm"]), _tokens(inputs["Cm"])], axis=-1)
    state = None
    ys = []
    for t in range(L):  # MambaBlock._process_sequence's loop
        block.x_proj.row = deltaBC[:, t]
        y_t, state = block.ssm_step(x[:, t], A, state)
        ys.append(y_t)
    y = swiglu(_tokens(inputs["z"]), mx.stack(ys, axis=1))
    return {"y": _tokens(y).astype(inputs["u"].dtype), "state": state.astype(mx.float32)}


def mlx_naive(inputs: dict[str, mx.array], dims: dict[str, int]) -> dict[str, mx.array]:
    """A straightforward MLX composition, in float32: dt and dt*u for the whole sequence at once, then a
    Python loop over time with one vectorised (B, D, N) update and one reduction over N per step, then
    the skip and gate for the whole sequence."""
    B, D, N, L = dims["B"], dims["D"], dims["N"], dims["L"]
    f32 = mx.float32
    u = inputs["u"].astype(f32)
    Bm, Cm = inputs["Bm"].astype(f32), inputs["Cm"].astype(f32)
    A = inputs["A"]
    dt = nn.softplus(inputs["delta"].astype(f32) + inputs["delta_bias"][:, None])  # (B, D, L)
    du = dt * u
    h = mx.zeros((B, D, N), dtype=f32)
    ys = []
    for t in range(L):
        h = mx.exp(dt[:, :, t, None] * A) * h + du[:, :, t, None] * Bm[:, None, :, t]
        ys.append((h * Cm[:, None, :, t]).sum(axis=-1))
    y = (mx.stack(ys, axis=-1) + inputs["Dskip"][:, None] * u) * nn.silu(inputs["z"].astype(f32))
    return {"y": y.astype(inputs["u"].dtype), "state": h}
