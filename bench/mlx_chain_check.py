"""Is the evaluator's chain of calls serial on this GPU? (Device machine; MLX staged as for bench/h200.sh.)

A low-occupancy kernel (one block, one thread spinning for SPIN_US microseconds on the clock, then copying
its input) is timed per call four ways:

- `alone`: one call per `mx.eval` (what a model pays for an isolated op, MLX's fixed cost included);
- `independent`: K calls on different inputs in one `mx.eval`: the GPU may run them at once (CUDA graphs),
  so this is a throughput, and a low-occupancy kernel looks K times faster than it is;
- `chained`: K dependent calls the way the evaluator makes them (`ksearch_worker.targets.mlx.Chain`: each
  call's smallest input linked, bit for bit, to the previous call's output), less a chain of the links
  alone (`NullChain`): the figure `ksearch eval` reports;
- `fed_back`: K calls where each call's input is the previous call's output (shapes allow it here).

The evaluator's clock is serial when `chained` is at least the kernel's own time (the spin; MLX's cost of
dispatching a call comes on top) and several times `independent`. Prints one JSON object with the figures and
the verdict.
Run: PYTHONPATH=/root/mlx-site:python python3 bench/mlx_chain_check.py [--spin-us 50] [--calls 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import mlx.core as mx
import numpy as np
from ksearch_worker.targets.mlx import Chain, NullChain, Runner

SOURCE = """
    // One thread of one block spins on the clock, then every thread copies its share: a kernel that
    // occupies one multiprocessor of the GPU's 132 and takes a known time.
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        long long start = clock64();
        while (clock64() - start < cycles[0]) {}
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n[0]; i += blockDim.x) y[i] = x[i];
"""


class Spin(Runner):
    out_name = "y"

    def __init__(self, cycles: int, n: int) -> None:
        self.kernel = mx.fast.cuda_kernel(name="ksearch_spin", input_names=["x", "cycles", "n"],
                                          output_names=["y"], source=SOURCE)
        self.cycles = mx.array(cycles, dtype=mx.int64)
        self.n = mx.array(n, dtype=mx.int32)

    def call(self, inputs: dict) -> dict:
        x = inputs["x"]
        (y,) = self.kernel(inputs=[x, self.cycles, self.n], output_shapes=[x.shape], output_dtypes=[x.dtype],
                           grid=(256, 1, 1), threadgroup=(256, 1, 1), stream=mx.gpu)
        return {"y": y}


def median_per_call(run, calls: int, reps: int = 30) -> float:
    run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spin-us", type=float, default=50.0)
    ap.add_argument("--calls", type=int, default=64)
    args = ap.parse_args()
    k = args.calls
    clock_hz = 1.98e9  # the H200's boost clock; the kernel's own time is measured below anyway
    n = 4096
    spin = Spin(int(args.spin_us * 1e-6 * clock_hz), n)
    rng = np.random.default_rng(0)
    sets = [{"x": mx.array(rng.standard_normal(n).astype(np.float32))} for _ in range(k)]
    mx.eval([s["x"] for s in sets])

    def alone() -> None:
        mx.eval(spin.call(sets[0])["y"])
        mx.synchronize()

    def independent() -> None:
        mx.eval([spin.call(sets[i])["y"] for i in range(k)])
        mx.synchronize()

    def fed_back() -> None:
        x = sets[0]["x"]
        for _ in range(k):
            x = spin.call({"x": x})["y"]
        mx.eval(x)
        mx.synchronize()

    chain, null = Chain(spin, sets, k, "x", None, None, "check"), NullChain(sets, k, "x")

    def timed(entry) -> float:
        entry.before(0, 1)
        t0 = time.perf_counter()
        entry.run(0, 1)
        dt = time.perf_counter() - t0
        entry.after(0, 1)
        return dt

    for _ in range(3):
        timed(chain.entry), timed(null.entry)
    chained_evals = [timed(chain.entry) for _ in range(30)]
    null_evals = [timed(null.entry) for _ in range(30)]
    link_per_call = statistics.median(null_evals) / k
    chained = (statistics.median(chained_evals) - statistics.median(null_evals)) / k
    result = {
        "mlx": mx.__version__, "device": str(mx.default_device()), "calls": k, "spin_us": args.spin_us,
        "alone_us": 1e6 * median_per_call(alone, 1, 100),
        "independent_us": 1e6 * median_per_call(independent, k),
        "fed_back_us": 1e6 * median_per_call(fed_back, k),
        "chained_us": 1e6 * chained,
        "null_chain_per_call_us": 1e6 * link_per_call,
    }
    # Serial: each chained call costs at least the kernel's own time (90% of the spin, for clock rounding),
    # and at least three times what it seems to cost among independent calls the GPU overlaps.
    result["serial"] = bool(result["chained_us"] >= 0.9 * args.spin_us
                            and result["chained_us"] >= 3 * result["independent_us"])
    print(json.dumps({k_: round(v, 2) if isinstance(v, float) else v for k_, v in result.items()}))


if __name__ == "__main__":
    main()
