"""What one candidate's evaluation costs inside a search, and where the time goes.

Runs `ksearch run TASK --strategy tune --budget N` from a seed (every candidate a real one of the search:
compiled, checked, timed beside the run's best, rechecked), then reads every evaluation back from the store
(`ksearch show RUN --json`) and sums, per candidate, its search-phase workloads: wall time, compile, the
worker's split (kernel time, checks, timing, recheck, setup) and the evaluator's own overhead. The run's own
work for each workload (`prepare`: reference outputs, input sets, baselines) is done before the first
candidate meets the workload and is reported apart (`prepare_s`); a candidate's wall time excludes it. The
per-candidate figures are over the candidates after the seed.

With --limit S the search is stopped (SIGTERM) after S seconds and what the store holds by then is read: the
final phase is not needed to know what a search-phase candidate cost.

Usage: python3 bench/eval_cost.py TASK [--target T] [--seed NAME] [--budget N] [--checks N] [--bin PATH]
       [--timing-budget S] [--limit S] [--out FILE]
Prints one JSON object (also written to --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

PARTS = ("kernel_s", "setup_s", "checks_s", "timing_s", "recheck_s", "reference_s", "draw_s", "baselines_s")


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--seed", default=None)
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--checks", type=int, default=1)
    ap.add_argument("--timing-budget", default=None)
    ap.add_argument("--bin", default=os.environ.get("KSEARCH_BIN", "target/release/ksearch"))
    ap.add_argument("--python", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--limit", type=float, default=None)
    args = ap.parse_args()
    store = tempfile.mkdtemp(prefix="ksearch-eval-cost-")
    cmd = [args.bin, "-vv", "--store", store, *(["--python", args.python] if args.python else []), "run", args.task,
           "--target", args.target, "--strategy", "tune", "--budget", str(args.budget), "--checks", str(args.checks),
           *(["--seed", args.seed] if args.seed else []),
           *(["--timing-budget", args.timing_budget] if args.timing_budget else []), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped = False
    try:
        stdout, stderr = proc.communicate(timeout=args.limit)
    except subprocess.TimeoutExpired:
        proc.terminate()
        stdout, stderr = proc.communicate()
        stopped = True
    wall = time.perf_counter() - t0
    if args.out:  # the run's log (-vv: each candidate's precompile line, the worker's notices) beside the result
        with open(args.out.removesuffix(".json") + ".log", "w") as f:
            f.write(stderr)
    if not stopped and proc.returncode not in (0, 1):
        sys.exit(f"the run failed ({proc.returncode}):\n{stderr[-3000:]}")
    result = {} if stopped else last_json(stdout)
    shown = last_json(subprocess.run([args.bin, "--store", store, "show", result.get("run_id", "last"), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    order = [a["candidate"] for a in shown["attempts"] if a["phase"] == "search"]
    per: dict[str, dict[str, float]] = {}
    for e in shown["evaluations"]:
        if e["phase"] != "search":
            continue
        c = per.setdefault(e["candidate"], {"wall_s": 0.0, "prepare_s": 0.0, "compile_s": 0.0, "overhead_s": 0.0,
                                            "workloads": 0, "passed": True, **{p: 0.0 for p in PARTS}})
        c["wall_s"] += e.get("elapsed_s", 0.0) - e.get("prepare_s", 0.0)
        c["prepare_s"] += e.get("prepare_s", 0.0)
        c["compile_s"] += e.get("compile_s", 0.0)
        split = e.get("split") or {}
        for p in PARTS:
            c[p] += split.get(p, 0.0)
        worker = split.get("total_s", 0.0) - split.get("overhead_s", 0.0)
        c["overhead_s"] += max(e.get("elapsed_s", 0.0) - e.get("prepare_s", 0.0) - e.get("compile_s", 0.0) - worker,
                               0.0)
        c["workloads"] += 1
        c["passed"] &= e["status"] == "passed"
    rows = [{"candidate": h, **per[h]} for h in order if h in per]
    later = rows[1:]

    def med(key: str) -> float | None:
        xs = [r[key] for r in later]
        return round(statistics.median(xs), 4) if xs else None

    out = {
        "bench": "eval-cost",
        "command": " ".join(["ksearch", *cmd[4:]]),
        "machine": {"node": platform.node(), "system": platform.platform(), "cores": os.cpu_count()},
        "task": args.task, "target": args.target, "run_wall_s": round(wall, 2),
        "stopped_after_s": args.limit if stopped else None,
        "hardware": result.get("hardware"),
        "first_candidate": rows[0] if rows else None,
        "per_candidate_median": {k: med(k) for k in ("wall_s", "compile_s", "overhead_s", "prepare_s", *PARTS)},
        "per_candidate_max_wall_s": round(max((r["wall_s"] for r in later), default=0.0), 4),
        "candidates": rows,
    }
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(json.dumps({"task": args.task, "target": args.target, "per_candidate_median": out["per_candidate_median"],
                      "max_wall_s": out["per_candidate_max_wall_s"], "first_candidate_wall_s":
                      rows[0]["wall_s"] if rows else None}))


if __name__ == "__main__":
    main()
