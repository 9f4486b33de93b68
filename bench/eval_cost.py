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

Medians are given over every later candidate and over the later candidates that passed every search workload
(a refused launch configuration fails in milliseconds and says nothing of what an evaluation costs). With
--pin NAME=VALUE (repeatable) the seed is copied and that tunable narrowed to the one value, so the tuner
draws only configurations that run here (attention's cluster decode, NC > 0, is refused under CUDA graphs).

Usage: python3 bench/eval_cost.py TASK [--target T] [--seed NAME] [--budget N] [--checks N] [--bin PATH]
       [--timing-budget S] [--limit S] [--pin NAME=VALUE ...] [--out FILE]
Prints one JSON object (also written to --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PARTS = ("kernel_s", "setup_s", "checks_s", "timing_s", "recheck_s", "reference_s", "draw_s", "baselines_s")


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def pinned_seed(task: str, target: str, seed: str, pins: list[str]) -> str:
    """A copy of the task's seed with each pinned tunable's values narrowed to the one given."""
    src = os.path.join("tasks", task, "seeds", target, seed)
    dst = os.path.join(tempfile.mkdtemp(prefix="ksearch-eval-cost-seed-"), seed)
    shutil.copytree(src, dst)
    plan = os.path.join(dst, "plan.toml")
    text = open(plan).read()
    for pin in pins:
        name, _, value = pin.partition("=")
        block = re.compile(rf"(\[tunable\.{re.escape(name)}\][^\n]*\n(?:(?!\[)[^\n]*\n)*?)values = \[[^\]]*\]"
                           rf"((?:(?!\[)[^\n]*\n)*?)default = [^\n]*")
        text, n = block.subn(lambda m: f"{m.group(1)}values = [{value}]{m.group(2)}default = {value}", text)
        if n != 1:
            sys.exit(f"--pin {pin}: no [tunable.{name}] with values and default in {plan}")
    open(plan, "w").write(text)
    return dst


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
    ap.add_argument("--pin", action="append", default=[])
    args = ap.parse_args()
    start = (["--candidate", pinned_seed(args.task, args.target, args.seed or "naive", args.pin)] if args.pin
             else ["--seed", args.seed] if args.seed else [])
    store = tempfile.mkdtemp(prefix="ksearch-eval-cost-")
    cmd = [args.bin, "-vv", "--store", store, *(["--python", args.python] if args.python else []), "run", args.task,
           "--target", args.target, "--strategy", "tune", "--budget", str(args.budget), "--checks", str(args.checks),
           *start,
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
        # Where each workload's time went, to tell which one makes a candidate slow.
        c.setdefault("by_workload", {})[e.get("workload")] = {
            "wall_s": round(e.get("elapsed_s", 0.0) - e.get("prepare_s", 0.0), 3),
            **{p: round(split.get(p, 0.0), 3) for p in ("timing_s", "checks_s", "recheck_s", "kernel_s")}}
        c["passed"] &= e["status"] == "passed"
        if e["status"] != "passed" and "failure" not in c:
            c["failure"] = f"{e.get('workload')}: {e['status']}: {str(e.get('message') or '')[:300]}"
    rows = [{"candidate": h, **per[h]} for h in order if h in per]
    later = rows[1:]
    passed = [r for r in later if r["passed"]]

    def med(key: str, among: list[dict] = later) -> float | None:
        xs = [r[key] for r in among]
        return round(statistics.median(xs), 4) if xs else None

    keys = ("wall_s", "compile_s", "overhead_s", "prepare_s", *PARTS)

    out = {
        "bench": "eval-cost",
        "command": " ".join(["ksearch", *cmd[4:]]),
        "machine": {"node": platform.node(), "system": platform.platform(), "cores": os.cpu_count()},
        "task": args.task, "target": args.target, "run_wall_s": round(wall, 2),
        "stopped_after_s": args.limit if stopped else None,
        "hardware": result.get("hardware"),
        "first_candidate": rows[0] if rows else None,
        "pins": args.pin,
        "per_candidate_median": {k: med(k) for k in keys},
        "per_candidate_max_wall_s": round(max((r["wall_s"] for r in later), default=0.0), 4),
        "later_candidates": len(later), "later_passed": len(passed),
        "per_passed_candidate_median": {k: med(k, passed) for k in keys},
        "per_passed_candidate_max_wall_s": round(max((r["wall_s"] for r in passed), default=0.0), 4),
        "candidates": rows,
    }
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(json.dumps({"task": args.task, "target": args.target, "later_candidates": len(later),
                      "later_passed": len(passed), "per_passed_candidate_median": out["per_passed_candidate_median"],
                      "per_passed_candidate_max_wall_s": out["per_passed_candidate_max_wall_s"],
                      "per_candidate_median": out["per_candidate_median"], "first_candidate_wall_s":
                      rows[0]["wall_s"] if rows else None,
                      "failures": [r["failure"] for r in later if "failure" in r][:4]}))


if __name__ == "__main__":
    main()
