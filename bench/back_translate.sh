#!/usr/bin/env bash
# Back-translation on the H200 (issue 5): every shipped mlx-metal seed (tasks/*/seeds/mlx-metal/*) is
# rewritten into the MLX-CUDA dialect by `ksearch back-translate` and evaluated against its task's reference
# with `ksearch eval --target mlx-cuda`, so the logic of each Metal kernel is checked without a Mac.
# Run on the device machine with MLX staged (as for bench/h200.sh) and the release binary carried as
# .device/binz/ksearch.gz (preferred: .device/mlx-b plus an unpacked binary exceed a call's 64 MiB) or in
# .device/bin/.
# Result: $OUT/back_translate.json = {machine, versions, date, seeds: [one object per seed, with its kernels,
# the commands, and the status of every workload]}; the log in $OUT/back_translate.log.
# Knobs: CHECKS (fresh random inputs per workload, default 2), TIMING (seconds of timing per workload,
# default 0.3), ONLY (a regex on "task/seed" to run a subset), JOBS (seeds side by side, default 8),
# PER_SEED_S (deadline of one evaluation, default 480, inside a 600 s device call), KSEARCH_BIN.
# Each seed's line is appended to $OUT/back_translate.jsonl as soon as it is done, so a run cut short
# keeps what finished.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_bin.sh  # PYTHONPATH, out, bin
checks=${CHECKS:-2}
timing=${TIMING:-0.3}
only=${ONLY:-.}
jobs=${JOBS:-8}           # seeds evaluated side by side (the timings mean nothing here; the statuses do)
per_seed=${PER_SEED_S:-480}  # deadline of one seed's evaluation
work=$(mktemp -d)
log="$out/back_translate.log"
rows="$out/back_translate.jsonl"  # one line per seed as it finishes (kept if the run is cut short)
: > "$rows"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import mlx.core as mx; print('mlx', mx.__version__, 'cuda', mx.cuda.is_available())"
} >> "$log" 2>&1
one_seed() {  # one_seed SEED_DIR: back-translate, evaluate, append one JSON line to $rows
  local seed=$1 task name dir st
  task=$(basename "$(dirname "$(dirname "$(dirname "$seed")")")")
  name=$(basename "$seed")
  dir="$work/$task-$name"
  st=$(mktemp -d)   # one store per seed: the evaluations run side by side
  local bt_cmd="ksearch back-translate $seed --out <tmp> --json"
  local ev_cmd="ksearch --python python3 eval tasks/$task <tmp> --target mlx-cuda --checks $checks --timing-budget $timing --json"
  local bt ev=""
  bt=$("$bin" back-translate "$seed" --out "$dir" --json 2>"$dir.bt.err" | tail -n 1)
  : > "$dir.ev.err"
  if [ -f "$dir/plan.toml" ]; then
    ev=$(timeout "$per_seed" "$bin" --python python3 --store "$st" eval "tasks/$task" "$dir" --target mlx-cuda \
      --checks "$checks" --timing-budget "$timing" --json 2>"$dir.ev.err" | tail -n 1)
  fi
  python3 - "$task" "$name" "$bt_cmd" "$ev_cmd" "$bt" "$ev" "$dir.bt.err" "$dir.ev.err" "$rows" <<'PY'
import json, os, sys
task, seed, bt_cmd, ev_cmd, bt, ev, bt_err, ev_err, rows = sys.argv[1:]
def parse(s):
    try:
        return json.loads(s)
    except Exception:
        return None
btj, evj = parse(bt), parse(ev)
row = {"task": task, "seed": seed, "commands": [bt_cmd, ev_cmd]}
if btj is None:
    row["status"] = "back_translate_error"
    row["error"] = open(bt_err).read()[-2000:]
else:
    row["candidate"] = btj.get("hash")
    row["kernels"] = [{k2: k[k2] for k2 in ("kernel", "metal_source", "cuda_source", "rewrites", "attributes", "ghost_guard")}
                      for k in btj["report"]["kernels"]]
    row["notes"] = btj["report"]["notes"]
    if evj is None:
        row["status"] = "eval_error"
        row["error"] = (ev + "\n" + open(ev_err).read())[-2000:]
    else:
        row["passed"] = evj.get("passed")
        row["status"] = "passed" if evj.get("passed") else "failed"
        row["workloads"] = [{"workload": w["workload"], "status": w["status"], "held_out": w.get("held_out"),
                             "max_abs": w.get("max_abs"), "max_rel": w.get("max_rel"), "median_s": w.get("median_s"),
                             "message": (w.get("message") or "")[:600]} for w in evj.get("workloads", [])]
        row["hardware"] = {k: evj.get("hardware", {}).get(k) for k in ("name", "mlx", "gpu_name", "driver")}
# one write() in append mode: lines of seeds finishing together do not interleave
fd = os.open(rows, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, (json.dumps(row) + "\n").encode())
os.close(fd)
PY
  { echo "== $task/$name: $(tail -c 300 <<< "$ev")"; cat "$dir.ev.err"; } >> "$log"
}
for seed in tasks/*/seeds/mlx-metal/*/; do
  [ -f "$seed/plan.toml" ] || continue
  s=${seed%/}
  grep -Eq "$only" <<< "$(basename "$(dirname "$(dirname "$(dirname "$s")")")")/$(basename "$s")" || continue
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  one_seed "$s" &
done
wait
python3 - "$rows" "$out/back_translate.json" "$bin" <<'PY'
import datetime, json, platform, subprocess, sys
rows = sorted((json.loads(l) for l in open(sys.argv[1]) if l.strip()), key=lambda r: (r["task"], r["seed"]))
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except OSError as e:
    smi = f"no nvidia-smi: {e}"
try:
    import mlx.core as mx
    versions = {"mlx": mx.__version__, "cuda_available": bool(mx.cuda.is_available())}
except Exception as e:
    versions = {"error": str(e)}
ks = subprocess.run([sys.argv[3], "--version"], capture_output=True, text=True).stdout.strip()
versions["ksearch"] = ks
json.dump({"what": "every shipped mlx-metal seed back-translated to mlx-cuda and evaluated against the reference",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"gpu": smi, "system": platform.platform()}, "versions": versions, "seeds": rows},
          open(sys.argv[2], "w"), indent=1)
for r in rows:
    ws = ", ".join(f"{w['workload']}: {w['status']}" for w in r.get("workloads", []))
    print(f"{r['task']}/{r['seed']}: {r['status']} | {ws or r.get('error', '')[-300:]}")
PY
