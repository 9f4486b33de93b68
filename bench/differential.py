#!/usr/bin/env python3
"""Differential test of `ksearch translate` on public CUDA (issue 17): each kernel of the corpus that has a
simple launch runs as its authors wrote it (nvcc, CuPy) and as ksearch translated it (MLX's
`mx.fast.cuda_kernel`), on the same random inputs, and the outputs are compared. Metal translations of the
same kernels go through `ksearch back-translate` and the same comparison.

    # here (no GPU): translate the corpus, write the bundle a device call carries
    python3 bench/differential.py prepare --ksearch target/release/ksearch --corpus ~/.cache/ksearch/corpus \
        --out .device/differential
    # on the device machine (nvcc, cuobjdump, CuPy; MLX's CUDA build staged): run and compare
    python3 bench/differential.py run .device/differential --out $OUT/differential.json

What a kernel with a simple launch is: a `<<<...>>>` launch of it by name (not a template) in its file, and
parameters that are pointers to numbers or numbers. Its original runs with the launch `translate` read from
the host code (the grid and block of the plan), so a misread launch is not caught here, only bodies, roles,
dtypes, scalars and in-place semantics. Integer parameters named in the grid get 1000 (less where the grid
multiplies several), the others 8 (a count, or a stride in bytes that keeps floats aligned); every buffer
holds twice the product of the integer parameters and the block count (capped). Every buffer of the
original starts with data; the translation's outputs start at a sentinel value, and where one stays so the
original must have left the element unchanged; a buffer the original changes that the translation does
not write is a difference, whatever roles the translator found. A kernel's verdict:
`match`, `mismatch`, `nothing written` (neither side wrote anything), `translate error` (the diagnostic that names why), `mlx error` (MLX/NVRTC refused the
translation), `original error` (nvcc could not build the original here: not counted), `not simple`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BIG, SMALL, CAP, MAX_THREADS = 1000, 8, 1 << 25, 1 << 21
SENTINEL = -30720.0
DTYPES = {
    "float": "float32", "double": "float64", "half": "float16", "__half": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "int": "int32", "int32_t": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "uint32_t": "uint32", "uint": "uint32",
    "int64_t": "int64", "long long": "int64", "long": "int64", "size_t": "uint64", "uint64_t": "uint64",
    "int16_t": "int16", "short": "int16", "uint16_t": "uint16", "int8_t": "int8", "char": "int8",
    "uint8_t": "uint8", "unsigned char": "uint8", "bool": "bool",
}


def elem_dtype(t: str) -> str | None:
    t = re.sub(r"\b(const|volatile|__restrict__|restrict|struct)\b", " ", t)
    return DTYPES.get(" ".join(t.split()))


# ------------------------------------------------------------------------------------------- prepare
def kernel_files(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.suffix in (".cu", ".cuh", ".h") and p.is_file() and "__global__" in p.read_text(errors="replace"):
            out.append(p)
    return out


def signature(text: str, name: str) -> str:
    """The parameter list of the kernel `name` as written (after `__global__`), or ''."""
    m = re.search(rf"__global__[^;{{}}]*?\b{re.escape(name)}\s*\(([^)]*)\)", text)
    return m.group(1) if m else ""


def translate(ksearch: str, src: Path, to: str, out: Path, includes: list[Path]) -> dict[str, Any]:
    cmd = [ksearch, "translate", str(src), "--to", to, "--out", str(out), "--json", "-q", "--force"]
    for i in includes:
        cmd += ["-I", str(i)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    try:
        said = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        said = {}
    return {"exit": p.returncode, "json": said, "stderr": p.stderr[-2000:]}


def prepare(args: argparse.Namespace) -> None:
    corpus, bundle = Path(args.corpus).expanduser().resolve(), Path(args.out)
    shutil.rmtree(bundle, ignore_errors=True)
    ggml = (corpus / "ggml").resolve()
    sources = [(f, [ggml / "include", ggml / "src"], ggml.parent) for f in kernel_files(ggml / "src" / "ggml-cuda")]
    sources += [(f, [], corpus) for f in kernel_files(corpus / "cuda-sdists")]
    # The originals and the headers they include, carried as the corpus lays them out.
    trees = [(ggml / "include", ggml.parent, "*"), (ggml / "src", ggml.parent, "*.h"),
             (ggml / "src" / "ggml-cuda", ggml.parent, "**/*"), (corpus / "cuda-sdists", corpus, "**/*")]
    for tree, base, pattern in trees:
        for p in tree.glob(pattern):
            if p.is_file() and p.suffix in (".cu", ".cuh", ".h", ".hpp", ".inc", ".c"):
                dst = bundle / "src" / p.relative_to(base)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, dst)
    manifest: list[dict[str, Any]] = []
    for fid, (src, includes, base) in enumerate(sources):
        rel = str(src.relative_to(base))
        text = src.read_text(errors="replace")
        cuda = translate(args.ksearch, src, "mlx-cuda", bundle / "cuda" / str(fid), includes)
        metal = translate(args.ksearch, src, "mlx-metal", bundle / "metal" / str(fid), includes)
        bt = {"exit": None, "stderr": "no mlx-metal translation written"}
        if (bundle / "metal" / str(fid) / "plan.toml").exists():
            p = subprocess.run([args.ksearch, "back-translate", str(bundle / "metal" / str(fid)), "--out",
                                str(bundle / "metal-bt" / str(fid)), "--force", "-q"],
                               capture_output=True, text=True, timeout=300)
            bt = {"exit": p.returncode, "stderr": p.stderr[-1500:]}
        shutil.rmtree(bundle / "metal" / str(fid), ignore_errors=True)  # the back-translation is what runs
        for k in cuda["json"].get("kernels", []):
            name = k["name"]
            errors = lambda said: [f"{d.get('code')}: {d.get('message', '')[:300]}"  # noqa: E731
                                   for d in said.get("diagnostics", [])
                                   if d.get("severity") == "error" and d.get("kernel") in (name, None)]
            why = None
            if k.get("template_ints") or k.get("template_types") or k.get("template_other"):
                why = "a template kernel"
            elif not re.search(rf"(?<![\w:]){re.escape(name)}\s*<<<", text):
                why = "no <<<...>>> launch of it in its file"
            elif re.search(r"\*\s*(const\s*)?\*", signature(text, name)):
                why = "pointer-to-pointer parameters (the addresses it computes differ between two runs)"
            else:
                bad = [p["name"] for p in k["params"] if elem_dtype(p["elem_type"]) is None]
                if bad:
                    why = f"parameters that are not numbers or pointers to numbers: {', '.join(bad)}"
            manifest.append({
                "file": rel, "fid": fid, "includes": [str(Path("src") / i.relative_to(ggml.parent)) for i in includes],
                "kernel": name, "params": k["params"], "not_simple": why,
                "cuda": {"exit": cuda["exit"], "errors": errors(cuda["json"])},
                "metal": {"exit": metal["exit"], "errors": errors(metal["json"]), "back_translate": bt},
            })
    # Only what a device call needs: the translations of files with a simple kernel.
    keep = {m["fid"] for m in manifest if m["not_simple"] is None}
    for variant in ("cuda", "metal-bt"):
        for d in (bundle / variant).glob("*"):
            if int(d.name) not in keep:
                shutil.rmtree(d)
    for m in manifest:
        m["cuda"]["errors"] = m["cuda"]["errors"][:8]
        m["metal"]["errors"] = m["metal"]["errors"][:8]
        if m["not_simple"] is not None:
            del m["params"], m["cuda"], m["metal"]
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1))
    simple = sum(m["not_simple"] is None for m in manifest)
    print(f"{len(sources)} files, {len(manifest)} kernels, {simple} with a simple launch -> {bundle}")


# ------------------------------------------------------------------------------------------- run
def plan_launch(folder: Path, kernel: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    import tomllib
    try:
        plan = tomllib.loads((folder / "plan.toml").read_text())
    except (OSError, ValueError):
        return None, None
    launch = next((l for l in plan.get("launch", []) if l.get("kernel") == kernel), None)
    decl = next((k for k in plan.get("kernel", []) if k.get("name") == kernel), None)
    return launch, decl


def evaluate(expr: str, env: dict[str, int]) -> int:
    names = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor, "sqrt": math.sqrt,
             "log2": math.log2, "abs": abs, **env}
    return int(eval(str(expr), {"__builtins__": {}}, names))  # the plan's expression language is Python's


def values(entry: dict[str, Any], launch: dict[str, Any]) -> dict[str, Any]:
    """Each parameter's value or buffer size, and the launch's grid in blocks, threads and shared memory."""
    import numpy as np
    rng = np.random.default_rng(17)
    in_grid = set(re.findall(r"[A-Za-z_]\w*", " ".join(map(str, launch.get("grid", [])))))
    ints = {p["name"]: (BIG if p["name"] in in_grid else SMALL) for p in entry["params"]
            if not p["pointer"] and elem_dtype(p["elem_type"]) not in ("float32", "float64", "float16", "bfloat16")}
    grid = [evaluate(g, ints) for g in launch["grid"]]
    block = [evaluate(t, ints) for t in launch["threadgroup"]]
    # A grid over several sizes: the largest of them shrunk until the launch has at most MAX_THREADS threads.
    while math.prod(grid) > MAX_THREADS and any(ints[n] > SMALL for n in in_grid if n in ints):
        big = max((n for n in in_grid if n in ints), key=lambda n: ints[n])
        ints[big] = max(SMALL, ints[big] // 4)
        grid = [evaluate(g, ints) for g in launch["grid"]]
    smem = evaluate(launch.get("shared_memory") or 0, ints)
    # Room for every index a kernel forms from its sizes and its block index (rows from gridDim).
    blocks = math.prod(g // b for g, b in zip(grid, block))
    elems = min(CAP, max(2 * math.prod(ints.values() or [1]) * blocks, 2 * math.prod(grid)))
    floats = {p["name"]: float(rng.uniform(0.5, 1.5)) for p in entry["params"]
              if not p["pointer"] and p["name"] not in ints}
    # Outputs start alike on both sides (MLX has one start value for all of a launch's outputs).
    written = [elem_dtype(p["elem_type"]) or "" for p in entry["params"] if p["pointer"] and p["role"] in ("output", "inout")]
    # A start value no kernel computes by chance and exact in every float type (NaN would be confused with
    # a NaN the kernel computes); 77 where an output is an integer (it fits int8).
    init = SENTINEL if all(t.startswith(("float", "bfloat")) for t in written) else 77.0
    return {"ints": ints, "floats": floats, "grid": grid, "block": block, "smem": smem, "elems": elems, "init": init}


def host_data(entry: dict[str, Any], elems: int) -> dict[str, Any]:
    import numpy as np
    rng = np.random.default_rng(1)
    data = {}
    for p in entry["params"]:
        if not p["pointer"]:
            continue
        dt = elem_dtype(p["elem_type"])
        if dt in ("float32", "float64", "float16", "bfloat16"):
            x = rng.standard_normal(elems).astype(np.float32)
            if dt == "bfloat16":  # exactly representable, so both sides hold the same values
                x = ((x.view(np.uint32) >> 16) << 16).view(np.float32)
            data[p["name"]] = x
        elif dt == "bool":
            data[p["name"]] = rng.integers(0, 2, elems).astype(bool)
        else:
            data[p["name"]] = rng.integers(0, SMALL, elems).astype(dt)
    return data


def mangled(cubin: Path, kernel: str, nparams: int) -> str | None:
    syms = subprocess.run(["cuobjdump", "-symbols", str(cubin)], capture_output=True, text=True).stdout
    names = [t for line in syms.splitlines() if "STO_ENTRY" in line for t in line.split() if t.startswith("_Z")]
    plain = [t for line in syms.splitlines() if "STO_ENTRY" in line for t in line.split()[-1:]]
    if kernel in plain:
        return kernel  # extern "C"
    demangled = subprocess.run(["cu++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    hits = [m for m, d in zip(names, demangled) if d.startswith(kernel + "(") and d.count(",") + 1 == max(nparams, 1)]
    return hits[0] if hits else None


def run_original(entry: dict[str, Any], v: dict[str, Any], data: dict[str, Any], cubin: Path) -> dict[str, Any]:
    import cupy as cp
    import numpy as np
    name = mangled(cubin, entry["kernel"], len(entry["params"]))
    if name is None:
        raise LookupError(f"no entry for {entry['kernel']} in the original's cubin")
    fn = cp.RawModule(path=str(cubin)).get_function(name)
    # Every buffer starts with data, whatever the translation took it for: a buffer the original writes
    # shows as changed, independently of the roles the translator found.
    args, bufs = [], {}
    for p in entry["params"]:
        dt = elem_dtype(p["elem_type"])
        if p["pointer"]:
            arr = to_cupy(cp, data[p["name"]], dt)
            bufs[p["name"]] = (arr, dt)
            args.append(arr)
        elif p["name"] in v["ints"]:
            args.append(np.dtype(dt).type(v["ints"][p["name"]]))
        elif dt == "bfloat16":  # passed by value as its 16 bits
            args.append(np.uint16(np.float32(v["floats"][p["name"]]).view(np.uint32) >> 16))
        else:
            args.append(np.dtype(dt).type(v["floats"][p["name"]]))
    fn(tuple(v["grid"][i] // v["block"][i] for i in range(3)), tuple(v["block"]), tuple(args),
       shared_mem=v["smem"])
    cp.cuda.runtime.deviceSynchronize()
    return {n: from_cupy(a, dt) for n, (a, dt) in bufs.items()}


def to_cupy(cp: Any, host: Any, dt: str) -> Any:
    import numpy as np
    if dt == "bfloat16":  # CuPy has no bfloat16: the top halves of float32 bits
        bits = (host.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return cp.asarray(bits)
    return cp.asarray(host.astype(dt))


def from_cupy(a: Any, dt: str) -> Any:
    import numpy as np
    h = a.get()
    if dt == "bfloat16":  # its bits, widened
        return (h.astype(np.uint32) << 16).view(np.float32)
    return h.astype(np.float32) if h.dtype.kind == "f" and dt != "float64" else h


def run_translation(entry: dict[str, Any], v: dict[str, Any], data: dict[str, Any], folder: Path,
                    launch: dict[str, Any], decl: dict[str, Any]) -> dict[str, Any]:
    import mlx.core as mx
    import numpy as np
    types = {p["name"]: elem_dtype(p["elem_type"]) for p in entry["params"]}
    mxd = lambda d: getattr(mx, d)  # noqa: E731
    ins = []
    for n in launch.get("inputs", []):
        if n in data:
            ins.append(mx.array(data[n]).astype(mxd(types[n])))
        elif n in v["floats"]:
            ins.append(mx.array([v["floats"][n]], dtype=mxd(types.get(n) or "float32")))
        elif n in v["ints"]:
            ins.append(mx.array([v["ints"][n]], dtype=mx.int32))
        else:
            raise KeyError(f"the plan's input `{n}` is no parameter of the kernel")
    scalars = [mx.array(v["ints"][s], dtype=mx.int32) for s in launch.get("scalars", [])]
    outs = launch.get("outputs", [])
    base = [o[:-4] if o.endswith("_out") and o[:-4] in types and o not in types else o for o in outs]
    out_types = [types[b] for b in base]
    header = (folder / decl["header"]).read_text() if decl.get("header") else ""
    kernel = mx.fast.cuda_kernel(name=f"diff_{entry['fid']}_{entry['kernel']}",
                                 input_names=list(launch.get("inputs", [])) + list(launch.get("scalars", [])),
                                 output_names=outs, source=(folder / decl["source"]).read_text(), header=header,
                                 ensure_row_contiguous=True, shared_memory=v["smem"])
    template = [(k, int(x)) for k, x in (launch.get("template") or {}).items()] or None
    res = kernel(inputs=ins + scalars, output_shapes=[(v["elems"],)] * len(outs),
                 output_dtypes=[mxd(t) for t in out_types], grid=tuple(v["grid"]), threadgroup=tuple(v["block"]),
                 template=template, init_value=v["init"], stream=mx.gpu)
    mx.eval(res)
    return {b: np.array(r.astype(mx.float32) if t.startswith(("float", "bfloat")) else r)
            for b, r, t in zip(base, res, out_types)}


def compare(entry: dict[str, Any], data: dict[str, Any], orig: dict[str, Any], got: dict[str, Any],
            init: float) -> str | None:
    """None when the translation's outputs are the original's; else what differs. Every buffer of the
    original started with data: where the translation left an output at its start value, the original must
    have left that element unchanged; a buffer the original changed that the translation does not write is
    a difference; and a launch where neither wrote anything is reported as such, never as a match."""
    import numpy as np
    types = {p["name"]: elem_dtype(p["elem_type"]) for p in entry["params"]}
    changed_any = False
    for n, a in orig.items():
        start = data[n].astype(a.dtype) if a.dtype.kind != "f" else data[n].astype(np.float32)
        if types[n] == "float64":
            start = data[n].astype(np.float64)
        same = (a == start) | (np.isnan(a) & np.isnan(start)) if a.dtype.kind == "f" else a == start
        changed_any |= not same.all()
        if n not in got:
            if not same.all():
                return f"the original writes {n} ({int((~same).sum())} elements), the translation does not"
            continue
        b = got[n]
        # An element agrees when both sides end with the same value, or when the translation left it at its
        # start value and the original left it unchanged. (A kernel may compute the start value itself: 77
        # is a column index like any other, so an element at it is not taken as unwritten when the original
        # ends with it too.)
        unwritten = b == init
        if a.dtype.kind == "f":
            tol = {"float16": 1e-2, "bfloat16": 1e-2, "float64": 1e-9}.get(types[n], 1e-4)
            ok = np.isclose(a, b, rtol=tol, atol=tol * 1e-2, equal_nan=True) | (unwritten & same)
        else:
            ok = (a == b) | (unwritten & same)
        if not ok.all():
            k = int(np.argmin(ok))
            return (f"{n}: {int((~ok).sum())} of {ok.size} elements differ; first at {k}: original {a[k]}, "
                    f"translation {'(unwritten)' if unwritten[k] else b[k]}")
    if not changed_any and all((got[n] == init).all() for n in got):
        return "nothing written by either"
    return None


def one(bundle: Path, index: int, variant: str) -> dict[str, Any]:
    entry = json.loads((bundle / "manifest.json").read_text())[index]
    folder = bundle / variant / str(entry["fid"])
    launch, decl = plan_launch(folder, entry["kernel"])
    if launch is None or decl is None:
        return {"verdict": "translate error", "why": "no launch of this kernel in the translation's plan"}
    try:
        v = values(entry, launch)
    except Exception as e:  # noqa: BLE001 - a grid naming what is no integer parameter
        return {"verdict": "launch unreadable", "why": f"the plan's launch: {type(e).__name__}: {e}"}
    data = host_data(entry, v["elems"])
    cubin = bundle / "build" / f"{entry['fid']}.cubin"
    started = time.time()
    try:
        orig = run_original(entry, v, data, cubin)
    except Exception as e:  # noqa: BLE001 - any failure of the original excludes the kernel
        return {"verdict": "original error", "why": f"{type(e).__name__}: {e}"[:500]}
    try:
        got = run_translation(entry, v, data, folder, launch, decl)
    except Exception as e:  # noqa: BLE001 - MLX's or NVRTC's refusal, whole
        return {"verdict": "mlx error", "why": f"{type(e).__name__}: {e}"[:800]}
    diff = compare(entry, data, orig, got, v["init"])
    verdict = "nothing written" if diff == "nothing written by either" else "mismatch" if diff else "match"
    return {"verdict": verdict, "why": diff, "seconds": round(time.time() - started, 2),
            "values": {"ints": v["ints"], "grid": v["grid"], "block": v["block"], "elems": v["elems"]}}


def build_originals(bundle: Path, manifest: list[dict[str, Any]]) -> dict[int, str]:
    """nvcc -cubin for every file with a simple kernel, in parallel; {fid: error} for those that fail."""
    from concurrent.futures import ThreadPoolExecutor
    (bundle / "build").mkdir(exist_ok=True)
    files = {m["fid"]: m for m in manifest if m["not_simple"] is None}
    arch = os.environ.get("DIFF_ARCH", "sm_90")

    def build(m: dict[str, Any]) -> tuple[int, str | None]:
        cmd = ["nvcc", "-cubin", f"-arch={arch}", "-std=c++17", "-O2", "-x", "cu", "-o",
               str(bundle / "build" / f"{m['fid']}.cubin"), str(bundle / "src" / m["file"])]
        for i in m["includes"]:
            cmd += ["-I", str(bundle / i)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
        return m["fid"], None if p.returncode == 0 else (p.stderr or p.stdout)[-600:]

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        return {fid: err for fid, err in pool.map(build, files.values()) if err}


def run(args: argparse.Namespace) -> None:
    bundle = Path(args.bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    started = time.time()
    failed_builds = build_originals(bundle, manifest)
    env = environment()
    rows = []
    for i, m in enumerate(manifest):
        row = {"file": m["file"], "kernel": m["kernel"], "not_simple": m["not_simple"]}
        if m["not_simple"] is None and m["fid"] in failed_builds:
            row["original"] = "nvcc failed: " + failed_builds[m["fid"]]
        elif m["not_simple"] is None:
            for variant, said in [("cuda", m["cuda"]), ("metal-bt", m["metal"])]:
                try:
                    p = subprocess.run([sys.executable, __file__, "one", str(bundle), str(i), variant],
                                       capture_output=True, text=True, timeout=args.timeout)
                    r = json.loads(p.stdout.strip().splitlines()[-1])
                except subprocess.TimeoutExpired:
                    r = {"verdict": "hang", "why": f"no result within {args.timeout} s"}
                except (IndexError, json.JSONDecodeError):
                    r = {"verdict": "crash", "why": (p.stderr or p.stdout)[-600:]}
                r["translate_errors"] = said["errors"]
                if variant == "metal-bt":
                    r["back_translate"] = said["back_translate"]
                row[variant] = r
        rows.append(row)
        # One short line per kernel (both verdicts whole), and the result file rewritten, so a run cut off by
        # its time limit still leaves every verdict it reached.
        verdicts = {v: row[v].get("verdict") for v in ("cuda", "metal-bt") if isinstance(row.get(v), dict)}
        print(f"{m['file']} {m['kernel']}: {json.dumps(verdicts) if verdicts else row.get('original') or 'not simple'}",
              flush=True)
        if m["not_simple"] is None or i + 1 == len(manifest):  # rows that ran something, and the last
            write_result(args.out, rows, started, done=i + 1 == len(manifest), total=len(manifest), env=env)
    print(json.dumps(summarize(rows), indent=1))


def environment() -> dict[str, Any]:
    machine = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
    try:
        import mlx.core as mx
        mlx = mx.__version__
    except ImportError:
        mlx = None
    return {"machine": machine, "nvcc": nvcc, "mlx": mlx}


def write_result(path: str, rows: list[dict[str, Any]], started: float, done: bool, total: int,
                 env: dict[str, Any]) -> None:
    out = {"script": "python3 bench/differential.py run BUNDLE (after `prepare`)", **env,
           "wall_s": round(time.time() - started, 1),
           "complete": done, "kernels_reached": len(rows), "kernels_total": total,
           "summary": summarize(rows), "kernels": rows}
    Path(path).write_text(json.dumps(out, indent=1))


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    simple = [r for r in rows if r["not_simple"] is None]
    ran = [r for r in simple if "original" not in r
           and "original error" not in (r.get("cuda", {}).get("verdict"), r.get("metal-bt", {}).get("verdict"))]
    s: dict[str, Any] = {"kernels": len(rows), "simple_launch": len(simple), "original_builds_and_runs": len(ran)}
    for variant in ("cuda", "metal-bt"):
        verdicts: dict[str, int] = {}
        for r in ran:
            v = r[variant]["verdict"]
            verdicts[v] = verdicts.get(v, 0) + 1
        lies = [f"{r['file']}:{r['kernel']}" for r in ran
                if r[variant]["verdict"] == "mismatch" and not r[variant]["translate_errors"]]
        s[variant] = {"verdicts": verdicts, "match_fraction": round(verdicts.get("match", 0) / len(ran), 3) if ran else None,
                      "mismatch_without_an_error_diagnostic": lies}
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--ksearch", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("bundle")
    r.add_argument("--out", required=True)
    r.add_argument("--timeout", type=float, default=90)
    o = sub.add_parser("one")
    o.add_argument("bundle")
    o.add_argument("index", type=int)
    o.add_argument("variant")
    a = ap.parse_args()
    if a.cmd == "prepare":
        prepare(a)
    elif a.cmd == "run":
        run(a)
    else:
        print(json.dumps(one(Path(a.bundle), a.index, a.variant)))


if __name__ == "__main__":
    main()
