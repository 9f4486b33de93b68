#!/usr/bin/env bash
# Verdicts under a competing load, on this machine's CPU target. While another process keeps one core busy:
#   - a tuned softmax (the naive seed with ACC=8 FAST_EXP=1 ONLINE=1) is evaluated ROUNDS times against the
#     naive seed (`ksearch eval --incumbent`): the verdict must be "faster" every time;
#   - the same tuned code under another hash (a comment added) is evaluated ROUNDS times against it: identical
#     kernels must never be called faster or slower.
# Writes bench/results/cpu-verdicts-<stamp>.json (command, machine, every verdict and per-workload figures).
# Usage: bash bench/verdict_noise.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
cargo build --release --quiet
bin=target/release/ksearch
work=$(mktemp -d)
trap 'if [ -n "${load:-}" ]; then kill "$load" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
seed=tasks/softmax/seeds/cpu/naive
set_flags=(--set ACC=8 --set FAST_EXP=1 --set ONLINE=1)
# The same tuned code as a folder of its own, with a comment so its hash differs.
cp -r "$seed" "$work/twin"
python3 - "$work/twin" <<'PY'
import pathlib, re, sys
d = pathlib.Path(sys.argv[1])
plan = (d / "plan.toml").read_text()
for name, value in (("ACC", 8), ("FAST_EXP", 1), ("ONLINE", 1)):
    plan, n = re.subn(rf"(\[tunable\.{name}\].*?\ndefault = )\d+", rf"\g<1>{value}", plan, count=1, flags=re.S)
    if n != 1:
        sys.exit(f"{d / 'plan.toml'}: no default for tunable {name}; the twin would not be the tuned code")
(d / "plan.toml").write_text(plan)
src = d / "softmax.c"
src.write_text(src.read_text() + "\n/* the same code as the tuned candidate, under another hash */\n")
PY
python3 -c 'while True: pass' &
load=$!
rows="$work/rows.jsonl"
: > "$rows"
for i in $(seq "$rounds"); do
  for pair in seed twin; do
    inc=$seed
    [ "$pair" = twin ] && inc=$work/twin
    line=$("$bin" --store "$work/store" eval softmax "$seed" "${set_flags[@]}" --incumbent "$inc" --json 2>/dev/null \
      | tail -n 1)
    python3 - "$pair" "$i" "$line" >> "$rows" <<'PY'
import json, sys
pair, i, line = sys.argv[1:]
r = json.loads(line)
print(json.dumps({"pair": pair, "round": int(i), "verdict": r.get("verdict"),
                  "workloads": [{"workload": w["workload"], "median_s": w["median_s"], "iqr_s": w["iqr_s"],
                                 "noisy": w["noisy"], "comparison": w["comparison"]} for w in r["workloads"]
                                if w.get("comparison")]}))
PY
  done
done
kill "$load" 2>/dev/null || true
stamp=$(date -u +%Y%m%dT%H%M%SZ)
python3 - "$rows" "bench/results/cpu-verdicts-${stamp}.json" "$rounds" <<'PY'
import json, os, platform, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out, rounds = sys.argv[2], int(sys.argv[3])
def verdicts(pair):
    return [(r["verdict"] or {}).get("verdict") for r in rows if r["pair"] == pair]
summary = {
    "tuned_vs_seed": verdicts("seed"), "identical_pair": verdicts("twin"),
    "tuned_vs_seed_never_flips": all(v == "faster" for v in verdicts("seed")),
    "identical_never_decided": all(v == "within noise" for v in verdicts("twin")),
    "speedups_vs_seed": [round((r["verdict"] or {}).get("speedup", 0), 3) for r in rows if r["pair"] == "seed"],
}
json.dump({"bench": "cpu-verdicts",
           "command": f"bash bench/verdict_noise.sh {rounds}  (ksearch eval softmax <naive seed> --set ACC=8 --set FAST_EXP=1 "
                      "--set ONLINE=1 --incumbent <seed | the same code under another hash>, one core kept busy)",
           "machine": {"node": platform.node(), "system": platform.platform(), "cores": os.cpu_count()},
           "summary": summary, "rows": rows}, open(out, "w"), indent=1)
print(json.dumps(summary))
PY
