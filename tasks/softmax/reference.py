"""Reference and input generator for softmax."""
import numpy as np


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    x = inputs["x"].reshape(dims["M"], dims["N"])  # float64 copy of the float32 inputs
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return {"y": e / e.sum(axis=-1, keepdims=True)}


def make_inputs(dims: dict[str, int], dtypes: dict[str, str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """x[i, :] = offset_i + scale_i * laplace(0, 1).

    offset_i in [100, 150]: the row max exceeds 88.7, so exp(x) without subtracting the max overflows
    float32 on every row. scale_i log-uniform in [0.5, 30]: small scales give nearly flat rows (the sum
    of many similar terms must be accurate), large ones nearly one-hot rows whose x - max reaches -1000
    (exp must underflow cleanly to 0, not to garbage)."""
    M, N = dims["M"], dims["N"]
    offset = rng.uniform(100.0, 150.0, size=(M, 1))
    scale = np.exp(rng.uniform(np.log(0.5), np.log(30.0), size=(M, 1)))
    x = (offset + scale * rng.laplace(0.0, 1.0, size=(M, N))).astype(dtypes["x"])
    x[x == 0] = np.finfo(x.dtype).tiny  # the format promises no exact zeros in float draws
    return {"x": x}
