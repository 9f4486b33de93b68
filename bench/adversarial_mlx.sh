#!/usr/bin/env bash
# The mlx-cuda adversarial suite (tests/adversarial/mlx-cuda/*), on the device machine: every candidate
# through `ksearch eval` with MLX's CUDA build, its result compared with its expect.toml the way
# tests/adversarial.rs does for the CPU suite. MLX staged as for bench/h200.sh; the binary in
# .device/bin/. Results: $OUT/adversarial-mlx-cuda.json (command, machine, versions, every verdict).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_bin.sh  # PYTHONPATH, out, bin
store=$(mktemp -d)
rows="$out/adversarial.jsonl"
: > "$rows"
for dir in tests/adversarial/mlx-cuda/*/; do
  name=$(basename "$dir")
  task=$(sed -n 's/^task = "\(.*\)"/\1/p' "$dir/expect.toml")
  args=(eval "tasks/$task" "$dir" --target mlx-cuda --timeout 5 --checks 2 --timing-budget 0.5 --json)
  line=$("$bin" --python python3 --store "$store" "${args[@]}" 2>>"$out/adversarial.log" | tail -n 1)
  python3 - "$name" "$dir" "ksearch ${args[*]}" "$line" >> "$rows" <<'PY'
import json, sys, tomllib
name, folder, cmd, line = sys.argv[1:]
expect = tomllib.load(open(folder + "/expect.toml", "rb"))
try:
    result = json.loads(line)
    ws = result["workloads"]
except Exception:
    print(json.dumps({"name": name, "command": cmd, "expect": expect, "ok": False, "why": "no JSON result",
                      "stdout_tail": line[-500:]}))
    sys.exit()
want = expect["status"]
if want == "passed":
    bad = [w for w in ws if w["status"] != "passed"]
    ok, where = not bad, (bad[0] if bad else ws[0])
else:
    named = [w for w in ws if w["workload"] == expect.get("workload")]
    failed = [w for w in ws if w["status"] != "passed"]
    where = (named or failed or ws)[0]
    ok = where["status"] != "passed" if want == "any_failure" else where["status"] == want
    ok = ok and expect.get("reason", "") in (where.get("message") or "")
print(json.dumps({"name": name, "command": cmd, "expect": expect, "ok": ok, "workload": where["workload"],
                  "status": where["status"], "message": (where.get("message") or "")[:400],
                  "statuses": {w["workload"]: w["status"] for w in ws}}))
PY
  echo "== $name: $(tail -n 1 "$rows" | head -c 300)" >> "$out/adversarial.log"
done
python3 - "$rows" "$out/adversarial-mlx-cuda.json" <<'PY'
import json, platform, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
import mlx.core as mx
summary = {"candidates": len(rows), "as_expected": sum(r["ok"] for r in rows),
           "cheats_rejected": sum(r["ok"] for r in rows if r["expect"]["status"] != "passed"),
           "cheats": sum(r["expect"]["status"] != "passed" for r in rows)}
json.dump({"suite": "tests/adversarial/mlx-cuda", "script": "bash bench/adversarial_mlx.sh",
           "machine": {"gpu": smi, "system": platform.platform()}, "versions": {"mlx": mx.__version__},
           "summary": summary, "results": rows}, open(sys.argv[2], "w"), indent=1)
print(json.dumps(summary))
for r in rows:
    print(("ok  " if r["ok"] else "MISS"), r["name"], r.get("status"), "|", (r.get("message") or r.get("why", ""))[:160])
PY
