"""Reference for mamba-scan: the Mamba-1 selective scan, in float64, one time step at a time.

Per channel (b, d), with h_{-1} = 0:
    dt_t     = softplus(delta[b, d, t] + delta_bias[d])
    h_t[n]   = exp(dt_t * A[d, n]) * h_{t-1}[n] + dt_t * u[b, d, t] * Bm[b, n, t]
    y[b,d,t] = (sum_n h_t[n] * Cm[b, n, t] + Dskip[d] * u[b, d, t]) * silu(z[b, d, t])
    state[b, d, n] = h_{L-1}[n]

The recurrence runs over L with every (b, d, n) vectorised. Everything that does not depend on h (the
decays, the inputs dt*u*B, the y contraction) is computed for a block of time steps at once, time-major so
that each step touches contiguous memory; the loop itself is one multiply and one add per step.
"""
import numpy as np

_BLOCK_ELEMS = 1 << 22  # (steps, B, D, N) float64 elements per block of time steps: 32 MB


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def silu(x: np.ndarray) -> np.ndarray:
    return x * (0.5 + 0.5 * np.tanh(0.5 * x))  # x * sigmoid(x), without overflow


def reference(inputs: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    B, D, N, L = dims["B"], dims["D"], dims["N"], dims["L"]
    u = inputs["u"].reshape(B, D, L)
    delta = inputs["delta"].reshape(B, D, L)
    A = inputs["A"].reshape(D, N)
    Bm = inputs["Bm"].reshape(B, N, L)
    Cm = inputs["Cm"].reshape(B, N, L)
    Dskip = inputs["Dskip"].reshape(D)
    z = inputs["z"].reshape(B, D, L)
    delta_bias = inputs["delta_bias"].reshape(D)

    # Time-major copies (L, B, ...), so that each step and each block of steps is contiguous.
    dt = np.ascontiguousarray(np.moveaxis(softplus(delta + delta_bias[None, :, None]), 2, 0))  # (L, B, D)
    du = dt * np.moveaxis(u, 2, 0)
    Bt = np.ascontiguousarray(np.moveaxis(Bm, 2, 0))  # (L, B, N)
    Ct = np.ascontiguousarray(np.moveaxis(Cm, 2, 0))[..., None]  # (L, B, N, 1)
    h = np.zeros((B, D, N))
    yt = np.empty((L, B, D))
    steps = max(1, _BLOCK_ELEMS // (B * D * N))
    for t0 in range(0, L, steps):
        t1 = min(L, t0 + steps)
        hs = np.exp(dt[t0:t1, :, :, None] * A)  # decays a_t; hs[i] is (B, D, N) at time t0 + i
        bs = du[t0:t1, :, :, None] * Bt[t0:t1, :, None, :]  # inputs b_t = dt_t * u_t * B_t
        for i in range(t1 - t0):  # h_t = a_t * h_{t-1} + b_t, written over a_t
            np.multiply(hs[i], h, out=hs[i])
            hs[i] += bs[i]
            h = hs[i]
        yt[t0:t1] = np.matmul(hs, Ct[t0:t1])[..., 0]  # sum_n h_t[n] * C_t[n]
        h = h.copy()  # the block's arrays are freed; keep only the carried state
    y = np.moveaxis(yt, 0, 2)
    y = (y + Dskip[None, :, None] * u) * silu(z)
    return {"y": y, "state": h}


def make_inputs(dims: dict[str, int], dtypes: dict[str, str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs shaped like a Mamba-1 layer's at initialisation (mamba_ssm's dt and A init), so that the
    decays span short and very long memories:
    - A = -exp(uniform(-2, 3)): decay rates |A| in [0.14, 20] (mlx-lm initialises A_log = log(1..N)).
    - delta_bias = softplus^-1(dt0), dt0 log-uniform in [1e-3, 1e-1] (mamba_ssm's dt_proj bias init);
      delta ~ normal(0, 1), so dt = softplus(delta + delta_bias) spans about 1e-4 .. 1.5. The slowest
      channels (dt ~ 1e-3, |A| ~ 0.14) remember ~7,000 steps: carries must survive many chunks.
    - u, Bm, Cm, z ~ normal(0, 1) (u stands for the conv + silu output, z for the gate);
      Dskip ~ uniform(0.5, 1.5) (mlx-lm initialises D to ones).
    The worker casts each array to its dtype (u, delta, Bm, Cm, z to T)."""
    B, D, N, L = dims["B"], dims["D"], dims["N"], dims["L"]
    dt0 = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), D))
    return {
        "u": rng.normal(0.0, 1.0, (B, D, L)),
        "delta": rng.normal(0.0, 1.0, (B, D, L)),
        "A": -np.exp(rng.uniform(-2.0, 3.0, (D, N))),
        "Bm": rng.normal(0.0, 1.0, (B, N, L)),
        "Cm": rng.normal(0.0, 1.0, (B, N, L)),
        "Dskip": rng.uniform(0.5, 1.5, D),
        "z": rng.normal(0.0, 1.0, (B, D, L)),
        "delta_bias": np.log(np.expm1(dt0)),
    }
