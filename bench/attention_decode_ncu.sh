#!/usr/bin/env bash
# The attention decode's own GPU time per configuration, on the device machine (MLX staged as for
# bench/h200.sh; Nsight Compute's ncu): the expert seed exported (`ksearch export`), every combination of
# SETS run a few times under `ncu --metrics gpu__time_duration.sum`, MLX's SDPA beside it. Kernel time
# without MLX's per-call cost: which configurations are worth timing with `ksearch eval`
# (bench/attention_decode.sh, CONFIGS=$OUT/attention-decode-configs.txt).
# Results: $OUT/attention-decode-ncu.json, $OUT/attention-decode-configs.txt (the TOP fastest), a log.
# Knobs: SHAPE (default decode_gqa_8k), SETS (default below), TOP (default 4).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_bin.sh  # PYTHONPATH, out, bin
log="$out/attention-decode-ncu.log"
exp=$(mktemp -d)
"$bin" export tasks/attention/seeds/mlx-cuda/expert --task tasks/attention --out "$exp" --python python3 >> "$log" 2>&1 \
  || { echo "export failed (see $log)"; exit 1; }
# shellcheck disable=SC2206  # SETS is "--set A=1,2 --set B=3"
sets=(${SETS:---set NTD=64,128,256 --set CH=128,256,512 --set UC=1,2})
csv="$exp/ncu.csv"
PYTHONPATH=$PYTHONPATH:$exp ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
  --log-file "$csv" python3 bench/attention_decode_profile.py --ncu --shape "${SHAPE:-decode_gqa_8k}" "${sets[@]}" \
  > "$exp/run.json" 2>> "$log" || { echo "ncu run failed (see $log)"; tail -5 "$log"; exit 1; }
python3 bench/attention_decode_ncu.py "$csv" "$exp/run.json" "$out/attention-decode-ncu.json" "${TOP:-4}" \
  > "$out/attention-decode-configs.txt"
python3 - "$out/attention-decode-ncu.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("sdpa kernels per call:", r["sdpa_kernels_us_per_call"], "us")
for c in r["configurations"][:12]:
    print({k: c[k] for k in c if k.isupper()}, "split", c["split_us"], "combine", c["combine_us"], "total", c["total_us"],
          "diff", c["max_abs_diff_vs_sdpa"])
PY
