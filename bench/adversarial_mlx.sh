#!/usr/bin/env bash
# The GPU adversarial suite (tests/adversarial/mlx-cuda/*, or with SUITE=cuda tests/adversarial/cuda/*), on the device machine: every candidate
# through `ksearch eval` with MLX's CUDA build, its result compared with its expect.toml the way
# tests/adversarial.rs does for the CPU suite (statuses and reasons; `refused` plans; `twin`: a timing cheat
# timed no faster than its honest twin, fastest samples; `run_budget`: a tune search whose later attempts
# must fail). MLX staged as for bench/h200.sh; the binary in .device/bin/. Results:
# $OUT/adversarial-$SUITE.json (command, machine, versions, every verdict).
# ADV_ONLY="name name ..." runs only those candidates (the whole suite with MLX's install took more than one
# 600 s device call on 2026-12-02: run it in two calls, each naming half). SUITE=cuda runs the cuda target's
# twin of the suite (tests/adversarial/cuda: the same cheats as whole __global__ functions; CuPy, no MLX).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_bin.sh  # PYTHONPATH, out, bin
suite=${SUITE:-mlx-cuda}  # the suite's folder under tests/adversarial/, named after its target
store=$(mktemp -d)
rows="$out/adversarial.jsonl"
: > "$rows"
picked() { [ -z "${ADV_ONLY:-}" ] || [[ " $ADV_ONLY " == *" $(basename "$1") "* ]]; }
canary=/tmp/ksearch-adversarial-canary.txt
echo "KSEARCH-CANARY-5f1d0c" > "$canary" && chmod 600 "$canary"
# The deadline covers an honest kernel's whole workload (checks, the chain's timing, the sampled checks):
# the control took 5.0 s on softmax 1x50000 at 4.5 ms a call, so 5 s timed honest kernels out.
flags=(--target "$suite" --timeout 20 --checks 2 --timing-budget 0.5)
# `eval` stops a candidate at its first failing workload, as a search does (and tests/adversarial.rs).
eval_flags=("${flags[@]}" --fail-fast)
# Candidates evaluated as they are (neither refused plans nor tune runs) go through one `ksearch eval` per task,
# as the candidates of one search meet one run: its own work (references, baselines) is done once, and a
# candidate that remembers something across candidates meets the others.
grouped="$out/grouped"
mkdir -p "$grouped"
for task in $(sed -n 's/^task = "\(.*\)"/\1/p' tests/adversarial/$suite/*/expect.toml | sort -u); do
  dirs=()
  for dir in tests/adversarial/$suite/*/; do
    picked "$dir" || continue
    grep -q "^task = \"$task\"" "$dir/expect.toml" || continue
    grep -qE '^(run_budget|status = "refused")' "$dir/expect.toml" && continue
    dirs+=("$dir")
  done
  [ ${#dirs[@]} -gt 0 ] || continue
  started=$(date +%s)
  # -v: the log shows each candidate's progress, so a call cut short says how far it got.
  "$bin" -v --python python3 --store "$store" eval "tasks/$task" "${dirs[@]}" "${eval_flags[@]}" --json \
    2>>"$out/adversarial.log" | tail -n 1 > "$out/group-$task.json"
  python3 - "$out/group-$task.json" "$grouped" "$(( $(date +%s) - started ))" "${dirs[@]}" <<'PY'
import json, os, sys
path, folder, wall, dirs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
try:
    reports = json.load(open(path))["candidates"]
except Exception:
    sys.exit()
for d, r in zip(dirs, reports):
    r["group_wall_s"] = int(wall)
    json.dump(r, open(os.path.join(folder, os.path.basename(d.rstrip("/")) + ".json"), "w"))
PY
done
for dir in tests/adversarial/$suite/*/; do
  picked "$dir" || continue
  name=$(basename "$dir")
  task=$(sed -n 's/^task = "\(.*\)"/\1/p' "$dir/expect.toml")
  started=$(date +%s)
  budget=$(sed -n 's/^run_budget = \([0-9]*\)/\1/p' "$dir/expect.toml")
  twin=$(sed -n 's/^twin = "\(.*\)"/\1/p' "$dir/expect.toml")
  if [ -n "$budget" ]; then
    args=(run "tasks/$task" --candidate "$dir" --strategy tune --budget "$budget" "${flags[@]}" --json)
    run_line=$("$bin" --python python3 --store "$store" "${args[@]}" 2>>"$out/adversarial.log" | tail -n 1)
    run_id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("run_id",""))' "$run_line" 2>/dev/null)
    line=$("$bin" --store "$store" show "$run_id" --json 2>>"$out/adversarial.log" | tail -n 1)
    rc=0
  elif [ -f "$grouped/$name.json" ]; then
    args=(eval "tasks/$task" "<every candidate of the task>" "${eval_flags[@]}" --json)
    line=$(cat "$grouped/$name.json")
    rc=0
    : > "$out/last.err"
  else
    args=(eval "tasks/$task" "$dir" "${eval_flags[@]}" --json)
    line=$("$bin" --python python3 --store "$store" "${args[@]}" 2>"$out/last.err" | tail -n 1)
    rc=${PIPESTATUS[0]}
    cat "$out/last.err" >> "$out/adversarial.log"
  fi
  wall=$(( $(date +%s) - started ))
  twin_line=""
  if [ -n "$twin" ] && [ -f "$grouped/$twin.json" ]; then
    twin_line=$(cat "$grouped/$twin.json")
  elif [ -n "$twin" ]; then
    twin_line=$("$bin" --python python3 --store "$store" eval "tasks/$task" "tests/adversarial/$suite/$twin" \
      "${flags[@]}" --json 2>>"$out/adversarial.log" | tail -n 1)
  fi
  python3 - "$name" "$dir" "ksearch ${args[*]}" "$line" "$rc" "$out/last.err" "$twin_line" "$wall" >> "$rows" <<'PY'
import json, math, sys, tomllib
name, folder, cmd, line, rc, err_path, twin_line, wall = sys.argv[1:]
expect = tomllib.load(open(folder + "/expect.toml", "rb"))
want = expect["status"]
reason = expect.get("reason", "")
try:
    err = open(err_path).read()
except OSError:
    err = ""
row = {"name": name, "command": cmd, "expect": expect}
if not cmd.startswith("ksearch eval tasks/") or "<every candidate" not in cmd:
    row["wall_s"] = int(wall)  # a grouped candidate's cost is its group's (`group_wall_s` in the result)
if want == "refused":
    ok = rc != "0" and reason in err
    print(json.dumps({**row, "ok": ok, "status": "refused" if rc != "0" else "accepted", "message": err[-400:]}))
    sys.exit()
try:
    result = json.loads(line)
except Exception:
    print(json.dumps({**row, "ok": False, "why": "no JSON result", "stdout_tail": line[-500:]}))
    sys.exit()
if "run_budget" in expect:
    attempts = [a for a in result.get("attempts", []) if a.get("phase") == "search"]
    passed = [bool((a.get("summary") or {}).get("passed")) for a in attempts]
    later = [(a.get("summary") or {}).get("first_failure") or "" for a in attempts[1:]]
    ok = len(attempts) >= 2 and passed[0] and not any(passed[1:]) and all(reason in f for f in later)
    print(json.dumps({**row, "ok": ok, "status": f"{len(attempts)} attempts, passed {passed}",
                      "message": (later[0] if later else "")[:400]}))
    sys.exit()
ws = result["workloads"]
if want == "passed":
    bad = [w for w in ws if w["status"] != "passed"]
    ok, where = not bad, (bad[0] if bad else ws[0])
    if bad and expect.get("may_be_rejected"):
        # A timing cheat the checks caught outright (its reuse showed as a wrong output): rejected, as good
        # as timed no faster than its twin.
        ok = all(w["status"] in ("passed", "wrong") for w in ws)
        expect = {**expect, "twin": ""} if ok else expect
else:
    named = [w for w in ws if w["workload"] == expect.get("workload")]
    failed = [w for w in ws if w["status"] != "passed"]
    where = (named or failed or ws)[0]
    ok = where["status"] != "passed" if want == "any_failure" else where["status"] == want
    ok = ok and reason in (where.get("message") or "")
extra = {}
if expect.get("twin"):
    def fastest(r):
        xs = [w.get("min_s") for w in r.get("workloads", []) if w.get("min_s")]
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None
    try:
        mine, theirs = fastest(result), fastest(json.loads(twin_line))
    except Exception:
        mine = theirs = None
    extra["vs_twin"] = theirs / mine if mine and theirs else None
    ok = ok and mine is not None and theirs is not None and mine * 1.3 >= theirs
print(json.dumps({**row, "ok": ok, "workload": where["workload"], "status": where["status"],
                  "message": (where.get("message") or "")[:400],
                  "statuses": {w["workload"]: w["status"] for w in ws}, **extra}))
PY
  echo "== $name: $(tail -n 1 "$rows" | head -c 300)" >> "$out/adversarial.log"
done
rm -f "$canary"
python3 - "$rows" "$out/adversarial-$suite.json" "$suite" <<'PY'
import json, platform, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
suite = sys.argv[3]
versions = {}
try:
    import mlx.core as mx
    versions["mlx"] = mx.__version__
except ImportError:
    pass
try:
    import cupy
    versions["cupy"] = cupy.__version__
except ImportError:
    pass
summary = {"candidates": len(rows), "as_expected": sum(r["ok"] for r in rows),
           "cheats_rejected": sum(r["ok"] for r in rows if r["expect"]["status"] != "passed"),
           "cheats": sum(r["expect"]["status"] != "passed" for r in rows)}
json.dump({"suite": f"tests/adversarial/{suite}", "script": f"SUITE={suite} bash bench/adversarial_mlx.sh",
           "machine": {"gpu": smi, "system": platform.platform()}, "versions": versions,
           "summary": summary, "results": rows}, open(sys.argv[2], "w"), indent=1)
print(json.dumps(summary))
for r in rows:
    print(("ok  " if r["ok"] else "MISS"), r["name"], r.get("status"), "|", (r.get("message") or r.get("why", ""))[:160])
PY
