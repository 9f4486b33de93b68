#!/usr/bin/env bash
# The cuda target on the H200, in one call on the device machine: the ksearch binary as bench/device_bin.sh
# finds it; CuPy, PyTorch and nvcc are the machine's own; FlashInfer is installed by the calls that
# bench/stage_flashinfer.sh prints, made just before this one on the same machine (without it its baselines are
# reported as not timed, with why, and the PyTorch baselines stand in). Sections (SECTIONS picks some; each
# step time-boxed):
#   seeds   `ksearch eval --target cuda` of every cuda seed of every task (TASKS picks some) on every workload,
#           held-out ones included, with the task's baselines
#   score   K-Search's score of each seed (bench/cuda_score.py): mean over the feedback workloads of baseline
#           time / seed time, FlashInfer's where it ran, beside K-Search's published fractions
#   tune    a tune search of gqa-paged-decode from its cuda expert (TUNE_BUDGET candidates)
#   adversarial  the cuda twin of the adversarial suite (SUITE=cuda bench/adversarial_mlx.sh; ADV_ONLY applies)
#   carry   the cuda expert of gqa-paged-decode translated to mlx-cuda (`ksearch translate FOLDER`), evaluated
#           there and searched from (a tune search): a kernel found on NVIDIA carried to MLX (MLX staged as for
#           bench/h200.sh)
# Results land in $OUT: h200-cuda.jsonl (every command and its JSON result), h200-cuda-scores.json, the log.
# One call is 10 minutes at most: CALL_S (560) bounds the whole script; what does not fit is recorded as skipped,
# for another call (e.g. SECTIONS="seeds score" TASKS="gqa-paged-decode mla-paged-decode", then the rest).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_bin.sh  # PYTHONPATH, out, bin
# The call's own deadline (a device call ends at 600 s): each step gets what is left of CALL_S less a margin for
# the score and the copy back, and a step that would start with under 20 s left is recorded as skipped.
call_end=$(( $(date +%s) + ${CALL_S:-560} ))
upto() {  # upto SECONDS: SECONDS, or what is left of the call less a margin when that is less (at least 1)
  local left=$(( call_end - $(date +%s) - 15 ))
  (( left < 1 )) && left=1
  (( $1 < left )) && echo "$1" || echo "$left"
}
sections=${SECTIONS:-seeds score tune adversarial carry}
tasks=${TASKS:-gqa-paged-decode mla-paged-decode mla-paged-prefill trimul}
store=$(mktemp -d)
log="$out/h200-cuda.log"
results="$out/h200-cuda.jsonl"
: > "$results"
export PYTHONPATH="$PYTHONPATH:$PWD/python"
has() { [[ " $sections " == *" $1 "* ]]; }
# FlashInfer (bench/stage_flashinfer.sh): installed by the staging calls before this one; else by this call when it
# carries the last staged folder (its install.sh, which also JIT-compiles and checks the baselines' kernels).
if ! python3 -c "import flashinfer" > /dev/null 2>&1; then
  for f in .device/flashinfer-*/install.sh; do
    [ -f "$f" ] && { timeout "$(upto 400)" bash "$f" >> "$log" 2>&1 || echo "== flashinfer did not install or check ($f)" >> "$log"; }
  done
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -n 1
} >> "$log" 2>&1
record() {  # record NAME LIMIT_S CMD...: runs ksearch (time-boxed), appends {name, command, wall_s, result}
  local name=$1 limit=$2; shift 2
  local t0 t1 line left
  left=$(( call_end - $(date +%s) - 15 ))
  if (( left < 20 )); then
    python3 -c 'import json, sys; print(json.dumps({"name": sys.argv[1], "command": "ksearch " + sys.argv[2] + " --json", "skipped": "the call deadline (CALL_S) was near"}))' \
      "$name" "$*" >> "$results"
    echo "== $name: skipped, the call deadline is near (run it in another call: SECTIONS, TASKS)" >> "$log"
    return
  fi
  (( limit > left )) && limit=$left
  t0=$(date +%s.%N)
  line=$(timeout "$limit" "$bin" --python python3 --store "$store" "$@" --json 2>>"$log" | tail -n 1)
  t1=$(date +%s.%N)
  python3 - "$name" "$*" "$line" "$t0" "$t1" >> "$results" <<'PY'
import json, sys
name, cmd, line, t0, t1 = sys.argv[1:]
try:
    result = json.loads(line)
except Exception:
    result = {"error": "no JSON result (failed or timed out)", "stdout_tail": line[-2000:]}
print(json.dumps({"name": name, "command": "ksearch " + cmd + " --json", "wall_s": round(float(t1) - float(t0), 2),
                  "result": result}))
PY
  echo "== $name ($(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s): $(tail -c 300 <<< "$line")" >> "$log"
}
if has seeds; then
  for task in $tasks; do
    for seed in tasks/$task/seeds/cuda/*/; do
      record "seeds $task $(basename "$seed")" "${SEED_LIMIT:-300}" eval --target cuda "$task" "$seed"
    done
  done
fi
if has score; then
  python3 bench/cuda_score.py "$results" > "$out/h200-cuda-scores.json" 2>>"$log"
  echo "== scores: $(head -c 3000 "$out/h200-cuda-scores.json")" >> "$log"
fi
if has tune; then
  record "tune gqa-paged-decode cuda" "${TUNE_LIMIT:-300}" run gqa-paged-decode --target cuda --strategy tune \
    --seed expert --budget "${TUNE_BUDGET:-8}"
fi
if has adversarial; then
  SUITE=cuda timeout "$(upto "${ADV_LIMIT:-400}")" bash bench/adversarial_mlx.sh >> "$log" 2>&1
  echo "== adversarial: $(head -c 400 "$out/adversarial-cuda.json" 2>/dev/null)" >> "$log"
fi
if has carry; then
  carried=$(mktemp -d)/expert-mlx-cuda
  "$bin" translate tasks/gqa-paged-decode/seeds/cuda/expert --to mlx-cuda --out "$carried" >> "$log" 2>&1
  echo "== carry: translated into $carried (exit $?)" >> "$log"
  record "carry eval mlx-cuda" "${SEED_LIMIT:-300}" eval --target mlx-cuda gqa-paged-decode "$carried"
  record "carry tune mlx-cuda" "${TUNE_LIMIT:-300}" run gqa-paged-decode --target mlx-cuda --strategy tune \
    --candidate "$carried" --budget "${TUNE_BUDGET:-8}"
fi
echo "== done" >> "$log"
