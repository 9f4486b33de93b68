import numpy as np


def reference(inputs, dims):
    return {"hist": np.bincount(inputs["data"].astype(np.int64) & 255, minlength=256)}
