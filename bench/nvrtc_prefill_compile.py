"""How long NVRTC takes to compile attention's prefill (the expert mlx-cuda seed's attn.cuh) for one dtype,
and what the module uses (registers, stack), with optional extra NVRTC options. No GPU needed.

Needs libnvrtc (pip: nvidia-cuda-nvrtc, as python/requirements-test.txt installs) and CUDA's runtime headers
for cuda_fp16.h / cuda_bf16.h (pip: nvidia-cuda-runtime, given with --include).

Usage: python3 bench/nvrtc_prefill_compile.py --include DIR [--dtype float|__half|__nv_bfloat16]
       [--seed tasks/attention/seeds/mlx-cuda/expert] [--arch 90] [--nvrtc LIBNVRTC] [-- EXTRA NVRTC OPTIONS...]
Prints one JSON object: seconds, cubin bytes, and ptxas's report of registers and stack frame.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
import time


# The kernel the source defines, instantiated with the seed's default tunables.
KERNEL = "k<128, 4, 2, 64>"


def prefill_source(dtype: str) -> str:
    """The launch of tasks/attention's prefill_causal_f32 workload shape, on the seed's attn.cuh."""
    return f"""#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "attn.cuh"
template <int D, int NW, int WM, int BK>
__global__ void k(const {dtype}* q, const {dtype}* kk, const {dtype}* v, {dtype}* o) {{
  extern __shared__ __align__(128) unsigned char ks_smem[];
  ksattn::prefill<D, NW, WM, BK>(q, kk, v, o, 16, 4, 1024, 1024, 1, ks_smem);
}}
"""


def nvrtc_path() -> str:
    """The pip package's libnvrtc (nvidia-cuda-nvrtc)."""
    try:
        import nvidia  # the pip package's namespace
    except ImportError:
        sys.exit("libnvrtc not found: pip install nvidia-cuda-nvrtc, or give --nvrtc PATH")
    for root in nvidia.__path__:
        found = sorted(glob.glob(os.path.join(root, "cu*", "lib", "libnvrtc.so.*")))
        found = [f for f in found if "builtins" not in f]
        if found:
            return found[0]
    sys.exit("libnvrtc not found: pip install nvidia-cuda-nvrtc, or give --nvrtc PATH")


def nvrtc_library() -> ctypes.CDLL:
    return ctypes.CDLL(nvrtc_path())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--include", required=True, help="folder holding cuda_fp16.h and cuda_bf16.h")
    ap.add_argument("--dtype", default="float")
    ap.add_argument("--seed", default="tasks/attention/seeds/mlx-cuda/expert")
    ap.add_argument("--arch", default="90")
    ap.add_argument("--nvrtc", help="libnvrtc to load (default: the pip package's)")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    lib = ctypes.CDLL(args.nvrtc) if args.nvrtc else nvrtc_library()
    header = open(os.path.join(args.seed, "attn.cuh")).read()
    source = prefill_source(args.dtype)
    prog = ctypes.c_void_p()
    names = (ctypes.c_char_p * 1)(b"attn.cuh")
    texts = (ctypes.c_char_p * 1)(header.encode())
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"prefill.cu", 1, texts, names) != 0:
        sys.exit("nvrtcCreateProgram failed")
    lib.nvrtcAddNameExpression(prog, KERNEL.encode())
    options = [b"--device-as-default-execution-space", f"--gpu-architecture=sm_{args.arch}".encode(),
               f"--include-path={args.include}".encode(), b"--ptxas-options=-v", *[e.encode() for e in args.extra]]
    t0 = time.perf_counter()
    rc = lib.nvrtcCompileProgram(prog, len(options), (ctypes.c_char_p * len(options))(*options))
    seconds = time.perf_counter() - t0
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value + 1)
    lib.nvrtcGetProgramLog(prog, log)
    cubin = ctypes.c_size_t()
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(cubin))
    text = log.value.decode(errors="replace")
    print(json.dumps({"dtype": args.dtype, "extra": args.extra, "status": rc, "seconds": round(seconds, 2),
                      "cubin_bytes": cubin.value,
                      "ptxas": [" ".join(line.split()) for line in text.splitlines()
                                if "registers" in line or "stack frame" in line],
                      "log": text[-1500:] if rc else ""}))


if __name__ == "__main__":
    main()
