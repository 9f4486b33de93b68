#!/usr/bin/env bash
# Everything the H200 must show, in one call on the device machine (MLX staged by
# ../shared/device/prepare-mlx-cuda.sh; the ksearch binary as bench/device_bin.sh finds it). Sections, in
# order (SECTIONS picks some; each step is time-boxed so one stuck part cannot eat the call):
#   chain      bench/mlx_chain_check.py: a low-occupancy kernel chained the evaluator's way costs its time
#              alone, far above its independent throughput (the clock is serial on this GPU)
#   clock      `ksearch eval --throughput` of the seeds and workloads the clock issue and the milestones
#              name: the chained latency the evaluator reports, beside the old clock's independent-call
#              throughput and one call alone, for the candidate and every baseline
# ADV_LIMIT and COST_LIMIT (seconds) bound the adversarial suite and each cost task.
#   tables     `ksearch eval` of each expert seed on every workload of its task, held-out ones included
#              (attention, mamba-scan, ssd; TABLE_TASKS picks some): the README's per-workload tables
#   cost       bench/eval_cost.py: what one candidate's evaluation costs inside a tune search, with its split
#              (the search stopped after COST_LIMIT s; each candidate's precompile line kept in the log)
#   adversarial  bench/adversarial_mlx.sh: the mlx-cuda adversarial suite
#   export     each expert seed exported as an MLX module, and its own test
#   paged      gqa-paged-decode: the naive and expert mlx-cuda seeds on every workload (held-out ones included)
#              against MLX's gather + SDPA, then a short tune search from the expert seed
#   devices    (a machine of 2+ GPUs) a tune search of softmax with --parallel 2 over --devices 2, then over one
#              GPU (DEVICES_COUNTS, default "2 1"): the workers' processes sampled with nvidia-smi on their
#              GPUs, and the wall times
# Results land in $OUT (h200.json with every command and its result, plus one file per section's tool).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_bin.sh  # PYTHONPATH, out, bin
sections=${SECTIONS:-chain clock cost adversarial}
store=$(mktemp -d)
log="$out/h200.log"
results="$out/h200.jsonl"
source bench/device_steps.sh  # call_end, upto, record
: > "$results"
export PYTHONPATH="$PYTHONPATH:$PWD/python"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import mlx.core as mx; print('mlx', mx.__version__, 'cuda', mx.cuda.is_available())"
} >> "$log" 2>&1
has() { [[ " $sections " == *" $1 "* ]]; }
seeds=tasks/attention/seeds/mlx-cuda
if has chain; then
  timeout "$(upto 120)" python3 bench/mlx_chain_check.py > "$out/chain-check.json" 2>>"$log"
  echo "== chain: $(cat "$out/chain-check.json")" >> "$log"
fi
if has clock; then
  clock=(--checks 1 --throughput)
  record attention/decode 240 eval tasks/attention $seeds/naive $seeds/expert --workload decode_gqa_8k "${clock[@]}"
  record attention/prefill 240 eval tasks/attention $seeds/expert --workload prefill_causal_4k "${clock[@]}"
  record mamba-scan/m130m 240 eval tasks/mamba-scan tasks/mamba-scan/seeds/mlx-cuda/naive \
    tasks/mamba-scan/seeds/mlx-cuda/expert --workload m130m_l4096 "${clock[@]}"
  record ssd/nemo 180 eval tasks/ssd tasks/ssd/seeds/mlx-cuda/expert --workload nemo_l4096 "${clock[@]}"
fi
if has paged; then
  paged=tasks/gqa-paged-decode/seeds/mlx-cuda
  record gqa-paged-decode/all-workloads "${PAGED_LIMIT:-420}" eval tasks/gqa-paged-decode $paged/naive $paged/expert \
    --target mlx-cuda --checks 1
  record gqa-paged-decode/tune "${PAGED_TUNE_LIMIT:-240}" run tasks/gqa-paged-decode --target mlx-cuda --strategy tune \
    --budget "${PAGED_BUDGET:-6}" --checks 1 --candidate $paged/expert
fi
if has tables; then
  for task in ${TABLE_TASKS:-attention mamba-scan ssd}; do
    record "$task/all-workloads" "${TABLE_LIMIT:-300}" eval "tasks/$task" "tasks/$task/seeds/mlx-cuda/expert" \
      --target mlx-cuda --checks 1
  done
fi
if has cost; then
  for task in ${COST_TASKS:-mamba-scan ssd attention}; do
    # Attention's cluster decode (NC > 0) is refused under CUDA graphs in milliseconds: pinned off, so the
    # tuner's draws are candidates that run.
    pins=(); [ "$task" = attention ] && pins=(--pin NC=0)
    timeout "$(upto $((${COST_LIMIT:-420} + 60)))" python3 bench/eval_cost.py "$task" --target mlx-cuda --seed expert \
      --budget "${COST_BUDGET:-4}" --limit "${COST_LIMIT:-420}" --checks 1 --python python3 --bin "$bin" \
      "${pins[@]}" --out "$out/eval-cost-$task.json" >> "$log" 2>&1
    grep -h "precompile\|compile inside the worker" "$out/eval-cost-$task.log" >> "$log"
    summary=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d.get(k) for k in ("later_candidates", "later_passed", "per_candidate_median", "per_candidate_max_wall_s")}))' \
      "$out/eval-cost-$task.json" 2>/dev/null || echo "no result file")
    echo "== cost $task: $summary" >> "$log"
  done
fi
if has adversarial; then
  KSEARCH_BIN=$bin OUT=$out timeout "$(upto "${ADV_LIMIT:-540}")" bash bench/adversarial_mlx.sh >> "$log" 2>&1
fi
if has devices; then
  for n in ${DEVICES_COUNTS:-2 1}; do
    smi="$out/devices-$n-smi.csv"
    ( while true; do nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader >> "$smi" 2>/dev/null
        sleep 1; done ) &
    sampler=$!
    record "devices/$n" "${DEVICES_LIMIT:-200}" run tasks/softmax --target mlx-cuda --strategy tune --budget 6 \
      --parallel 2 --devices "$n" --checks 1
    kill "$sampler" 2>/dev/null
    echo "== devices/$n: GPUs used by compute processes: $(cut -d, -f2 "$smi" | sort -u | tr '\n' ' ')" >> "$log"
  done
  nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader > "$out/devices-gpus.csv"
fi
if has export; then
  for task in ${EXPORT_TASKS:-mamba-scan}; do
    seed="tasks/$task/seeds/mlx-cuda/expert"
    exp=$(mktemp -d)
    if "$bin" export "$seed" --task "tasks/$task" --out "$exp" >> "$log" 2>&1; then
      f=$(ls "$exp" | grep -v _test.py | head -1)
      line=$(cd "$exp" && timeout "$(upto 300)" python3 "${f%.py}_test.py" 2>&1 | tail -n 1)
    else
      line="export failed"
    fi
    echo "== $task/export: $line" >> "$log"
    python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[1], "command": sys.argv[2], "result": {"test": sys.argv[3]}}))' \
      "$task/export" "ksearch export $seed --task tasks/$task --format mlx-python; python3 <module>_test.py" "$line" >> "$results"
  done
fi
python3 - "$results" "$out/h200.json" <<'PY'
import json, platform, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
try:
    import mlx.core as mx
    versions = {"mlx": mx.__version__}
except Exception as e:
    versions = {"error": str(e)}
json.dump({"machine": {"gpu": smi, "system": platform.platform()}, "versions": versions, "runs": rows},
          open(sys.argv[2], "w"), indent=1)
for r in rows:
    res = r["result"]
    cands = res.get("candidates") or [res]
    for c in cands:
        ws = c.get("workloads") or []
        print(r["name"], c.get("name"), "|", ", ".join(
            f"{w['workload']}: {w['status']} {w.get('median_s')} (indep {w.get('independent_s')}, alone {w.get('alone_s')}) "
            f"base {w.get('baselines')}" for w in ws)[:700])
PY
tail -n 5 "$log"
