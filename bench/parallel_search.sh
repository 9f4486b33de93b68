#!/usr/bin/env bash
# Wall time of an `evolve` run at --parallel 1 and at --parallel K on the CPU target (matmul, real
# evaluations), against bench/scripted_llm.py: an OpenAI-compatible server whose every reply takes LATENCY
# seconds and is a valid, new candidate. Records both runs' wall time, evaluations, LLM calls, and the split
# of the wall time between evaluating (the evaluations' own wall time, from the store) and the rest (waiting
# for the LLM, mostly) in bench/results/cpu-parallel-evolve-<YYYYMMDD>.json.
#   bash bench/parallel_search.sh            # BUDGET=24 LATENCY=3 PARALLEL=4
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=${BUDGET:-24}
LATENCY=${LATENCY:-3}
PARALLEL=${PARALLEL:-4}
cargo build --release --quiet
bin=target/release/ksearch
work=$(mktemp -d)
python3 bench/scripted_llm.py --latency "$LATENCY" > "$work/url" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do [ -s "$work/url" ] && break; sleep 0.1; done
url=$(cat "$work/url")
for k in 1 "$PARALLEL"; do
  store="$work/store-$k"
  start=$(date +%s.%N)
  "$bin" --store "$store" run matmul --strategy evolve --llm llamacpp:scripted --llm-base-url "$url" \
    --budget "$BUDGET" --parallel "$k" --tune-budget 0 --checks 1 --timing-budget 0.1 --json \
    > "$work/run-$k.json"
  end=$(date +%s.%N)
  echo "$start $end" > "$work/wall-$k"
done
python3 - "$work" "$BUDGET" "$LATENCY" "$PARALLEL" <<'PY'
import datetime, json, os, platform, sqlite3, subprocess, sys
from pathlib import Path

work, budget, latency, parallel = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
runs = {}
for k in (1, parallel):
    result = json.loads((work / f"run-{k}.json").read_text().strip().splitlines()[-1])
    start, end = map(float, (work / f"wall-{k}").read_text().split())
    db = sqlite3.connect(work / f"store-{k}" / "ksearch.db")
    evaluating = sum(json.loads(r)["elapsed_s"] for (r,) in db.execute("SELECT result FROM evaluations"))
    llm_s = sum(json.loads(e)["outcome"].get("latency_s", 0.0) for (e,) in db.execute("SELECT exchange FROM llm_exchanges"))
    wall = end - start
    runs[f"parallel_{k}"] = {
        "wall_s": round(wall, 1), "status": result["status"], "rounds": result.get("rounds"),
        "evaluations": result["evaluations"], "llm_calls": result["llm"]["exchanges"],
        "evaluating_s": round(evaluating, 1), "llm_latency_summed_s": round(llm_s, 1),
        "other_s": round(wall - evaluating, 1),
        "best_speedup_vs_seed": (result.get("best") or {}).get("speedup_vs_seed"),
    }
record = {
    "command": "bash bench/parallel_search.sh" + f" (BUDGET={budget} LATENCY={latency} PARALLEL={parallel})",
    "what": "evolve on matmul (CPU target, real evaluations, --checks 1 --timing-budget 0.1, no tuning) against a "
            f"scripted OpenAI-compatible server replying after {latency} s; other_s is the wall time not spent "
            "evaluating (waiting for the LLM, the worker's start, the final phase's re-timing)",
    "machine": {"system": platform.platform(), "cores": os.cpu_count()},
    "date": datetime.date.today().isoformat(),
    "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "runs": runs,
    "speedup_wall": round(runs["parallel_1"]["wall_s"] / runs[f"parallel_{parallel}"]["wall_s"], 2),
}
out = Path("bench/results") / f"cpu-parallel-evolve-{datetime.date.today():%Y%m%d}.json"
out.write_text(json.dumps(record, indent=1) + "\n")
print(json.dumps(record, indent=1))
PY
