"""The CUDA-dialect example of every pattern in knowledge/patterns.toml, compiled by MLX's CUDA backend and run
on the device machine against a NumPy reference (issue 5: "each with an example that the test suite compiles";
the Metal bodies go through `ksearch check` on Linux, these need an NVIDIA GPU).

Run there with MLX staged (see bench/h200.sh): PYTHONPATH=/root/mlx-site python3 bench/patterns_cuda.py OUT.json
Each case below gives one pattern its shapes, scalars, launches and reference; a pattern without a case is
reported as `no case` (a unit test in crates/ksearch-kernels/src/knowledge.rs checks that every pattern has one, without a GPU)."""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def header_text(header: str) -> str:
    """The last line ended, as Candidate::mlx_header does (which also drops comments: irrelevant here)."""
    return header if not header or header.endswith("\n") else header + "\n"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Case:
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    scalars: dict[str, int]
    template: dict[str, int]
    # Per launch: (input names, outputs as name -> shape, grid in threads, threadgroup); the scalars follow
    # the inputs of every launch.
    passes: list[tuple[list[str], dict[str, tuple[int, ...]], tuple[int, int, int], tuple[int, int, int]]]
    reference: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
    atol: float = 1e-5
    rtol: float = 1e-4


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def scan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    h = np.zeros_like(b)
    carry = np.zeros(a.shape[0], dtype=np.float64)
    for t in range(a.shape[1]):
        carry = a[:, t] * carry + b[:, t]
        h[:, t] = carry
    return h


R, C = 37, 1000
CASES: dict[str, Case] = {
    "exp2_online_softmax": Case(
        inputs=lambda g: {"x": 3 * g.standard_normal((R, C)).astype(np.float32)},
        scalars={"C": C}, template={"TG": 256},
        passes=[(["x"], {"y": (R, C)}, (256, R, 1), (256, 1, 1))],
        reference=lambda i: {"y": softmax(i["x"].astype(np.float64))}),
    "simdgroup_block_reduction": Case(
        inputs=lambda g: {"x": g.standard_normal((R, C)).astype(np.float32)},
        scalars={"C": C}, template={"TG": 256},
        passes=[(["x"], {"y": (R,)}, (256, R, 1), (256, 1, 1))],
        reference=lambda i: {"y": i["x"].astype(np.float64).sum(axis=1)}, atol=1e-4),
    "simdgroup_matrix_mma": Case(
        inputs=lambda g: {"A": g.standard_normal((64, 96)).astype(np.float32),
                          "B": g.standard_normal((96, 48)).astype(np.float32)},
        scalars={"M": 64, "N": 48, "K": 96}, template={},
        passes=[(["A", "B"], {"D": (64, 48)}, (32 * (48 // 16), 64 // 16, 1), (32, 1, 1))],
        # TF32 products (10-bit mantissa): about 1e-3 relative per product.
        reference=lambda i: {"D": i["A"].astype(np.float64) @ i["B"].astype(np.float64)}, atol=5e-2, rtol=1e-2),
    "padded_threadgroup_tiling": Case(
        inputs=lambda g: {"x": g.standard_normal((R, 70)).astype(np.float32)},
        scalars={"R": R, "C": 70}, template={"TILE": 32},
        passes=[(["x"], {"y": (70, R)}, (cdiv(70, 32) * 32, cdiv(R, 32) * 32, 1), (32, 32, 1))],
        reference=lambda i: {"y": i["x"].T.copy()}, atol=0, rtol=0),
    "chunked_scan_with_carry": Case(
        inputs=lambda g: {"a": g.uniform(0.5, 1.0, (5, 777)).astype(np.float32),
                          "b": g.standard_normal((5, 777)).astype(np.float32)},
        scalars={"L": 777}, template={"TG": 256},
        passes=[(["a", "b"], {"h": (5, 777)}, (256, 5, 1), (256, 1, 1))],
        reference=lambda i: {"h": scan(i["a"].astype(np.float64), i["b"].astype(np.float64))}, atol=1e-4, rtol=1e-3),
    "split_k_two_pass": Case(
        inputs=lambda g: {"A": g.standard_normal((300, 1000)).astype(np.float32),
                          "x": g.standard_normal((1000,)).astype(np.float32)},
        scalars={"M": 300, "K": 1000}, template={"S": 8},
        passes=[(["A", "x"], {"partial": (8, 300)}, (32 * 8, 300, 1), (32, 1, 1)),
                (["partial"], {"y": (300,)}, (300, 1, 1), (256, 1, 1))],
        reference=lambda i: {"y": i["A"].astype(np.float64) @ i["x"].astype(np.float64)}, atol=1e-3),
    "vectorised_loads": Case(
        inputs=lambda g: {"x": g.standard_normal((1003,)).astype(np.float32),
                          "g": g.standard_normal((1003,)).astype(np.float32)},
        scalars={"N": 1003}, template={},
        passes=[(["x", "g"], {"y": (1003,)}, (cdiv(1003, 4), 1, 1), (256, 1, 1))],
        reference=lambda i: {"y": i["x"] / (1 + np.exp(-i["x"].astype(np.float64))) * i["g"]}),
    "bounds_guarded_grid": Case(
        inputs=lambda g: {"x": g.standard_normal((R, 70)).astype(np.float32),
                          "bias": g.standard_normal((70,)).astype(np.float32)},
        scalars={"R": R, "C": 70}, template={},
        passes=[(["x", "bias"], {"y": (R, 70), "rowpart": (R, cdiv(70, 32))}, (cdiv(70, 32) * 32, cdiv(R, 8) * 8, 1),
                 (32, 8, 1))],
        reference=lambda i: {"y": i["x"] + i["bias"],
                             "rowpart": np.stack([(i["x"] + i["bias"])[:, j:j + 32].astype(np.float64).sum(axis=1)
                                                  for j in range(0, 70, 32)], axis=1)}, atol=1e-4),
}


def run_case(mx: Any, p: dict[str, Any], case: Case) -> dict[str, Any]:
    """Compiles and runs one pattern's CUDA body (and its second pass) and compares with the reference."""
    rng = np.random.default_rng(7)
    host = case.inputs(rng)
    env: dict[str, Any] = {n: mx.array(a) for n, a in host.items()}
    scalar_arrays = [mx.array(v, dtype=mx.int32) for v in case.scalars.values()]
    bodies = [p["cuda"]] + ([p["cuda_pass2"]] if p["cuda_pass2"].strip() else [])
    if len(bodies) != len(case.passes):
        return {"status": "error", "message": f"{len(bodies)} bodies but the case has {len(case.passes)} passes"}
    for n, (body, (names, outs, grid, tg)) in enumerate(zip(bodies, case.passes, strict=True)):
        kernel = mx.fast.cuda_kernel(name=f"{p['id']}_p{n + 1}", input_names=names + list(case.scalars),
                                     output_names=list(outs), source=body, header=header_text(p["cuda_header"]))
        res = kernel(inputs=[env[k] for k in names] + scalar_arrays, output_shapes=list(outs.values()),
                     output_dtypes=[mx.float32] * len(outs), grid=grid, threadgroup=tg,
                     template=list(case.template.items()) or None, init_value=float("nan"))
        env.update(zip(outs, res, strict=True))
    mx.eval(list(env.values()))
    want = case.reference(host)
    out: dict[str, Any] = {"status": "passed", "outputs": {}}
    for name, ref in want.items():
        got = np.array(env[name]).astype(np.float64)
        err = np.abs(got - ref)
        bad = int(np.sum(~(err <= case.atol + case.rtol * np.abs(ref))))
        finite = err[np.isfinite(err)]
        out["outputs"][name] = {"shape": list(got.shape), "max_abs": float(finite.max()) if finite.size else None,
                                "bad": bad}
        if bad:
            out["status"] = "wrong"
    return out


def main() -> None:
    import mlx.core as mx

    patterns = tomllib.loads((ROOT / "knowledge/patterns.toml").read_text())["pattern"]
    rows = []
    for p in patterns:
        case = CASES.get(p["id"])
        if case is None:
            rows.append({"id": p["id"], "status": "no case"})
            continue
        try:
            r = run_case(mx, p, case)
        except Exception as exc:  # a compile error names the pattern; the others still run
            r = {"status": "error", "message": str(exc)[-1500:]}
        rows.append({"id": p["id"], **r})
        print(p["id"], r["status"], json.dumps(r.get("outputs") or r.get("message", ""))[:300], flush=True)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    result = {"what": "knowledge/patterns.toml CUDA examples compiled by MLX (mx.fast.cuda_kernel) and checked "
                      "against NumPy", "command": "PYTHONPATH=/root/mlx-site python3 bench/patterns_cuda.py OUT.json",
              "date": datetime.date.today().isoformat(), "machine": {"gpu": smi, "system": platform.platform()},
              "versions": {"mlx": mx.__version__}, "patterns": rows,
              "passed": sum(r["status"] == "passed" for r in rows), "total": len(rows)}
    Path(sys.argv[1] if len(sys.argv) > 1 else "patterns-cuda.json").write_text(json.dumps(result, indent=1))
    print(f"{result['passed']} of {result['total']} patterns passed")
    sys.exit(0 if result["passed"] == result["total"] else 1)


if __name__ == "__main__":
    main()
