"""Reads the logs of bench/results/h200-eval-cost-split-20261202.sh (the `logs` folder of its h200cost.tgz) and
prints the per-candidate split, the worker's profile inside timing, and the NVRTC time, as JSON.

Usage: python3 bench/results/h200-eval-cost-split-20261202-parse.py LOGS_DIR > summary.json

Sources, per search: NAME.show.json (`ksearch show RUN --json`: every evaluation's elapsed, prepare, compile
and the worker's split), NAME.stderr (`ksearch -vv`: the worker's per-request lines, its cProfile of each
request with KSEARCH_WORKER_PROFILE, and the LD_PRELOAD shim's "ksearch-shim: nvrtc NAME BYTES START SECONDS
RC" lines, each inside the request whose line follows it). Per-candidate figures are sums over the search
workloads; "later" means the candidates after the seed (the seed's evaluation also pays the run's prepare)."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TRACE = re.compile(r"ksearch-worker: (\w+) (\S*) ?(\S+) ([0-9.]+)s ?(.*)$")
PROF = re.compile(r"ksearch-worker: profile\s+(\d+(?:/\d+)?)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(.*)$")
SHIM = re.compile(r"ksearch-shim: nvrtc (\S+) (\d+) ([0-9.]+) ([0-9.]+) (-?\d+)")
MODLOAD = re.compile(r"ksearch-shim: modload ([0-9.]+) ([0-9.]+) (-?\d+)")

# Functions of the worker the report names (embedded worker python-a4f2288c6875; line numbers of that copy).
NAMED = {
    "targets/mlx.py:358(time)": "MlxTarget.time (all of timing but _plan)",
    "timing.py:164(measure)": "timing.measure (warm-up, rounds, untimed tail)",
    "timing.py:94(reps_for)": "timing.reps_for (warm-up batches)",
    "timing.py:201(call)": "measure.call (one batch: before+run+after)",
    "targets/mlx.py:630(before)": "Chain.before (build the lazy graph)",
    "targets/mlx.py:645(run)": "Chain.run (mx.eval + synchronize: the candidate's calls)",
    "targets/mlx.py:651(after)": "Chain.after (verify sampled calls, check scalars, poison outputs)",
    "evaluate.py:216(verify)": "evaluate._verifier.verify (a sampled timed call against its reference)",
    "check.py:55(compare)": "check.compare",
    "check.py:35(_passes_quickly)": "check._passes_quickly (numpy compare in float32)",
    "targets/mlx.py:821(host_outputs)": "MlxSession.host_outputs (device->host copy of outputs)",
    "targets/mlx.py:833(release)": "MlxSession.release -> MlxTarget.poison (NaN-fill produced buffers)",
    "targets/mlx.py:326(poison)": "MlxTarget.poison",
    "targets/mlx.py:673(before)": "NullChain.before",
    "targets/mlx.py:681(run)": "NullChain.run (links alone)",
    "targets/mlx.py:372(grow)": "time.grow (plan.extend + device_set of the extended plan)",
    "targets/mlx.py:296(device_set)": "MlxTarget.device_set (upload + fingerprint of input sets)",
    "targets/mlx.py:519(upload)": "upload (host->device input sets)",
    "targets/mlx.py:313(verify_sets)": "MlxTarget.verify_sets (fingerprints after timing)",
    "targets/mlx.py:746(calls_per_eval)": "Runner.calls_per_eval (probe: 3 warm-up + 3 timed single calls)",
    "evaluate.py:178(_plan)": "evaluate._plan (supply sets, reference sets)",
    "targets/mlx.py:899(recheck)": "MlxSession.recheck",
    "targets/mlx.py:857(check)": "MlxSession.check (checks phase)",
    "targets/mlx.py:844(_launch)": "MlxSession._launch (one poisoned run, evaluated: NVRTC at first launch)",
}


def parse_stderr(path: Path) -> list[dict]:
    """Requests in order: op, workload, status, seconds, split, profile {func: cumtime}, nvrtc [(name, s)]."""
    reqs: list[dict] = []
    pending_nvrtc: list[tuple[str, float]] = []
    pending_modload = 0.0
    for raw in path.read_text(errors="replace").splitlines():
        line = ANSI.sub("", raw)
        if m := SHIM.search(line):
            pending_nvrtc.append((m.group(1), float(m.group(4))))
            continue
        if m := MODLOAD.search(line):
            pending_modload += float(m.group(2))
            continue
        if m := PROF.search(line):
            if reqs:
                ncalls, tot, cum, where = m.group(1), float(m.group(2)), float(m.group(4)), m.group(6)
                key = next((k for k in NAMED if where.endswith(k)), where.split("ksearch_worker/")[-1])
                reqs[-1]["profile"][key] = {"ncalls": ncalls, "tottime": tot, "cumtime": cum}
            continue
        if "ksearch-worker: profile" in line:
            continue
        if m := TRACE.search(line):
            op, workload, status, secs, rest = m.groups()
            if op in ("hello", "load_task") or (op == "compile" and status == "compiled"):
                workload, status = ("", workload) if op != "compile" else ("", "compiled")
            split = {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", rest)}
            reqs.append({"op": op, "workload": workload, "status": status, "seconds": float(secs), "split": split,
                         "profile": {}, "nvrtc": pending_nvrtc, "modload_s": pending_modload})
            pending_nvrtc, pending_modload = [], 0.0
    return reqs


def by_candidate(reqs: list[dict]) -> list[list[dict]]:
    """Requests grouped by candidate: a `compile` request starts a candidate; a prepare belongs to the run
    that follows it."""
    cands: list[list[dict]] = []
    pending: list[dict] = []
    for r in reqs:
        if r["op"] in ("hello", "load_task"):
            continue
        if r["op"] == "compile":
            cands.append([])
        pending.append(r)
        if r["op"] == "run" and cands:
            cands[-1] += pending
            pending = []
    return cands


def r2(x: float) -> float:
    return round(x, 2)


def summarize(name: str, logs: Path) -> dict:
    show = json.loads((logs / f"{name}.show.json").read_text())
    reqs = parse_stderr(logs / f"{name}.stderr")
    cands = by_candidate(reqs)
    order = [a["candidate"] for a in show["attempts"] if a["phase"] == "search"]
    evals = [e for e in show["evaluations"] if e["phase"] == "search"]
    rows = []
    for i, h in enumerate(order):
        es = [e for e in evals if e["candidate"] == h]
        if not es:
            continue
        split: dict[str, float] = {}
        for e in es:
            for k, v in (e.get("split") or {}).items():
                if isinstance(v, (int, float)):
                    split[k] = split.get(k, 0.0) + v
        worker = split.get("total_s", 0.0) - split.get("overhead_s", 0.0)
        wall = sum(e["elapsed_s"] - e.get("prepare_s", 0.0) for e in es)
        row = {
            "candidate": h, "workloads": len(es), "statuses": sorted({e["status"] for e in es}),
            "wall_s": r2(wall), "prepare_s": r2(sum(e.get("prepare_s", 0.0) for e in es)),
            "compile_s": round(sum(e.get("compile_s", 0.0) for e in es), 4),
            **{k: r2(split.get(k, 0.0)) for k in ("setup_s", "checks_s", "timing_s", "recheck_s", "kernel_s",
                                                  "total_s", "overhead_s")},
            "outside_worker_s": r2(wall - split.get("total_s", 0.0)),
            "eval_cost_overhead_s": r2(max(wall - sum(e.get("compile_s", 0.0) for e in es) - worker, 0.0)),
            "sampled_checks": sum((e.get("timing") or {}).get("sampled_checks", 0) for e in es),
            "timed_calls": sum((e.get("timing") or {}).get("calls", 0) for e in es),
            "per_workload": [{"workload": e["workload"], "status": e["status"],
                              "wall_s": r2(e["elapsed_s"] - e.get("prepare_s", 0.0)),
                              "timing_s": r2((e.get("split") or {}).get("timing_s", 0.0)),
                              "checks_s": r2((e.get("split") or {}).get("checks_s", 0.0)),
                              "sampled_checks": (e.get("timing") or {}).get("sampled_checks"),
                              "distinct_inputs": (e.get("timing") or {}).get("distinct_inputs"),
                              "samples": (e.get("timing") or {}).get("samples")} for e in es],
        }
        if i < len(cands):
            runs = [r for r in cands[i] if r["op"] == "run"]
            nv = [(n, s) for r in runs for n, s in r["nvrtc"]]
            row["nvrtc_in_run_s"] = r2(sum(s for _, s in nv))
            row["nvrtc_modules_in_run"] = len(nv)
            row["nvrtc_in_prepare_s"] = r2(sum(s for r in cands[i] if r["op"] == "prepare" for _, s in r["nvrtc"]))
            prof: dict[str, float] = {}
            for r in runs:
                for k, v in r["profile"].items():
                    prof[k] = prof.get(k, 0.0) + v["cumtime"]
            row["profile_cumtime_s"] = {k: r2(v) for k, v in sorted(prof.items(), key=lambda kv: -kv[1])
                                        if k in NAMED} if prof else None
            row["verify_calls"] = sum(int(r["profile"]["evaluate.py:216(verify)"]["ncalls"].split("/")[0])
                                      for r in runs if "evaluate.py:216(verify)" in r["profile"])
            row["nvrtc_modules"] = [{"module": n, "s": r2(s)} for n, s in nv]
        rows.append(row)
    later = [r for r in rows[1:] if r["statuses"] == ["passed"]]  # after the seed, every workload passed

    def med(key: str) -> float | None:
        xs = [r[key] for r in later if isinstance(r.get(key), (int, float))]
        return r2(statistics.median(xs)) if xs else None

    prof_later: dict[str, list[float]] = {}
    for r in later:
        for k, v in (r.get("profile_cumtime_s") or {}).items():
            prof_later.setdefault(k, []).append(v)
    first_prepare = [r for r in reqs if r["op"] == "prepare" and r["seconds"] > 0.01]
    return {
        "candidates": rows,
        "later_candidates": len(later),
        "later_not_passed": [r["candidate"] for r in rows[1:] if r["statuses"] != ["passed"]],
        "per_candidate_median_later": {k: med(k) for k in ("wall_s", "checks_s", "timing_s", "recheck_s", "setup_s",
                                                           "kernel_s", "overhead_s", "outside_worker_s",
                                                           "nvrtc_in_run_s", "sampled_checks", "timed_calls")},
        "profile_cumtime_median_later_s": {NAMED[k] + f" [{k}]": r2(statistics.median(v))
                                           for k, v in sorted(prof_later.items(), key=lambda kv: -statistics.median(kv[1]))},
        "run_prepare": {"requests": len(first_prepare), "seconds": r2(sum(r["seconds"] for r in first_prepare)),
                        "nvrtc_s": r2(sum(s for r in first_prepare for _, s in r["nvrtc"])),
                        "nvrtc_modules": sum(len(r["nvrtc"]) for r in first_prepare),
                        "split_sum": {k: r2(sum(r["split"].get(k, 0.0) for r in first_prepare))
                                      for k in ("warm_s", "baselines_s", "reference_s", "draw_s")}},
        "worker_start_s": {r["op"]: r["seconds"] for r in reqs if r["op"] in ("hello", "load_task")},
        "nvrtc_all": {"modules": sum(len(r["nvrtc"]) for r in reqs),
                      "seconds": r2(sum(s for r in reqs for _, s in r["nvrtc"])),
                      "per_module_s": sorted(round(s, 2) for r in reqs for _, s in r["nvrtc"])},
    }


def main() -> None:
    logs = Path(sys.argv[1])
    out = {}
    for ev in (logs / "events").read_text().splitlines():
        if " start " in ev:
            name = ev.split()[2]
            out[name] = {"event": ev.split(" ", 1)[1]}
        elif " end " in ev:
            name = ev.split()[2]
            out[name]["end"] = ev.split(" ", 3)[3]
    for name in out:
        out[name].update(summarize(name, logs))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
