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
sections=${SECTIONS:-seeds score tune adversarial carry}
tasks=${TASKS:-gqa-paged-decode mla-paged-decode mla-paged-prefill trimul}
store=$(mktemp -d)
log="$out/h200-cuda.log"
results="$out/h200-cuda.jsonl"
source bench/device_steps.sh  # call_end, upto, record
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
