#!/usr/bin/env bash
# Per-test times of the integration suite (`testsuite`), as the README's test command runs it (a real
# llama-server, the check corpus and headless Chromium), from libtest's JSON report, summed by area; writes the record to
# bench/results/test-times-<YYYYMMDD>.json. libtest's timing report is unstable-only, so RUSTC_BOOTSTRAP=1 is
# set for the test binary's run alone (set for cargo, it would rebuild every crate).
#   bash bench/test_time.sh [libtest filters...]
set -euo pipefail
cd "$(dirname "$0")/.."
# The packaging test's wheel, built first as scripts/test builds it.
wheels=$(mktemp -d)
wheel=$(bash scripts/wheel-check.sh --build-only "$wheels")
bin=$(cargo test --test testsuite --no-run --message-format json 2>/dev/null |
  python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "testsuite" and m.get("executable")][-1])')
url=$(bash scripts/llama-server.sh start)
trap 'bash scripts/llama-server.sh stop "$url"; rm -rf "$wheels"' EXIT
corpus=$(bash scripts/corpus.sh)
chromedriver=$(bash scripts/chromium.sh) || chromedriver=""
report=$(mktemp)
# As many tests at once as scripts/test runs (four on fewer cores).
threads=$(nproc)
[ "$threads" -ge 4 ] || threads=4
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-$threads}"
start=$(date +%s)
set +e
RUSTC_BOOTSTRAP=1 KSEARCH_LLAMA_URL="$url" KSEARCH_CORPUS="$corpus" KSEARCH_CHROMEDRIVER="$chromedriver" KSEARCH_WHEEL="$wheel" "$bin" "$@" -Z unstable-options --report-time --format json > "$report"
rc=$?
set -e
wall=$(( $(date +%s) - start ))
python3 - "$report" "$wall" "$rc" "$*" <<'PY'
import collections, datetime, json, os, platform, sys

report, wall, rc, filters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tests = []
for line in open(report):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if d.get("type") == "test" and "exec_time" in d:
        tests.append({"test": d["name"], "seconds": round(d["exec_time"], 2), "result": d["event"]})
tests.sort(key=lambda t: -t["seconds"])
areas = collections.Counter()
for t in tests:
    areas[t["test"].split("::")[0]] += t["seconds"]
record = {
    "command": "bash bench/test_time.sh" + (f" {filters}" if filters else ""),
    "what": "the integration suite's tests, each timed by libtest while the suite runs as scripts/test runs it (RUST_TEST_THREADS at once)",
    "test_threads": int(os.environ.get("RUST_TEST_THREADS", "0")) or None,
    "machine": {"system": platform.platform(), "cores": os.cpu_count()},
    "date": datetime.date.today().isoformat(),
    "commit": os.popen("git rev-parse --short HEAD").read().strip(),
    "wall_s": wall,
    "exit": rc,
    "tests_summed_s": round(sum(t["seconds"] for t in tests), 1),
    "areas_s": {a: round(s, 1) for a, s in areas.most_common()},
    "tests": tests,
}
# Named by date and commit: a second run of the day does not overwrite the first.
out = f"bench/results/test-times-{record['date'].replace('-', '')}-{record['commit']}.json"
with open(out, "w") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
print(f"{out}: {len(tests)} tests, {wall} s wall, {record['tests_summed_s']} s summed, exit {rc}")
PY
exit $rc
