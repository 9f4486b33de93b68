"""Where an attention decode call's time goes under MLX's CUDA back-end, on the device machine: the expert
seed as exported (`ksearch export`), timed the way `ksearch eval` times it (k lazy calls built before the
clock over rotated copies of the inputs, then mx.eval + mx.synchronize, median per call), with its header
handed to MLX three ways: as a file the source includes (what ships, python/ksearch_worker/header_file.py),
inline, and inline with 20 KB more. MLX's SDPA beside each. Also: the calls per evaluation (8 to 128) at
the milestone shape and the key length (512 to 16384) at 64 calls.

Run (MLX staged as for bench/h200.sh):
  ksearch export tasks/attention/seeds/mlx-cuda/expert --task tasks/attention --out X
  PYTHONPATH=/root/mlx-site python3 bench/mlx_decode_call_anatomy.py X/attention.py OUT.json
"""

from __future__ import annotations

import importlib.util
import json
import math
import platform
import statistics
import sys
import time
from typing import Any

import mlx.core as mx

B, HQ, HKV, D = 1, 32, 8, 128
L2_BYTES = 64 << 20  # the worker's cache size for MLX targets: copies enough to start each call cold


def load(path: str, name: str, inline: bool, pad: int = 0) -> Any:
    """The exported module; `inline` hands MLX the header itself instead of an include of its file."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if inline:
        mod.by_include = lambda header, directory=None: header
    if pad:
        for k in mod._SPEC["kernels"].values():
            if k["header"]:
                k["header"] += "//" + "x" * pad + "\n"
    return mod


def input_sets(tk: int) -> list[tuple[Any, Any, Any]]:
    nbytes = 2 * (B * HKV * tk * D * 2) + B * HQ * D * 2
    copies = max(1, min(8, math.ceil(2 * L2_BYTES / nbytes))) if nbytes < 2 * L2_BYTES else 1
    sets = []
    for _ in range(copies):
        q, k, v = (mx.random.normal(s).astype(mx.float16) for s in ((B, HQ, 1, D), (B, HKV, tk, D), (B, HKV, tk, D)))
        mx.eval(q, k, v)
        sets.append((q, k, v))
    return sets


def per_call_us(fn: Any, sets: list[tuple[Any, Any, Any]], k: int, reps: int = 25) -> float:
    for _ in range(3):
        mx.eval([fn(*sets[i % len(sets)]) for i in range(k)])
        mx.synchronize()
    times, nxt = [], 0
    for _ in range(reps):
        outs = [fn(*sets[(nxt + i) % len(sets)]) for i in range(k)]  # the lazy graph, off the clock
        nxt = (nxt + k) % len(sets)
        t0 = time.perf_counter()
        mx.eval(outs)
        mx.synchronize()
        times.append((time.perf_counter() - t0) / k)
    return round(1e6 * statistics.median(times), 2)


def main() -> None:
    path, dest = sys.argv[1:3]
    variants = {"file": load(path, "att_file", False), "inline": load(path, "att_inline", True),
                "inline_plus_20KB": load(path, "att_pad", True, 20000)}
    header = variants["inline"]._SPEC["kernels"]["attn_decode_last"]["header"]
    sdpa = lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5)  # noqa: E731
    calls = {n: (lambda m: lambda q, k, v: m.attention(q, k, v, CAUSAL=0))(m) for n, m in variants.items()}
    out: dict[str, Any] = {"mlx": mx.__version__, "system": platform.platform(), "header_bytes": len(header),
                           "shape": {"B": B, "Hq": HQ, "Hkv": HKV, "D": D, "dtype": "float16"}, "rows": []}
    s8 = input_sets(8192)
    ref = sdpa(*s8[0]).astype(mx.float32)
    out["max_abs_diff_vs_sdpa"] = {n: float(mx.max(mx.abs(f(*s8[0]).astype(mx.float32) - ref))) for n, f in calls.items()}
    for rnd in range(2):  # twice through, to see the spread
        for tk in (512, 3001, 8192, 16384):
            sets = s8 if tk == 8192 else input_sets(tk)
            for k in ((8, 30, 64, 128) if tk == 8192 else (64,)):
                row: dict[str, Any] = {"round": rnd, "Tk": tk, "calls_per_eval": k, "copies": len(sets),
                                       "sdpa_us": per_call_us(sdpa, sets, k)}
                for n, f in calls.items():
                    if tk == 8192 or n != "inline_plus_20KB":
                        row[f"ksearch_{n}_us"] = per_call_us(f, sets, k)
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
    with open(dest, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
