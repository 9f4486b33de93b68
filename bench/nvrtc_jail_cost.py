"""What the jail adds to an NVRTC compile, and what compiling several modules at once costs the slowest one.

The module is the one `bench/nvrtc_prefill_compile.py` builds (attention's expert prefill for one dtype). It is
compiled (1) in this process, (2) by the worker's jailed child (`python -m ksearch_worker.jail CONFIG --nvrtc`,
the request as nvrtc.py sends it), alone, and (3) by N jailed children at once, as a precompile of N modules
does. No GPU needed; run from the repository root.

Usage: python3 bench/nvrtc_jail_cost.py [--nvrtc LIBNVRTC] --include CUDA_INCLUDE [--dtype float] [--arch 90a]
       [--parallel 11] [--out FILE]
Prints one JSON object (also written to --out).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from nvrtc_prefill_compile import KERNEL, nvrtc_path, prefill_source  # noqa: E402 - the same module


def jailed(args: argparse.Namespace, header: str, scratch: str) -> dict[str, object]:
    request = {"source": prefill_source(args.dtype), "name": "prefill.cu", "kernel": KERNEL,
               "headers": [["attn.cuh", header]], "include": [args.include], "arch": args.arch,
               "nvrtc": args.nvrtc, "max_bytes": 64 << 20}
    config = {"dir": scratch, "writable": False, "read": [args.include, os.path.dirname(args.nvrtc)],
              "limits": {"fsize": 0, "as": 16 << 30}}
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ksearch_worker.jail", json.dumps(config), "--nvrtc"],
                          input=json.dumps(request).encode(), capture_output=True, cwd=scratch, env=env)
    seconds = time.perf_counter() - t0
    try:
        ok = json.loads(proc.stdout).get("code") is not None
    except ValueError:
        ok = False
    return {"seconds": round(seconds, 2), "ok": ok, "stderr": proc.stderr.decode(errors="replace")[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvrtc", help="libnvrtc (default: the pip package's, nvidia-cuda-nvrtc)")
    ap.add_argument("--include", required=True)
    ap.add_argument("--dtype", default="float")
    ap.add_argument("--arch", default="90a")
    ap.add_argument("--parallel", type=int, default=11)
    ap.add_argument("--seed", default=os.path.join(ROOT, "tasks/attention/seeds/mlx-cuda/expert"))
    ap.add_argument("--out")
    args = ap.parse_args()
    if not args.nvrtc:
        args.nvrtc = nvrtc_path()
    header = open(os.path.join(args.seed, "attn.cuh")).read()
    direct = subprocess.run([sys.executable, os.path.join(HERE, "nvrtc_prefill_compile.py"), "--nvrtc", args.nvrtc,
                             "--include", args.include, "--dtype", args.dtype, "--arch", args.arch,
                             "--seed", args.seed], capture_output=True, text=True)
    try:
        direct_s = json.loads(direct.stdout.strip().splitlines()[-1])["seconds"]
    except (ValueError, IndexError, KeyError):
        direct_s = None
    with tempfile.TemporaryDirectory() as scratch:
        os.chmod(scratch, 0o755)
        alone = [jailed(args, header, scratch) for _ in range(2)]
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            together = list(pool.map(lambda _: jailed(args, header, scratch), range(args.parallel)))
        wall = time.perf_counter() - t0
    out = {
        "bench": "nvrtc-jail-cost", "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python3 bench/nvrtc_jail_cost.py", *sys.argv[1:]]),
        "machine": {"node": platform.node(), "system": platform.platform(), "cores": os.cpu_count()},
        "dtype": args.dtype, "arch": args.arch,
        "in_process_s": direct_s, "in_process_error": None if direct_s is not None else direct.stderr[-500:],
        "jailed_alone_s": [a["seconds"] for a in alone], "jailed_alone_ok": all(a["ok"] for a in alone),
        "parallel": args.parallel, "jailed_parallel_s": sorted(t["seconds"] for t in together),
        "jailed_parallel_wall_s": round(wall, 2), "jailed_parallel_ok": all(t["ok"] for t in together),
        "errors": sorted({a["stderr"] for a in [*alone, *together] if not a["ok"]})[:3],
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
