#!/usr/bin/env bash
# `pip install ksearch` checked end to end: builds the wheel with maturin's binary mode (pyproject.toml),
# installs it into a fresh virtual environment, and from a folder outside the repository runs `ksearch
# tasks` and a short search (`run matmul --budget 2`, the tuner: no LLM), which must complete.
#
#   scripts/wheel-check.sh [--release]   # prints the wheel's path last; exit 0 only if everything held
#
# maturin lives in $KSEARCH_HOME/tools (default ~/.cache/ksearch/tools), pinned, installed from PyPI once.
# Without --release the wheel holds a dev build: a check of the packaging, not a wheel to publish. It is built
# in a target folder of its own (target/wheel-check): maturin's cargo call differs from `cargo test`'s, and in
# the shared folder it relinked target/debug/ksearch while other tests were starting it (a clean-clone CI run
# saw "No such file or directory" in four tests). The first build there compiles everything once (minutes on
# two cores); later ones reuse it.
set -euo pipefail
MATURIN_VERSION="1.16.0"
repo=$(cd "$(dirname "$0")/.." && pwd)
tools="${KSEARCH_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/ksearch}/tools/maturin-$MATURIN_VERSION"
if [ ! -x "$tools/bin/maturin" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet "maturin==$MATURIN_VERSION"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$repo" && CARGO_TARGET_DIR="$repo/target/wheel-check" "$tools/bin/maturin" build --quiet --out "$work/wheels" "$@") >&2
wheel=$(ls "$work"/wheels/ksearch-*.whl)
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
