#!/usr/bin/env bash
# Stages FlashInfer for the device machine (which has no network) in .device/flashinfer (git-ignored), for
# bench/h200_cuda.sh to install with `pip --no-index --no-deps`. The current wheels do not travel: flashinfer-python
# 0.7.4 is about 100 MB, its cubins several hundred, and it needs cutlass-dsl, cudnn-frontend, cuda-python and
# more, while a call carries at most 64 MiB. The default here is the last release whose kernels are compiled on
# the device at first use (JIT: torch's extension builder, ninja and the machine's nvcc): its source (3.6 MB) and
# ninja. Without it the cuda target's FlashInfer baselines are reported as not timed, with why, and the PyTorch
# baselines stand in. FLASHINFER_VERSION picks another release.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device/flashinfer
python3 -m pip download --no-deps --no-binary flashinfer-python --dest .device/flashinfer \
  "flashinfer-python==${FLASHINFER_VERSION:-0.2.14}"
python3 -m pip download --no-deps --only-binary :all: --dest .device/flashinfer ninja
ls -la .device/flashinfer
