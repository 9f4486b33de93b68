"""ksearch evaluation worker: runs candidate kernels for the Rust side over JSON lines (docs/formats.md §3)."""

from __future__ import annotations

import os

WORKER_VERSION = "0.1.0"

# Baselines must be single-threaded like the C kernels. BLAS reads these once, when numpy is first
# imported, so they are set here, before any submodule imports numpy. A caller's explicit choice wins.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
