#!/usr/bin/env bash
# Tune every built-in CPU task with the default budget (30 evaluations) and record, per task, the
# wall time, the run's JSON result, the machine and the versions, in bench/results/.
# Usage: bash bench/cpu_tune.sh [BUDGET]
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-30}"
cargo build --release --quiet
bin=target/release/ksearch
store=$(mktemp -d)
trap 'rm -rf "$store"' EXIT
host=$(hostname -s 2>/dev/null || echo host)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="bench/results/cpu-tune-${stamp}.json"
entries=()
for task in matmul softmax scan; do
  cmd="ksearch run $task --target cpu --strategy tune --budget $budget --json"
  start=$(date +%s.%N)
  line=$("$bin" --store "$store" run "$task" --target cpu --strategy tune --budget "$budget" --json | tail -n 1)
  end=$(date +%s.%N)
  wall=$(python3 -c "print(round($end - $start, 2))")
  echo "$task: wall ${wall}s speedup_vs_seed=$(python3 -c "import json,sys; b=json.loads(sys.argv[1])['best']; print(round(b['speedup_vs_seed'],2), 'vs baseline', round(b['speedup_vs_baseline'] or 0,2), 'held-out', b['held_out_passed'])" "$line")" >&2
  entries+=("{\"task\": \"$task\", \"command\": \"$cmd\", \"wall_s\": $wall, \"result\": $line}")
done
python3 - "$out" "${entries[@]}" <<'PY'
import json, os, platform, subprocess, sys
out, *entries = sys.argv[1:]
def first_line(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0]
    except Exception:
        return None
record = {
    "bench": "cpu-tune",
    "machine": {"node": platform.node(), "cpu": json.loads(entries[0])["result"]["hardware"].get("name"),
                "cores": os.cpu_count(), "system": platform.platform()},
    "versions": {"ksearch": first_line(["target/release/ksearch", "--version"]),
                 "rustc": first_line(["rustc", "--version"]), "cc": first_line(["cc", "--version"])},
    "runs": [json.loads(e) for e in entries],
}
with open(out, "w") as f:
    json.dump(record, f, indent=1)
print(out)
PY
