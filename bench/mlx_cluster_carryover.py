"""Does a kernel compiled with `__cluster_dims__` change how MLX launches later kernels? On the device
machine: a plain kernel of 6 blocks marks the blocks that ran; then a kernel declared in clusters of 4 runs
(ksearch's declaration, python/ksearch_worker/cluster.py); then the plain kernel again, alone and in one
evaluation with the cluster kernel. In the attention task a 6-block prefill lost blocks 4 and 5 after the
cluster decode had run (bench/results/h200-attention-decode-clusters-20261130.json); this isolates that.

Prints one JSON object: MLX's version, whether CUDA graphs are on, and per round the blocks that ran.
Run twice: PYTHONPATH=/root/mlx-site:python python3 bench/mlx_cluster_carryover.py
       and: MLX_USE_CUDA_GRAPHS=0 PYTHONPATH=/root/mlx-site:python python3 bench/mlx_cluster_carryover.py
"""

from __future__ import annotations

import json
import os

import mlx.core as mx
from ksearch_worker import cluster

BLOCKS, THREADS = 6, 64
MARK = "if (threadIdx.x == 0) out[blockIdx.x] = 1.0f;"
CLUSTER_BODY = ("unsigned n; asm volatile(\"mov.u32 %0, %%cluster_nctarank;\" : \"=r\"(n));\n"
                "if (threadIdx.x == 0) out[blockIdx.x] = (float)n;")


def plain() -> mx.array:
    k = mx.fast.cuda_kernel(name="ks_carry_plain", input_names=["x"], output_names=["out"], source=MARK)
    return k(inputs=[mx.zeros((1,))], output_shapes=[(BLOCKS,)], output_dtypes=[mx.float32],
             grid=(BLOCKS * THREADS, 1, 1), threadgroup=(THREADS, 1, 1), init_value=0.0)[0]


def clustered() -> mx.array:
    decl = cluster.declaration("ks_carry_cluster", CLUSTER_BODY, [("x", mx.float32, 1)], [("out", mx.float32)], [],
                               (4, 1, 1))
    k = mx.fast.cuda_kernel(name="ks_carry_cluster", input_names=["x"], output_names=["out"], source=CLUSTER_BODY,
                            header=decl)
    return k(inputs=[mx.zeros((1,))], output_shapes=[(8,)], output_dtypes=[mx.float32],
             grid=(8 * THREADS, 1, 1), threadgroup=(THREADS, 1, 1), init_value=0.0)[0]


def ran(a: mx.array) -> list[int]:
    return [i for i, v in enumerate(a.tolist()) if v != 0]


def main() -> None:
    rounds: dict[str, object] = {"plain, before any cluster kernel": ran(plain())}
    c = clustered()
    rounds["cluster kernel (cluster size seen by each block)"] = c.tolist()
    for i in range(3):
        rounds[f"plain, after it ({i + 1})"] = ran(plain())
    a, b = plain(), clustered()
    mx.eval(a, b)
    rounds["plain and cluster in one evaluation"] = {"plain": ran(a), "cluster": b.tolist()}
    print(json.dumps({"mlx": mx.__version__, "MLX_USE_CUDA_GRAPHS": os.environ.get("MLX_USE_CUDA_GRAPHS", "(unset: on)"),
                      "blocks_expected": list(range(BLOCKS)), "rounds": rounds}))


if __name__ == "__main__":
    main()
