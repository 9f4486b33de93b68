#!/usr/bin/env bash
# Everything the H200 must show, in one call on the device machine (MLX staged by
# ../shared/device/prepare-mlx-cuda.sh; the ksearch binary as bench/device_bin.sh finds it):
# every mlx-cuda seed of every MLX task evaluated on every workload (held-out ones included), then a
# tune run from the expert seed. Results: $OUT/h200.json (one object per command, with the command,
# the machine and the versions) and $OUT/h200.log.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_bin.sh  # PYTHONPATH, out, bin
tasks=${TASKS:-mamba-scan}
budget=${BUDGET:-12}
checks=${CHECKS:-3}      # fresh random inputs per workload in the evals
tune=${TUNE:-1}          # 0 skips the tune runs
store=$(mktemp -d)
log="$out/h200.log"
results="$out/h200.jsonl"
: > "$results"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'cuda', mx.cuda.is_available(), 'mlx_lm', mlx_lm.__version__)"
} >> "$log" 2>&1
record() {  # record NAME CMD...: runs ksearch, appends {name, command, result} to the results
  local name=$1; shift
  local t0=$(date +%s.%N)
  local line
  line=$("$bin" --python python3 --store "$store" "$@" --json 2>>"$log" | tail -n 1)
  local t1=$(date +%s.%N)
  python3 - "$name" "$*" "$line" "$t0" "$t1" >> "$results" <<'PY'
import json, sys
name, cmd, line, t0, t1 = sys.argv[1:]
try:
    result = json.loads(line)
except Exception:
    result = {"error": "no JSON result", "stdout_tail": line[-2000:]}
print(json.dumps({"name": name, "command": "ksearch " + cmd + " --json", "wall_s": round(float(t1) - float(t0), 2), "result": result}))
PY
  echo "== $name: $(tail -c 300 <<< "$line")" >> "$log"
}
for task in $tasks; do
  for seed in tasks/$task/seeds/mlx-cuda/*/; do
    s=$(basename "$seed")
    record "$task/eval/$s" eval "tasks/$task" "$seed" --target mlx-cuda --checks "$checks"
  done
  if [ "$tune" = 1 ] && [ -d "tasks/$task/seeds/mlx-cuda/expert" ]; then
    record "$task/tune/expert" run "tasks/$task" --target mlx-cuda --seed expert --budget "$budget"
  fi
done
# The exported module of each expert seed, and its own test, on the kernel's path.
for task in ${EXPORT_TASKS:-$tasks}; do
  seed="tasks/$task/seeds/mlx-cuda/expert"
  [ -d "$seed" ] || continue
  exp=$(mktemp -d)
  if "$bin" export "$seed" --task "tasks/$task" --out "$exp" >> "$log" 2>&1; then
    f=$(ls "$exp" | grep -v _test.py | head -1)
    line=$(cd "$exp" && python3 "${f%.py}_test.py" 2>&1 | tail -n 1)
  else
    line="export failed"
  fi
  echo "== $task/export: $line" >> "$log"
  python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[1], "command": sys.argv[2], "result": {"test": sys.argv[3]}}))' \
    "$task/export" "ksearch export $seed --task tasks/$task --format mlx-python; python3 <module>_test.py" "$line" >> "$results"
done
# Optional suites in the same call: ADVERSARIAL=1 (tests/adversarial/mlx-cuda), BACK=1 (every shipped
# Metal seed back-translated and evaluated), OVERHEAD=1 (where a short MLX call's time goes), each
# writing its own JSON next to h200.json.
[ "${ADVERSARIAL:-0}" = 1 ] && KSEARCH_BIN=$bin OUT=$out bash bench/adversarial_mlx.sh >> "$log" 2>&1
[ "${BACK:-0}" = 1 ] && KSEARCH_BIN=$bin OUT=$out bash bench/back_translate.sh >> "$log" 2>&1
[ "${OVERHEAD:-0}" = 1 ] && python3 bench/mlx_call_overhead.py > "$out/mlx-call-overhead.json" 2>> "$log"
python3 - "$results" "$out/h200.json" <<'PY'
import json, platform, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
try:
    import mlx.core as mx, mlx_lm
    versions = {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__}
except Exception as e:
    versions = {"error": str(e)}
json.dump({"machine": {"gpu": smi, "system": platform.platform()}, "versions": versions, "runs": rows},
          open(sys.argv[2], "w"), indent=1)
for r in rows:
    res = r["result"]
    ws = res.get("workloads") or (res.get("best") or {}).get("workloads") or []
    if "test" in res:
        print(r["name"], "|", res["test"])
        continue
    print(r["name"], "|", ", ".join(f"{w['workload']}: {w['status']} {w.get('median_s')}" for w in ws)[:600])
PY
