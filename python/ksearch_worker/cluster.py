"""Thread-block clusters through `mx.fast.cuda_kernel` (a plan launch's `cluster` field).

MLX launches a custom CUDA kernel without launch attributes, so a cluster has to be a property of the
compiled function: CUDA's `__cluster_dims__`. MLX writes the kernel's definition itself, after the header
it is given; a declaration of the same function carrying the attribute, at the end of that header, gives
the definition its cluster dims. The declaration must match the generated signature exactly (anything else
declares an overload, and the attribute is silently lost), so it follows MLX's own rules
(mlx/backend/cuda/custom_kernel.cpp: the kernel name with its template hash, then the parameters) and the
worker compares it with the source MLX generates (`generated_parameters`) before the first launch.

One hazard decides when a cluster launch may run at all (`refusal`). Measured on the H200 with MLX 0.32.4
(bench/mlx_cluster_carryover.py): once a kernel compiled with `__cluster_dims__(4, 1, 1)` had run, a plain
6-block kernel of the same process ran blocks 0-3 only, three times out of three; before it, or in one
evaluation with it, all 6 ran; with MLX_USE_CUDA_GRAPHS=0, all 6 every time. In the attention task a 6-block
prefill lost heads that way, and MLX's own float32-to-bfloat16 conversions of later inputs lost blocks too.
The mechanism, read from MLX's source rather than shown by an experiment: its CUDA back-end reuses a cached
executable graph for a later graph of the same shape by updating it in place, and its cache key names a
kernel node "K" whatever the function's compiled cluster dims (it guards runtime cluster shapes of child
graphs only), so the cluster shape stays on the node. Without graphs the decode in clusters was slower than
the two-launch decode on every decode workload (and than MLX's SDPA at the 8k and 16k shapes), so
MLX_USE_CUDA_GRAPHS=0 is a way to run it, not to win.

`ksearch export` embeds this file's code in the modules it writes: standard library only.
"""

import ctypes
import os
import sys
import tempfile
from collections.abc import Callable, Sequence

# MLX's spelling of each dtype in a CUDA signature, and in the template hash of a kernel's name.
_CUDA_TYPE = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
              "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
              "float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double"}
_HASH_TYPE = {**_CUDA_TYPE, "float16": "float16_t", "bfloat16": "bfloat16_t"}


def dtype_name(d: object) -> str:
    """`float16` for mx.float16 (whose str is `mlx.core.float16`), or a name given as such."""
    return str(d).rsplit(".", 1)[-1]


def kernel_name(name: str, template: Sequence[tuple[str, object]]) -> str:
    """The function MLX generates for kernel `name` with these template arguments (ints, bools, dtypes)."""
    parts = []
    for _, v in template:
        if isinstance(v, bool):
            parts.append("_t" if v else "_f")
        elif isinstance(v, int):
            parts.append(f"_{v}")
        else:
            parts.append("_" + _HASH_TYPE[dtype_name(v)])
    return "custom_kernel_" + name + "".join(parts)


def parameters(source: str, inputs: Sequence[tuple[str, object, int]], outputs: Sequence[tuple[str, object]]) -> list[str]:
    """The generated parameter list: each input (name, dtype, ndim) as a const pointer, followed by its shape,
    strides and ndim where the body names them (and the input has dimensions), then the outputs."""
    ps = []
    for n, d, ndim in inputs:
        ps.append(f"const {_CUDA_TYPE[dtype_name(d)]}* {n}")
        if ndim > 0:
            for suffix, kind in (("_shape", "Shape"), ("_strides", "Strides"), ("_ndim", "int")):
                if n + suffix in source:
                    ps.append(f"const __grid_constant__ {kind} {n}{suffix}")
    ps += [f"{_CUDA_TYPE[dtype_name(d)]}* {n}" for n, d in outputs]
    return ps


def declaration(name: str, source: str, inputs: Sequence[tuple[str, object, int]],
                outputs: Sequence[tuple[str, object]], template: Sequence[tuple[str, object]],
                cluster: Sequence[int]) -> str:
    """The line to append to the kernel's header: its function declared with `__cluster_dims__`."""
    x, y, z = (int(c) for c in cluster)
    params = ", ".join(parameters(source, inputs, outputs))
    return (f"\nnamespace mlx::core::cu {{\n__global__ void __cluster_dims__({x}, {y}, {z}) "
            f"{kernel_name(name, template)}({params});\n}}\n")


def generated_parameters(generated: str, function: str) -> list[str] | None:
    """The parameters of `function`'s definition in a source MLX generated (verbose), or None if absent."""
    head = f"__global__ void {function}("
    i = generated.find(head)
    if i < 0:
        return None
    j = generated.find(") {", i)
    if j < 0:
        return None
    return [" ".join(p.split()) for p in generated[i + len(head):j].split(",")]


def stdout_bytes(f: Callable[[], object]) -> tuple[object, bytes]:
    """f()'s result and the bytes it wrote on fd 1 (MLX prints verbose kernel sources from C++): fd 1 points at a
    file meanwhile, so whatever reads this process's stdout (the worker's protocol) never sees them. What C's
    stdio held before (a kernel's device `printf` lands there) is flushed to nowhere first, so it cannot mix
    into what is captured."""
    sys.stdout.flush()
    libc = ctypes.CDLL(None)
    with tempfile.TemporaryFile() as capture, open(os.devnull, "wb") as devnull:
        saved = os.dup(1)
        try:
            os.dup2(devnull.fileno(), 1)
            libc.fflush(None)
            os.dup2(capture.fileno(), 1)
            result = f()
            libc.fflush(None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        capture.seek(0)
        return result, capture.read()


def stdout_of(f: Callable[[], object]) -> tuple[object, str]:
    """`stdout_bytes` as text."""
    result, printed = stdout_bytes(f)
    return result, printed.decode(errors="replace")


def refusal() -> str | None:
    """Why a launch in clusters must not run in this process, or None when it may: MLX running CUDA graphs
    (its default) carries a cluster kernel's cluster shape over to later kernels (see above). Allowed with
    MLX_USE_CUDA_GRAPHS=0, or at one's own risk with KSEARCH_ALLOW_CLUSTERS=1 (to measure the kernel)."""
    if os.environ.get("MLX_USE_CUDA_GRAPHS", "").strip() == "0" or os.environ.get("KSEARCH_ALLOW_CLUSTERS") == "1":
        return None
    return ("a launch in thread-block clusters is refused while MLX uses CUDA graphs: MLX updates cached graphs in "
            "place and later kernels of the process keep the cluster shape, so blocks past the last whole cluster "
            "never run (measured with MLX 0.32.4 on an H200). Run with MLX_USE_CUDA_GRAPHS=0, or set "
            "KSEARCH_ALLOW_CLUSTERS=1 to time the kernel anyway; the plan's cluster-free configuration runs as is")
