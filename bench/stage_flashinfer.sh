#!/usr/bin/env bash
# Stages FlashInfer's wheels from PyPI for the device machine (which has no network) in .device/flashinfer
# (git-ignored), for bench/h200_cuda.sh to install with `pip --no-index`. They are large (flashinfer-python
# about 100 MB, its cubins several hundred): a call carries at most 64 MiB, so they travel in parts over
# several calls (`split`, then `cat` there), or not at all; without them the cuda target's FlashInfer
# baselines are reported as not timed, with why, and the PyTorch baselines stand in.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device/flashinfer
python3 -m pip download --no-deps --dest .device/flashinfer "flashinfer-python${FLASHINFER_VERSION:+==$FLASHINFER_VERSION}"
ls -la .device/flashinfer
