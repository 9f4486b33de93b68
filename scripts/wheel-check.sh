#!/usr/bin/env bash
# `pip install ksearch` checked end to end: builds the wheel with maturin's binary mode (pyproject.toml),
# installs it into a fresh virtual environment, and from a folder outside the repository runs `ksearch
# tasks` and a short search (`run matmul --budget 2`, the tuner: no LLM), which must complete.
#
#   scripts/wheel-check.sh [--release]       # prints the wheel's path last; exit 0 only if everything held
#   scripts/wheel-check.sh --build-only DIR  # builds the wheel into DIR (shared target folder), prints its path
#   KSEARCH_WHEEL=FILE scripts/wheel-check.sh  # installs and runs that wheel instead of building one
#
# maturin lives in $KSEARCH_HOME/tools (default ~/.cache/ksearch/tools), pinned, installed from PyPI once.
# Without --release the wheel holds a dev build: a check of the packaging, not a wheel to publish.
# Where the wheel is built matters: maturin's cargo call builds without the dev-dependencies' features, so in
# the target folder `cargo test` uses it relinks target/debug/ksearch, and while tests run that binary a
# clean-clone CI run saw "No such file or directory" in four tests. So scripts/test builds it there with
# `--build-only` before the tests start (a relink of the one binary, no second build of every crate), and a
# check run without a wheel given builds in a target folder of its own (target/wheel-check; minutes on two
# cores the first time, later ones reuse it).
set -euo pipefail
MATURIN_VERSION="1.16.0"
repo=$(cd "$(dirname "$0")/.." && pwd)
tools="${KSEARCH_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/ksearch}/tools/maturin-$MATURIN_VERSION"
if [ ! -x "$tools/bin/maturin" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet "maturin==$MATURIN_VERSION"
fi
build() {  # build TARGET_FOLDER OUT [maturin options]: the wheel's path
  local target=$1 out=$2
  shift 2
  (cd "$repo" && CARGO_TARGET_DIR="$target" "$tools/bin/maturin" build --quiet --out "$out" "$@") >&2
  ls "$out"/ksearch-*.whl
}
if [ "${1:-}" = "--build-only" ]; then
  build "${CARGO_TARGET_DIR:-$repo/target}" "${2:?--build-only needs the folder to write the wheel into}"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheel=${KSEARCH_WHEEL:-$(build "$repo/target/wheel-check" "$work/wheels" "$@")}
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "$wheel"
mkdir "$work/outside"
cd "$work/outside"
"$work/venv/bin/ksearch" tasks --json > tasks.json
python3 -c 'import json,sys; t=json.load(open("tasks.json")); assert any(x["name"]=="matmul" for x in t), t' 
"$work/venv/bin/ksearch" --store ./store run matmul --budget 2 --json > run.json 2> run.log ||
  { tail -n 20 run.log >&2; exit 1; }
python3 -c 'import json; r=json.loads(open("run.json").read().strip().splitlines()[-1]); assert r["status"]=="completed", r; print("run", r["run_id"], r["status"], r["evaluations"], "evaluations")'
echo "installed from $(basename "$wheel"): ksearch tasks and a search ran outside the repository"
