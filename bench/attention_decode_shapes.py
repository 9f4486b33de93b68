"""The exported attention decode against MLX's SDPA over a grid of decode shapes and tunables, on the device
machine: which (B, D, dtype, Tk, tunables) a kernel gets wrong, for bisecting a failure that one workload
shows. Prints one JSON line per case: the max abs difference, the tolerance-scaled worst error
(|diff| / (atol + rtol |sdpa|), the task's tolerances), and which path ran.

Run: PYTHONPATH=/root/mlx-site:EXPORT_DIR python3 bench/attention_decode_shapes.py [--set NAME=V1,V2 ...]
     [--shape B,Hq,Hkv,Tk,D,dtype ...]
"""

from __future__ import annotations

import argparse
import itertools
import json

import attention as exported  # the exported module (its folder on PYTHONPATH)
import mlx.core as mx
import numpy as np
from attention_decode_profile import configure, kernel, sdpa

TOL = {"float16": (2e-3, 1e-2), "bfloat16": (1e-2, 2e-2), "float32": (1e-4, 1e-3)}  # (atol, rtol), the task's
DEFAULT_SHAPES = ["1,32,8,8192,128,float16", "4,32,8,4096,64,bfloat16", "1,32,8,4096,64,bfloat16",
                  "4,32,8,4096,64,float16", "4,32,8,4096,128,bfloat16", "1,32,8,4096,128,bfloat16",
                  "2,32,8,4096,128,float16", "4,32,8,1024,64,bfloat16"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", default=[], metavar="NAME=V1,V2,...")
    ap.add_argument("--shape", action="append", default=[], metavar="B,Hq,Hkv,Tk,D,dtype")
    args = ap.parse_args()
    grid = {n: [int(x) for x in vs.split(",")] for n, vs in (a.split("=", 1) for a in args.set)}
    combos = [dict(zip(grid, c)) for c in itertools.product(*grid.values())] or [{}]
    rng = np.random.default_rng(0)
    for shape in args.shape or DEFAULT_SHAPES:
        b, hq, hkv, tk, d, dt = shape.split(",")
        B, Hq, Hkv, Tk, D = (int(x) for x in (b, hq, hkv, tk, d))
        dtype = getattr(mx, dt)
        q, k, v = (mx.array(rng.standard_normal(s).astype(np.float32)).astype(dtype)
                   for s in ((B, Hq, 1, D), (B, Hkv, Tk, D), (B, Hkv, Tk, D)))
        want = sdpa(q, k, v).astype(mx.float32)
        for combo in combos:
            if not configure(combo):
                continue
            got = kernel(q, k, v).astype(mx.float32)
            diff = mx.abs(got - want)
            atol, rtol = TOL[dt]
            worst = mx.max(diff / (atol + rtol * mx.abs(want)))
            bad = mx.sum(mx.logical_not(diff <= atol + rtol * mx.abs(want)))
            heads_bad = mx.sum(mx.any(mx.logical_not(diff <= atol + rtol * mx.abs(want)), axis=-1), axis=(0, 2))
            mx.eval(diff, worst, bad, heads_bad)
            print(json.dumps({"shape": shape, **combo, "path": exported.last_path(),
                              "max_abs_diff": float(mx.max(diff).item()), "worst_of_tolerance": float(worst.item()),
                              "bad_elements": int(bad.item()), "bad_per_head": [int(x) for x in heads_bad.tolist()]}),
                  flush=True)


if __name__ == "__main__":
    main()
