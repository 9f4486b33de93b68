"""Baselines timed next to every softmax candidate; inputs arrive as float32."""
import numpy as np


def numpy_softmax(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    # The standard numerically safe float32 softmax: subtract the row max, exponentiate, normalise.
    x = inputs["x"].reshape(dims["M"], dims["N"])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return {"y": e}
