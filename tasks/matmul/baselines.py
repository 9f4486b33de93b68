"""Baselines timed next to every matmul candidate; inputs arrive in their real dtype (float32)."""
import numpy as np


def numpy_matmul(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    # np.matmul on float32 calls the BLAS numpy was built with (OpenBLAS in the wheels).
    return {"C": np.matmul(inputs["A"], inputs["B"])}
