#!/usr/bin/env bash
# How `ksearch translate` scales with the size of a file: N small kernels (default 35,000) in one .cu file,
# translated to both MLX targets; wall time and peak memory of each, recorded as JSON with the machine and
# the command (bench/results/translate-scale-DATE.json). Run from the repository root after `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-35000}
bin=${KSEARCH_BIN:-target/release/ksearch}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$n" "$work/many.cu" <<'PY'
import sys
n, path = int(sys.argv[1]), sys.argv[2]
with open(path, "w") as f:
    for i in range(n):
        f.write(f"__global__ void k{i}(float* y, const float* x, int n) {{ int i = blockIdx.x * blockDim.x + "
                f"threadIdx.x; if (i < n) y[i] = x[i] * {i}.0f; }}\n")
PY
rows=()
for to in mlx-cuda mlx-metal; do
  /usr/bin/time -f "%e %M" -o "$work/time" "$bin" translate "$work/many.cu" --to "$to" --out "$work/out-$to" \
    > "$work/log-$to" 2>&1 || true
  read -r secs kb < <(tail -n 1 "$work/time")  # a failed command adds a line before the format
  rows+=("{\"target\": \"$to\", \"wall_s\": $secs, \"peak_rss_mb\": $(( kb / 1024 )), \"last_line\": $(tail -n 1 "$work/log-$to" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()[:300]))')}")
done
out="bench/results/translate-scale-$(date -u +%Y%m%d).json"
python3 - "$out" "$n" "$(stat -c %s "$work/many.cu")" "${rows[@]}" <<'PY'
import json, os, platform, sys
out, n, size, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [json.loads(r) for r in sys.argv[4:]]
json.dump({"command": f"bash bench/translate_scale.sh {n}", "kernels": n, "file_bytes": size,
           "machine": {"system": platform.platform(), "cores": os.cpu_count()}, "results": rows},
          open(out, "w"), indent=1)
print(json.dumps(rows, indent=1))
PY
