"""Reference for matmul: C = A @ B computed in float64 (inputs arrive as float64 copies)."""
import numpy as np


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    A = inputs["A"].reshape(dims["M"], dims["K"])
    B = inputs["B"].reshape(dims["K"], dims["N"])
    return {"C": A @ B}
