import numpy as np


def reference(inputs, dims):
    x = inputs["in"]
    blocks = -(-dims["n"] // 256)
    padded = np.zeros(blocks * 256)
    padded[: dims["n"]] = x
    return {"partial": padded.reshape(blocks, 256).sum(axis=1)}
