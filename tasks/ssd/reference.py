"""Reference for ssd: Mamba-2's SSD scan (mlx-lm's ssm_attn with state=None), in float64.

Per batch row b and head h (group g = h // (H / G)), with S_{-1} = 0 and t = 0 .. L-1:
    dt_t        = clip(softplus(dt[b, t, h] + dt_bias[h]), 0.001, 100)
    A_h         = -exp(A_log[h])
    S_t[p, n]   = exp(dt_t * A_h) * S_{t-1}[p, n] + dt_t * x[b, t, h, p] * Bm[b, t, g, n]
    y[b, t, h, p] = sum_n S_t[p, n] * Cm[b, t, g, n] + Dskip[h] * x[b, t, h, p]
    state[b, h, p, n] = S_{L-1}[p, n]

A step loop over a (B, H, P, N) state is too slow in NumPy at L = 8192 (1M entries per step), so this is the
same recurrence evaluated exactly in chunks of _Q steps (an identity, not an approximation; float64):
within a chunk, with c_t = sum_{s <= t} dt_s * A_h (inclusive),
    y_t   = sum_{s <= t} (C_t . B_s) exp(c_t - c_s) dt_s x_s + exp(c_t) (S_in C_t) + D x_t
    S_out = exp(c_end) S_in + sum_s exp(c_end - c_s) dt_s x_s B_s^T
`step_loop` is the literal recurrence, used to check this one at small sizes.
"""
import numpy as np

_Q = 64


def softplus(v: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, v)


def _dt(inputs, dims):
    B, L, H = dims["B"], dims["L"], dims["H"]
    dt = inputs["dt"].reshape(B, L, H) + inputs["dt_bias"].reshape(1, 1, H)
    return np.clip(softplus(dt), 0.001, 100.0)  # (B, L, H)


def _unpack(inputs, dims):
    B, L, H, P, G, N = (dims[k] for k in "BLHPGN")
    x = inputs["x"].reshape(B, L, H, P)
    Bm = inputs["Bm"].reshape(B, L, G, N)
    Cm = inputs["Cm"].reshape(B, L, G, N)
    A = -np.exp(inputs["A_log"].reshape(H))
    rep = H // G
    # heads of a group share B and C: expand to (B, L, H, N)
    return x, np.repeat(Bm, rep, axis=2), np.repeat(Cm, rep, axis=2), A, inputs["Dskip"].reshape(H)


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    B, L, H, P, N = (dims[k] for k in "BLHPN")
    x, Bh, Ch, A, Dskip = _unpack(inputs, dims)
    dt = _dt(inputs, dims)
    S = np.zeros((B, H, P, N))
    y = np.empty((B, L, H, P))
    for t0 in range(0, L, _Q):
        t1 = min(L, t0 + _Q)
        q = t1 - t0
        dA = dt[:, t0:t1] * A  # (B, q, H)
        cum = np.cumsum(dA, axis=1)  # inclusive
        xs = np.moveaxis(x[:, t0:t1], 1, 2)  # (B, H, q, P)
        Bs = np.moveaxis(Bh[:, t0:t1], 1, 2)  # (B, H, q, N)
        Cs = np.moveaxis(Ch[:, t0:t1], 1, 2)  # (B, H, q, N)
        c = np.moveaxis(cum, 1, 2)  # (B, H, q)
        dts = np.moveaxis(dt[:, t0:t1], 1, 2)  # (B, H, q)
        diff = c[..., :, None] - c[..., None, :]  # c_t - c_s, (B, H, t, s)
        causal = np.tril(np.ones((q, q), dtype=bool))
        decay = np.where(causal, np.exp(np.where(causal, diff, 0.0)), 0.0)
        M = (Cs @ np.swapaxes(Bs, -1, -2)) * decay * dts[..., None, :]  # (B, H, t, s)
        yc = M @ xs + np.exp(c)[..., None] * (Cs @ np.swapaxes(S, -1, -2))  # (B, H, q, P)
        y[:, t0:t1] = np.moveaxis(yc, 2, 1)
        w = np.exp(c[..., -1:] - c) * dts  # (B, H, q)
        S = np.exp(c[..., -1])[..., None, None] * S + np.swapaxes(xs * w[..., None], -1, -2) @ Bs
    y += Dskip.reshape(1, 1, H, 1) * x
    return {"y": y, "state": S}


def step_loop(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """The literal recurrence, one step at a time (slow; for checking `reference` at small sizes)."""
    B, L, H, P, N = (dims[k] for k in "BLHPN")
    x, Bh, Ch, A, Dskip = _unpack(inputs, dims)
    dt = _dt(inputs, dims)
    S = np.zeros((B, H, P, N))
    y = np.empty((B, L, H, P))
    for t in range(L):
        a = np.exp(dt[:, t] * A)  # (B, H)
        S = a[..., None, None] * S + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        y[:, t] = (S @ Ch[:, t, :, :, None])[..., 0] + Dskip[None, :, None] * x[:, t]
    return {"y": y, "state": S}


def make_inputs(dims: dict[str, int], dtypes: dict[str, str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs shaped like a Mamba-2 layer's at initialisation (mamba_ssm / nemotron_h init):
    - A_log = log(uniform(1, 16)) (A_init_range (1, 16)): decay rates |A| in [1, 16];
    - dt_bias = softplus^-1(dt0), dt0 log-uniform in [1e-3, 1e-1] (dt_min, dt_max); dt (in_proj's output)
      ~ normal(0, 1), so dt = clip(softplus(dt + dt_bias), 0.001, 100) spans about 1e-3 .. 1: the slowest
      heads (dt ~ 1e-3, |A| ~ 1) remember ~1,000 steps, across many chunks;
    - x, Bm, Cm ~ normal(0, 1) (x stands for the conv + silu output; B and C are its other slices);
    - Dskip ~ uniform(0.5, 1.5) (initialised to ones in the model).
    The worker casts x, dt, Bm, Cm to T and A_log, Dskip, dt_bias to float32."""
    B, L, H, P, G, N = (dims[k] for k in "BLHPGN")
    dt0 = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), H))
    return {
        "x": rng.normal(0.0, 1.0, (B, L, H, P)),
        "dt": rng.normal(0.0, 1.0, (B, L, H)),
        "A_log": np.log(rng.uniform(1.0, 16.0, H)),
        "Bm": rng.normal(0.0, 1.0, (B, L, G, N)),
        "Cm": rng.normal(0.0, 1.0, (B, L, G, N)),
        "Dskip": rng.uniform(0.5, 1.5, H),
        "dt_bias": np.log(np.expm1(dt0)),
    }
