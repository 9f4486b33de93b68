"""Reference for trimul, in float64: AlphaFold3's triangle multiplicative update, "outgoing" edges, as GPU MODE's
trimul problem states it (no gradients).

x (B, S, S, D), mask (B, S, S); the weights in PyTorch's nn.Linear layout (out, in): left_proj, right_proj,
left_gate, right_gate, out_gate (H, D), to_out (D, H); LayerNorm scales and shifts norm_weight, norm_bias (D),
out_norm_weight, out_norm_bias (H). With LN(v; w, c) = (v - mean v) / sqrt(var v + 1e-5) * w + c over the last
axis (biased variance) and sigmoid(u) = 1 / (1 + exp(-u)):
  z = LN(x[b, i, k]; norm_weight, norm_bias)                                  (D)
  left[b, i, k]  = mask[b, i, k] * (left_proj z)  * sigmoid(left_gate z)      (H)
  right[b, i, k] = mask[b, i, k] * (right_proj z) * sigmoid(right_gate z)     (H)
  t[b, i, j] = sum_k left[b, i, k] * right[b, j, k]                           (H, elementwise in the channel)
  out[b, i, j] = to_out( LN(t[b, i, j]; out_norm_weight, out_norm_bias) * sigmoid(out_gate z[b, i, j]) )   (D)

The work is done in blocks of rows i, so that the float64 temporaries stay bounded (a block's normalised
rows and projections), and the triangle sum as one matrix product per channel.
"""
import math

import numpy as np

EPS = 1e-5  # nn.LayerNorm's default, as GPU MODE's module uses it
_ROWS = 64  # rows i per block
PROJECTIONS = ("left_proj", "right_proj", "left_gate", "right_gate", "out_gate")


def _layer_norm(v: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = v.mean(axis=-1, keepdims=True)
    centred = v - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + EPS) * weight + bias


def _sigmoid(u: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-u))


def make_inputs(dims: dict[str, int], dtypes: dict[str, str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """GPU MODE's draws: x normal(0, 1), or Cauchy with scale 2 when CAUCHY = 1 (heavy tails: rows with
    values in the thousands); mask all ones when MASKED = 0, else 0 or 1 at random; the LayerNorm scales and
    shifts normal(0, 1); the five projections from D to H normal(0, 1) / sqrt(H), to_out normal(0, 1) /
    sqrt(D)."""
    B, S, D, H = (dims[n] for n in ("B", "S", "D", "H"))

    def normal(shape: tuple[int, ...], name: str, scale: float = 1.0) -> np.ndarray:
        x = (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(dtypes[name])
        x[x == 0] = np.finfo(x.dtype).tiny  # the format promises no exact zeros in float draws
        return x

    if dims["CAUCHY"]:
        x = (2.0 * rng.standard_cauchy((B, S, S, D))).astype(dtypes["x"])
        x[x == 0] = np.finfo(x.dtype).tiny
    else:
        x = normal((B, S, S, D), "x")
    if dims["MASKED"]:
        mask = rng.integers(0, 2, size=(B, S, S)).astype(dtypes["mask"])
    else:
        mask = np.ones((B, S, S), dtype=dtypes["mask"])
    made = {
        "x": x,
        "mask": mask,
        "norm_weight": normal((D,), "norm_weight"),
        "norm_bias": normal((D,), "norm_bias"),
        "out_norm_weight": normal((H,), "out_norm_weight"),
        "out_norm_bias": normal((H,), "out_norm_bias"),
        "to_out": normal((D, H), "to_out", 1.0 / math.sqrt(D)),
    }
    for name in PROJECTIONS:
        made[name] = normal((H, D), name, 1.0 / math.sqrt(H))
    return made


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    B, S, D, H = (dims[n] for n in ("B", "S", "D", "H"))
    w = {n: inputs[n].astype(np.float64) for n in (*PROJECTIONS, "to_out", "norm_weight", "norm_bias",
                                                   "out_norm_weight", "out_norm_bias")}
    w_in = np.concatenate([w[n] for n in PROJECTIONS]).T  # (D, 5H): the five projections in one product
    out = np.empty((B, S, S, D))
    for b in range(B):
        left = np.empty((H, S, S))  # channel-major, for one matrix product per channel
        right = np.empty((H, S, S))
        out_gate = np.empty((H, S, S))
        for i0 in range(0, S, _ROWS):
            i1 = min(S, i0 + _ROWS)
            z = _layer_norm(np.asarray(inputs["x"][b, i0:i1], dtype=np.float64), w["norm_weight"], w["norm_bias"])
            proj = (z.reshape(-1, D) @ w_in).reshape(i1 - i0, S, 5 * H)
            m = np.asarray(inputs["mask"][b, i0:i1, :, None], dtype=np.float64)
            left[:, i0:i1] = np.moveaxis(m * proj[..., 0:H] * _sigmoid(proj[..., 2 * H:3 * H]), -1, 0)
            right[:, i0:i1] = np.moveaxis(m * proj[..., H:2 * H] * _sigmoid(proj[..., 3 * H:4 * H]), -1, 0)
            out_gate[:, i0:i1] = np.moveaxis(_sigmoid(proj[..., 4 * H:]), -1, 0)
        t = left @ np.swapaxes(right, 1, 2)  # (H, S, S): t[c, i, j] = sum_k left[c, i, k] right[c, j, k]
        del left, right
        for i0 in range(0, S, _ROWS):
            i1 = min(S, i0 + _ROWS)
            ti = t[:, i0:i1]  # (H, rows, S): the LayerNorm runs over the channel axis, here the first
            mean = ti.mean(axis=0)
            centred = ti - mean
            var = (centred * centred).mean(axis=0)
            g = (centred / np.sqrt(var + EPS) * w["out_norm_weight"][:, None, None] + w["out_norm_bias"][:, None, None])
            g *= out_gate[:, i0:i1]
            out[b, i0:i1] = (g.reshape(H, -1).T @ w["to_out"].T).reshape(i1 - i0, S, D)
    return {"out": out}


def dense(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """The same update written plainly: the whole tensor at each step, the triangle sum as an einsum over k;
    for checking `reference` at small sizes."""
    x = inputs["x"].astype(np.float64)
    mask = inputs["mask"].astype(np.float64)[..., None]

    def ln(v: np.ndarray, weight: str, bias: str) -> np.ndarray:
        mu = v.mean(axis=-1, keepdims=True)
        sd = np.sqrt(((v - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
        return (v - mu) / sd * inputs[weight] + inputs[bias]

    def lin(v: np.ndarray, weight: str) -> np.ndarray:
        return np.einsum("...i,oi->...o", v, inputs[weight].astype(np.float64))

    def sig(u: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-u))

    z = ln(x, "norm_weight", "norm_bias")
    left = lin(z, "left_proj") * mask * sig(lin(z, "left_gate"))
    right = lin(z, "right_proj") * mask * sig(lin(z, "right_gate"))
    t = np.einsum("bikc,bjkc->bijc", left, right)
    return {"out": lin(ln(t, "out_norm_weight", "out_norm_bias") * sig(lin(z, "out_gate")), "to_out")}
