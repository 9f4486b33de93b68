"""Where an mlx-cuda candidate's first launch spends its time, on the device machine.

MLX compiles a custom CUDA kernel with NVRTC at its first launch (once per module: kernel name, template
arguments, argument dtypes, source) and keeps the result in memory and under MLX_PTX_CACHE_DIR. This probe
times, in fresh processes: importing MLX, the first GPU op, a first and a second compile, a call once compiled,
a first launch that finds the module on disk, and what MLX does with an empty grid (does it compile, and does
the launch fail, pass or hang). Prints one JSON object.

Usage: python3 bench/mlx_compile_probe.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

CHILD = textwrap.dedent(r"""
    import json, os, sys, time
    t0 = time.perf_counter()
    import mlx.core as mx
    t1 = time.perf_counter()
    mx.eval(mx.ones((4,)) + 1); mx.synchronize()
    t2 = time.perf_counter()
    src = '''
        unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n[0]) out[i] = x[i] * (T)SCALE;
    '''
    def kernel(name):
        return mx.fast.cuda_kernel(name=name, input_names=["x", "n"], output_names=["out"], source=src,
                                   ensure_row_contiguous=True)
    mode = sys.argv[1]
    report = {"import_s": t1 - t0, "first_op_s": t2 - t1}
    def call(k, grid, scale, dtype=mx.float32, size=1 << 20):
        x = mx.ones((size,), dtype=dtype)
        n = mx.array(size, dtype=mx.int32)
        mx.eval(x, n)
        t = time.perf_counter()
        out = k(inputs=[x, n], output_shapes=[(size,)], output_dtypes=[dtype], grid=grid, threadgroup=(256, 1, 1),
                template=[("T", dtype), ("SCALE", scale)], stream=mx.gpu)
        mx.eval(out); mx.synchronize()
        return time.perf_counter() - t
    if mode == "compile":
        k = kernel("probe")
        report["first_call_s"] = call(k, (1 << 20, 1, 1), 2)
        report["second_call_s"] = call(k, (1 << 20, 1, 1), 2)
        report["new_template_s"] = call(k, (1 << 20, 1, 1), 3)
        report["new_dtype_s"] = call(k, (1 << 20, 1, 1), 2, mx.bfloat16)
        report["other_kernel_s"] = call(kernel("probe2"), (1 << 20, 1, 1), 2)
    elif mode == "cached":
        report["first_call_s"] = call(kernel("probe"), (1 << 20, 1, 1), 2)
    elif mode == "empty":
        try:
            report["empty_grid_s"] = call(kernel("probe3"), (0, 0, 0), 2, size=1)
            report["empty_grid"] = "ran"
        except Exception as e:
            report["empty_grid"] = "error: " + str(e)[:300]
    elif mode == "one":
        report["one_block_s"] = call(kernel("probe4"), (1, 1, 1), 2, size=1)
    print(json.dumps(report))
""")


def child(mode: str, cache: str, limit: float = 120) -> dict:
    env = {**os.environ, "MLX_PTX_CACHE_DIR": cache}
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True,
                           timeout=limit)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "outcome": f"timed out after {limit} s"}
    wall = time.perf_counter() - t
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {"stderr": p.stderr[-600:]}
    files = sorted(os.listdir(cache)) if os.path.isdir(cache) else []
    return {"mode": mode, "rc": p.returncode, "wall_s": round(wall, 3), "cache_files": len(files), **report}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="mlx-probe-")
    rows = [child("compile", cache), child("cached", cache)]
    for mode in ("empty", "one"):
        fresh = tempfile.mkdtemp(prefix="mlx-probe-")
        rows.append(child(mode, fresh, 60))
    result = {"probe": "bench/mlx_compile_probe.py", "rows": rows}
    text = json.dumps(result, indent=1)
    if args.out:
        open(args.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
