"""Where the attention decode's time goes on the device machine: the exported expert kernel
(`ksearch export tasks/attention/seeds/mlx-cuda/expert --task tasks/attention`) against MLX's SDPA at one
decode shape, timed three ways per call:

- `independent_kN`: N calls on different K/V copies in one mx.eval (what `ksearch eval` times: MLX may run
  them concurrently, so this is throughput);
- `chain_N`: N calls where each call's query is the previous call's output (o has q's shape in decode), one
  mx.eval: the latency of one call in a chain of dependent ops, as in a model's decode step;
- `--ncu`: only a few calls of each, for `ncu --metrics gpu__time_duration.sum` (the kernels' own time);
  with `--set NAME=V1,V2,...` (repeatable) every combination of those tunable values (ncu's kernel names
  carry the template values). Without --ncu only the first combination is timed.

K/V rotate over enough copies to exceed the L2 cache, so no call reads them hot.
Run: PYTHONPATH=/root/mlx-site:EXPORT_DIR python3 bench/attention_decode_profile.py [--ncu] [--shape NAME]
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

import attention as exported  # the exported module (its folder on PYTHONPATH)
import mlx.core as mx
import numpy as np

SHAPES = {  # name: (B, Hq, Hkv, Tk, D, dtype)
    "decode_gqa_8k": (1, 32, 8, 8192, 128, mx.float16),
    "decode_gqa_16k": (1, 32, 8, 16384, 128, mx.float16),
    "decode_b4_bf16_d64": (4, 32, 8, 4096, 64, mx.bfloat16),
}
L2_BYTES = 50 << 20


def sdpa(q: mx.array, k: mx.array, v: mx.array) -> mx.array:
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5)


def kernel(q: mx.array, k: mx.array, v: mx.array) -> mx.array:
    return exported.attention(q, k, v, CAUSAL=0)


def median_us(run, calls: int, reps: int) -> float:
    run()  # warm-up (JIT, allocator)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) / calls)
    return 1e6 * statistics.median(times)


def configure(values: dict[str, int]) -> bool:
    """Set tunables of the exported kernel (its params and the launches' template values); False when the
    plan's constraints rule the combination out."""
    spec = exported._SPEC
    for name, v in values.items():
        if name not in spec["params"]:
            raise SystemExit(f"--set {name}: no such tunable (tunables: {sorted(spec['params'])})")
        spec["params"][name] = v
        for launch in spec["launches"]:
            if name in launch["template"]:
                launch["template"][name] = str(v)
    exported._prepared.clear()
    return all(bool(exported._eval(c, dict(spec["params"]))) for c in spec["constraints"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--shape", default="decode_gqa_8k", choices=sorted(SHAPES))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=V1,V2,...")
    args = ap.parse_args()
    grid = {n: [int(x) for x in vs.split(",")] for n, vs in (a.split("=", 1) for a in args.set)}
    combos = [dict(zip(grid, c)) for c in itertools.product(*grid.values())] or [{}]
    configure(combos[0])
    B, Hq, Hkv, Tk, D, dt = SHAPES[args.shape]
    kv_bytes = 2 * B * Hkv * Tk * D * (2 if dt != mx.float32 else 4)
    ncopies = max(1, min(16, -(-3 * L2_BYTES // kv_bytes)))
    rng = np.random.default_rng(0)
    q = mx.array(rng.standard_normal((B, Hq, 1, D)).astype(np.float32)).astype(dt)
    kvs = [(mx.array(rng.standard_normal((B, Hkv, Tk, D)).astype(np.float32)).astype(dt),
            mx.array(rng.standard_normal((B, Hkv, Tk, D)).astype(np.float32)).astype(dt)) for _ in range(ncopies)]
    mx.eval(q, *[a for kv in kvs for a in kv])

    # Correct first: both agree on one call, and the kernel path (not the fallback) ran.
    got, want = kernel(q, *kvs[0]), sdpa(q, *kvs[0])
    mx.eval(got, want)
    err = float(mx.max(mx.abs(got.astype(mx.float32) - want.astype(mx.float32))).item())
    result: dict[str, object] = {"mlx": mx.__version__, "shape": args.shape, "kv_copies": ncopies, "set": combos[0],
                                 "dims": {"B": B, "Hq": Hq, "Hkv": Hkv, "Tk": Tk, "D": D},
                                 "path": exported.last_path(), "max_abs_diff_vs_sdpa": err}
    fns = {"kernel": kernel, "sdpa": sdpa}
    if args.ncu:
        ran = []
        for combo in combos:
            if not configure(combo):
                continue
            for i in range(3):
                mx.eval(kernel(q, *kvs[i % ncopies]))
            path = exported.last_path()
            got, want = kernel(q, *kvs[0]), sdpa(q, *kvs[0])
            diff = float(mx.max(mx.abs(got.astype(mx.float32) - want.astype(mx.float32))).item())
            ran.append({**combo, "params": dict(exported._SPEC["params"]), "path": path, "max_abs_diff_vs_sdpa": diff})
        for i in range(3):
            mx.eval(sdpa(q, *kvs[i % ncopies]))
        mx.synchronize()
        result["configurations"] = ran
        result["sdpa_calls"] = 1 + len(ran) + 3  # the check above, one per configuration, these three
        result["template_order"] = {ln["kernel"]: list(ln["template"]) for ln in exported._SPEC["launches"]}
        print(json.dumps(result))
        return

    for name, f in fns.items():
        for n in (1, 8, 64):
            def independent(f=f, n=n) -> None:
                mx.eval([f(q, *kvs[i % ncopies]) for i in range(n)])
                mx.synchronize()

            def chain(f=f, n=n) -> None:
                x = q
                for i in range(n):
                    x = f(x, *kvs[i % ncopies])
                mx.eval(x)
                mx.synchronize()

            reps = 200 if n == 1 else 60
            result[f"{name}_independent_k{n}_us"] = round(median_us(independent, n, reps), 2)
            result[f"{name}_chain_{n}_us"] = round(median_us(chain, n, reps), 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
