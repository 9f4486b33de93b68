#!/usr/bin/env bash
# CUDA translation on the H200 (issue 5): each main fixture of tests/translate/ is translated by
# `ksearch translate`, then evaluated against its task (tests/translate/tasks/<name>) with
# `ksearch eval --target mlx-cuda`:
#   cuda:  translate --to mlx-cuda, evaluated as is;
#   metal: translate --to mlx-metal, then `ksearch back-translate` (Metal → MLX-CUDA), evaluated, so the logic
#          of the Metal translation runs against the reference without a Mac.
# Run on the device machine with MLX staged (as for bench/h200.sh) and the binary in KSEARCH_BIN.
# Result: $OUT/translate_h200.json = {machine, versions, date, runs: [{fixture, route, commands, status, ...}]}.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_bin.sh  # PYTHONPATH, out, bin
checks=${CHECKS:-2}
timing=${TIMING:-0.2}
work=$(mktemp -d)
store=$(mktemp -d)
log="$out/translate_h200.log"
rows="$out/translate_h200.jsonl"
: > "$rows"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import mlx.core as mx; print('mlx', mx.__version__, 'cuda', mx.cuda.is_available())"
} >> "$log" 2>&1
for f in vector_add reduce_shared warp_reduce histogram softmax; do
  for route in cuda metal; do
    dir="$work/$f-$route"
    cmds=()
    if [ "$route" = cuda ]; then
      cmds+=("ksearch translate tests/translate/$f.cu --to mlx-cuda --out <dir> --json")
      "$bin" translate "tests/translate/$f.cu" --to mlx-cuda --out "$dir" --json > "$work/tr.json" 2>>"$log"
    else
      cmds+=("ksearch translate tests/translate/$f.cu --to mlx-metal --out <metal> --json" "ksearch back-translate <metal> --out <dir> --json")
      "$bin" translate "tests/translate/$f.cu" --to mlx-metal --out "$dir-metal" --json > "$work/tr.json" 2>>"$log"
      "$bin" back-translate "$dir-metal" --out "$dir" --json >> "$log" 2>&1
    fi
    cmds+=("ksearch eval tests/translate/tasks/$f <dir> --target mlx-cuda --checks $checks --timing-budget $timing --json")
    ev=$("$bin" --python python3 --store "$store" eval "tests/translate/tasks/$f" "$dir" --target mlx-cuda \
      --checks "$checks" --timing-budget "$timing" --json 2>>"$log" | tail -n 1)
    python3 - "$f" "$route" "$work/tr.json" "$ev" "${cmds[@]}" >> "$rows" <<'PY'
import json, sys
fixture, route, tr_file, ev = sys.argv[1:5]
cmds = sys.argv[5:]
try:
    tr = json.loads(open(tr_file).read().splitlines()[-1])
    diags = [{k: d[k] for k in ("code", "severity", "line")} for d in tr["diagnostics"]]
except Exception:
    diags = None
try:
    evj = json.loads(ev)
    status = "passed" if evj.get("passed") else "failed"
    workloads = [{"workload": w.get("workload"), "status": w.get("status"), "message": (w.get("message") or "")[:300],
                  "median_s": w.get("median_s")} for w in evj.get("workloads", [])]
except Exception:
    status, workloads = "no_result", []
print(json.dumps({"fixture": fixture, "route": route, "commands": cmds, "status": status,
                  "translate_diagnostics": diags, "workloads": workloads}))
PY
    echo "== $f/$route: $(tail -n 1 "$rows" | cut -c1-300)" >> "$log"
  done
done
python3 - "$rows" "$log" > "$out/translate_h200.json" <<'PY'
import json, subprocess, sys, platform
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
try:
    import mlx.core as mx
    mlx = mx.__version__
except Exception:
    mlx = None
print(json.dumps({"machine": {"gpu": gpu, "python": platform.python_version()}, "mlx": mlx,
                  "date": subprocess.run(["date", "-u", "+%FT%TZ"], capture_output=True, text=True).stdout.strip(),
                  "runs": rows}, indent=1))
PY
cat "$out/translate_h200.json" | python3 -c "import json,sys; d=json.load(sys.stdin); [print(r['fixture'], r['route'], r['status']) for r in d['runs']]"
