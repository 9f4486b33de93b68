#!/usr/bin/env bash
# The attention decode milestone on the device machine (MLX staged as for bench/h200.sh): the expert seed's
# decode tunables swept on the decode workloads with `ksearch eval --set ... --workload ...`, then the whole
# task evaluated (every workload, held-out ones included) with the configuration fastest at the milestone
# shape (decode_gqa_8k). Results: $OUT/attention-decode.json = {machine, versions, date, sweep: [one row
# per configuration], best, full: the full evaluation's JSON}; the log in $OUT/attention-decode.log.
# Knobs: NTDV, CHV, GHV, UV, UCV (space-separated values to sweep; default 64 128 × 128 256 × 4 × 4 × 1 2;
# U shapes the float32 path, UC the fp16/bf16 one),
# or CONFIGS (a file of configurations, one "--set A=1 --set B=2 ..." per line, e.g. from
# bench/attention_decode_ncu.sh), CHECKS (default 1), TIMING (seconds of timing per workload, default 0.5),
# FULL=0 skips the full evaluation. Configurations with NC > 0 (one launch in thread-block clusters) are refused
# by the worker unless MLX_USE_CUDA_GRAPHS=0 or KSEARCH_ALLOW_CLUSTERS=1 is exported (python/ksearch_worker/cluster.py).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_bin.sh  # PYTHONPATH, out, bin
store=$(mktemp -d)
log="$out/attention-decode.log"
rows=$(mktemp)
seed=tasks/attention/seeds/mlx-cuda/expert
checks=${CHECKS:-1}
timing=${TIMING:-0.5}
decode=(--workload decode_gqa_8k --workload decode_gqa_16k --workload decode_causal_3001 --workload decode_b4_bf16_d64)
eval_json() {  # eval_json ARGS...: one ksearch eval, its JSON line on stdout
  "$bin" --python python3 --store "$store" eval tasks/attention "$seed" --target mlx-cuda --checks "$checks" \
    --timing-budget "$timing" --json "$@" 2>>"$log" < /dev/null | tail -n 1
}
configs=$(mktemp)
if [ -n "${CONFIGS:-}" ]; then
  grep -v '^\s*$' "$CONFIGS" > "$configs"
else
  for ntd in ${NTDV:-64 128}; do for ch in ${CHV:-128 256}; do for gh in ${GHV:-4}; do for u in ${UV:-4}; do
    for uc in ${UCV:-1 2}; do echo "--set NTD=$ntd --set CH=$ch --set GH=$gh --set U=$u --set UC=$uc"; done
  done; done; done; done > "$configs"
fi
while read -r config; do
  # shellcheck disable=SC2206  # config is "--set A=1 --set B=2"
  set_args=($config)
  line=$(eval_json "${decode[@]}" "${set_args[@]}")
  python3 - "${set_args[*]}" "$line" >> "$rows" <<'PY'
import json, sys
sets, line = sys.argv[1:]
try:
    r = json.loads(line)
    ws = {w["workload"]: {"status": w["status"], "median_s": w.get("median_s"), "baselines": w.get("baselines"),
                          "launches_per_eval": w.get("launches_per_eval"),
                          **({} if w["status"] == "passed" else {"message": w.get("message", "")[-1500:]})}
          for w in r["workloads"]}
    print(json.dumps({"set": sets, "params": r["params"], "passed": r["passed"], "workloads": ws}))
except Exception as e:
    print(json.dumps({"set": sets, "error": f"no JSON result: {e}", "stdout_tail": line[-500:]}))
PY
  echo "== ${set_args[*]}: $(tail -n 1 "$rows" | head -c 400)" >> "$log"
done < "$configs"
best=$(python3 - "$rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = [r for r in rows if r.get("passed") and r["workloads"]["decode_gqa_8k"]["median_s"]]
print(min(ok, key=lambda r: r["workloads"]["decode_gqa_8k"]["median_s"])["set"] if ok else "")
PY
)
full='{}'
if [ "${FULL:-1}" = 1 ] && [ -z "$best" ]; then
  full='{"error": "no configuration passed every decode workload: nothing to evaluate in full"}'
elif [ "${FULL:-1}" = 1 ]; then
  # shellcheck disable=SC2086  # best is "--set A=1 --set B=2"
  full=$(eval_json $best)
  [ -n "$full" ] || full='{"error": "no JSON result"}'
fi
python3 - "$rows" "$best" "$full" "$out/attention-decode.json" <<'PY'
import datetime, json, platform, subprocess, sys
rows_file, best, full, dest = sys.argv[1:]
rows = [json.loads(l) for l in open(rows_file) if l.strip()]
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
import mlx.core as mx
try:
    full_json = json.loads(full)
except Exception:
    full_json = {"error": "no JSON result", "stdout_tail": full[-500:]}
json.dump({"script": "bash bench/attention_decode.sh", "date": datetime.date.today().isoformat(),
           "machine": {"gpu": smi, "system": platform.platform()}, "versions": {"mlx": mx.__version__},
           "command": "ksearch eval tasks/attention tasks/attention/seeds/mlx-cuda/expert --target mlx-cuda "
                      "--checks N --timing-budget S --json [--workload W]... [--set NAME=VALUE]...",
           "sweep": rows, "best": best, "full": full_json}, open(dest, "w"), indent=1)
for r in rows:
    w = r.get("workloads", {})
    print(r["set"], "|", ", ".join(f"{k}: {v['status']} {v['median_s'] and round(v['median_s'] * 1e6, 1)} us "
                                   f"(sdpa {v['baselines'] and round(v['baselines'].get('mlx_sdpa', 0) * 1e6, 1)})"
                                   for k, v in w.items()) or r.get("error"))
print("best:", best)
for w in full_json.get("workloads", []):
    b = w.get("baselines") or {}
    print(f"  {w['workload']}: {w['status']} {w.get('median_s')} sdpa {b.get('mlx_sdpa')} x{(b.get('mlx_sdpa') or 0) / (w.get('median_s') or 1):.2f}")
PY
