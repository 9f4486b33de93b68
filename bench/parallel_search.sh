#!/usr/bin/env bash
# Wall time of `world-model` and `evolve` runs at --parallel 1 and at --parallel K on the CPU target (matmul,
# real evaluations), against bench/scripted_llm.py: an OpenAI-compatible server whose every reply takes
# LATENCY seconds (a valid, new candidate, or a tree edit). Records each run's wall time, rounds, evaluations,
# LLM calls, and the split of the wall time between evaluating (the evaluations' own wall time, from the
# store) and the rest (waiting for the LLM, mostly) in bench/results/cpu-parallel-search-<YYYYMMDD>-latency<L>s.json.
#   bash bench/parallel_search.sh   # BUDGET=24 LATENCY=3 PARALLEL=4 STRATEGIES="world-model evolve"
# DEVICES=N gives the --parallel K runs N CPU workers, each pinned to its own cores (--devices N), and adds
# -devices<N> to the file's name.
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=${BUDGET:-24}
LATENCY=${LATENCY:-3}
PARALLEL=${PARALLEL:-4}
STRATEGIES=${STRATEGIES:-world-model evolve}
DEVICES=${DEVICES:-}
cargo build --release --quiet
bin=target/release/ksearch
work=$(mktemp -d)
server=
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for strategy in $STRATEGIES; do
  for k in 1 "$PARALLEL"; do
    name="$strategy-$k"
    # A fresh server per run: both runs of a strategy are offered the same replies in the same order.
    [ -n "$server" ] && kill "$server" 2>/dev/null
    python3 bench/scripted_llm.py --latency "$LATENCY" > "$work/url-$name" &
    server=$!
    for _ in $(seq 50); do [ -s "$work/url-$name" ] && break; sleep 0.1; done
    url=$(cat "$work/url-$name")
    devices=(); [ -n "$DEVICES" ] && [ "$k" != 1 ] && devices=(--devices "$DEVICES")
    start=$(date +%s.%N)
    "$bin" --store "$work/store-$name" run matmul --strategy "$strategy" --llm llamacpp:scripted \
      --llm-base-url "$url" --budget "$BUDGET" --parallel "$k" --tune-budget 0 --checks 1 \
      --timing-budget 0.1 "${devices[@]}" --json > "$work/run-$name.json" 2> "$work/log-$name"
    end=$(date +%s.%N)
    echo "$start $end" > "$work/wall-$name"
  done
done
python3 - "$work" "$BUDGET" "$LATENCY" "$PARALLEL" "$STRATEGIES" "$DEVICES" <<'PY'
import datetime, json, os, platform, sqlite3, subprocess, sys
from pathlib import Path

work, budget, latency, parallel = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
devices = sys.argv[6]
runs = {}
names = [f"{s}-{k}" for s in sys.argv[5].split() for k in (1, parallel)]
for name in names:
    result = json.loads((work / f"run-{name}.json").read_text().strip().splitlines()[-1])
    start, end = map(float, (work / f"wall-{name}").read_text().split())
    db = sqlite3.connect(work / f"store-{name}" / "ksearch.db")
    evaluating = sum(json.loads(r)["elapsed_s"] for (r,) in db.execute("SELECT result FROM evaluations"))
    by_phase: dict[str, float] = {}
    for phase, r in db.execute("SELECT phase, result FROM evaluations"):
        by_phase[phase] = by_phase.get(phase, 0.0) + json.loads(r)["elapsed_s"]
    # When the search's last evaluation was stored, from the start: what follows is the final phase.
    (last_search,) = db.execute("SELECT MAX(created_at) FROM evaluations WHERE phase = 'search'").fetchone()
    llm_s = sum(json.loads(e)["outcome"].get("latency_s", 0.0) for (e,) in db.execute("SELECT exchange FROM llm_exchanges"))
    wall = end - start
    runs[name] = {
        "wall_s": round(wall, 1), "status": result["status"], "rounds": result.get("rounds"),
        "evaluations": result["evaluations"], "llm_calls": result["llm"]["exchanges"],
        "evaluating_s": round(evaluating, 1), "llm_latency_summed_s": round(llm_s, 1),
        "other_s": round(wall - evaluating, 1),
        "evaluating_s_by_phase": {k: round(v, 1) for k, v in sorted(by_phase.items())},
        "final_phase_s": round(end - last_search, 1) if last_search else None,
        "best_speedup_vs_seed": (result.get("best") or {}).get("speedup_vs_seed"),
        "devices": result.get("devices") or ["default"],
    }
record = {
    "command": "bash bench/parallel_search.sh" + f" (BUDGET={budget} LATENCY={latency} PARALLEL={parallel} "
               f"STRATEGIES='{sys.argv[5]}'" + (f" DEVICES={devices}" if devices else "") + ")",
    "what": "searches of matmul (CPU target, real evaluations, one at a time on each device, --checks 1 "
            f"--timing-budget 0.1, no tuning) against a scripted OpenAI-compatible server replying after {latency} s; other_s is the wall "
            "time not spent evaluating (waiting for the LLM, the worker's start, the final phase's re-timing)",
    "machine": {"system": platform.platform(), "cores": os.cpu_count()},
    "date": datetime.date.today().isoformat(),
    "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "runs": runs,
    "wall_speedup": {s: round(runs[f"{s}-1"]["wall_s"] / runs[f"{s}-{parallel}"]["wall_s"], 2)
                     for s in sys.argv[5].split()},
}
suffix = f"-devices{devices}" if devices else ""
out = Path("bench/results") / f"cpu-parallel-search-{datetime.date.today():%Y%m%d}-latency{latency:g}s{suffix}.json"
n = 2
while out.exists():  # an earlier record of the same day stays as it is
    out = out.with_name(f"cpu-parallel-search-{datetime.date.today():%Y%m%d}-latency{latency:g}s{suffix}-{n}.json")
    n += 1
out.write_text(json.dumps(record, indent=1) + "\n")
print(json.dumps(record, indent=1))
PY
