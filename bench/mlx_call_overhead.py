"""Where the time of a short MLX call goes, on the device machine (MLX's CUDA build): per call, building
the lazy graph in Python, then mx.eval + mx.synchronize, for a trivial custom kernel, a built-in op and
SDPA decode. Prints one JSON object. Run: PYTHONPATH=/root/mlx-site python3 bench/mlx_call_overhead.py"""

from __future__ import annotations

import json
import statistics
import time

import mlx.core as mx

COPY = "unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < (unsigned int)n[0]) y[i] = x[i];"


def per_call(build, k: int, reps: int = 200) -> dict[str, float]:
    """Median µs per call: whole (build + eval + sync) and eval only (graph built before the clock)."""
    whole, evals = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        outs = [build() for _ in range(k)]
        t1 = time.perf_counter()
        mx.eval(outs)
        mx.synchronize()
        t2 = time.perf_counter()
        whole.append((t2 - t0) / k)
        evals.append((t2 - t1) / k)
    return {"whole_us": 1e6 * statistics.median(whole), "eval_us": 1e6 * statistics.median(evals),
            "build_us": 1e6 * (statistics.median(whole) - statistics.median(evals))}


def main() -> None:
    x = mx.random.normal((1024,))
    n = mx.array(1024, dtype=mx.int32)
    mx.eval(x, n)
    kern = mx.fast.cuda_kernel(name="copy1k", input_names=["x", "n"], output_names=["y"], source=COPY)

    def custom():
        return kern(inputs=[x, n], output_shapes=[(1024,)], output_dtypes=[mx.float32], grid=(1024, 1, 1),
                    threadgroup=(256, 1, 1))[0]

    def custom_int():
        return kern(inputs=[x, 1024], output_shapes=[(1024,)], output_dtypes=[mx.float32], grid=(1024, 1, 1),
                    threadgroup=(256, 1, 1))[0]

    big = "\n".join(f"// padding line {i} " + "x" * 80 for i in range(400)) + "\n" + COPY
    kbig = mx.fast.cuda_kernel(name="copy1k_big", input_names=["x", "n"], output_names=["y"], source=big)

    def custom_big_source():
        return kbig(inputs=[x, n], output_shapes=[(1024,)], output_dtypes=[mx.float32], grid=(1024, 1, 1),
                    threadgroup=(256, 1, 1))[0]

    q = mx.random.normal((1, 32, 1, 128)).astype(mx.float16)
    kv = [mx.random.normal((1, 8, 8192, 128)).astype(mx.float16) for _ in range(2)]
    mx.eval(q, *kv)

    def sdpa():
        return mx.fast.scaled_dot_product_attention(q, kv[0], kv[1], scale=128 ** -0.5)

    out: dict[str, object] = {"mlx": mx.__version__}
    for name, fn in [("custom_kernel", custom), ("custom_kernel_int_scalar", custom_int),
                     ("custom_kernel_32KB_source", custom_big_source), ("add_one", lambda: x + 1.0),
                     ("sdpa_decode_8k", sdpa)]:
        for k in (1, 8):
            per_call(fn, k, reps=20)  # warm-up (JIT)
            out[f"{name}_k{k}"] = per_call(fn, k)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
