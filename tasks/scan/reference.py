"""Reference for scan: the recurrence in float64, one step at a time, vectorised over (B, D)."""
import numpy as np


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    shape = (dims["B"], dims["D"], dims["L"])
    a, b = inputs["a"].reshape(shape), inputs["b"].reshape(shape)
    h = np.empty(shape, np.float64)
    state = np.zeros(shape[:2], np.float64)  # h_{-1} = 0
    for t in range(shape[2]):
        state = a[:, :, t] * state + b[:, :, t]
        h[:, :, t] = state
    return {"h": h}
