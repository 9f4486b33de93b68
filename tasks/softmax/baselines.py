"""Baselines timed next to every softmax candidate; inputs arrive as float32."""
import numpy as np


def numpy_softmax(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    # The standard numerically safe float32 softmax: subtract the row max, exponentiate, normalise.
    x = inputs["x"].reshape(dims["M"], dims["N"])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return {"y": e}


def mlx_softmax(inputs: dict, dims: dict[str, int]) -> dict:
    # MLX's own softmax (the MLX targets hand mx.arrays in and take lazy mx.arrays back). Imported here
    # so the CPU target never needs MLX.
    import mlx.core as mx

    return {"y": mx.softmax(inputs["x"], axis=-1, precise=True)}
