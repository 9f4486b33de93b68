#!/usr/bin/env bash
# Stages FlashInfer for the device machine (which has no network) in .device/flashinfer-1 .. -K (git-ignored), one
# folder per device call, for the calls made back to back on one machine (it is given back 30 s after a call) to
# install it into the machine's python3. The release is flashinfer-python 0.7.4 (FLASHINFER_VERSION picks another
# that ships a wheel: 0.5.0 and later): its wheel is pure Python and carries the CUDA sources, CUTLASS, CCCL and
# spdlog headers its JIT compiles with the machine's nvcc and ninja at first use (no cubins, no jit-cache wheels, no
# download). Its only import-time need the machine lacks is apache-tvm-ffi (one small wheel, staged beside it; the
# rest is there: torch, numpy, requests, filelock, jinja2, packaging, nvidia-ml-py, tqdm). The optional stacks it
# lists (nvidia-cutlass-dsl, nvidia-cudnn-frontend, cuda-tile, nccl4py) are not staged: their backends stay off.
# 0.7.4's wheel is 97 MiB, more than a call carries (64 MiB with the working tree), so it is cut into parts that fit
# beside the tree; the last folder also holds the tvm-ffi wheel, install.sh (joins the parts, checks their sha256,
# installs, runs check.py) and check.py (each FlashInfer baseline on small problems against the PyTorch one: its
# first call JIT-compiles the kernel into ~/.cache/flashinfer, so the timed runs after it find it built).
# FLASHINFER_VERSION=0.6.18.post1 (18 MiB) fits one call. Without FlashInfer the cuda target's FlashInfer baselines
# are reported as not timed, with why, and the PyTorch baselines stand in. The device calls to make are printed last.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${FLASHINFER_VERSION:-0.7.4}
dl=.device/flashinfer-dl  # downloads, kept between runs; never carried
rm -rf .device/flashinfer .device/flashinfer-[0-9]*
mkdir -p "$dl"
# The device machine: x86-64, CPython 3.12, glibc new enough for manylinux_2_28.
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d "$dl" "flashinfer-python==$version" \
  || { echo "no wheel of flashinfer-python $version (0.4.1 and older ship sources only)" >&2; exit 1; }
wheel=$(ls "$dl"/flashinfer_python-"$version"-*.whl)
# apache-tvm-ffi as this release requires it (its METADATA), when it does (0.7.4 and 0.6.18 do).
tvm=$(unzip -p "$wheel" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: apache-tvm-ffi\([^;]*\)$/\1/p' | tr -d ' ')
extras=()
if [ -n "$tvm" ]; then
  rm -f "$dl"/apache_tvm_ffi-*.whl
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$dl" "apache-tvm-ffi$tvm"
  extras=("$dl"/apache_tvm_ffi-*.whl)
fi

# What one call may carry beside the working tree (tracked and untracked files that are not ignored), with 2 MiB
# to spare; the parts are cut evenly, the last folder holding the extras too.
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
budget=$(( 62 * 1024 * 1024 - tree ))
size=$(stat -c %s "$wheel")
extra=$((64 * 1024))  # the two scripts, and the extras' sizes below
for f in "${extras[@]}"; do extra=$((extra + $(stat -c %s "$f"))); done
parts=$(( (size + extra + budget - 1) / budget ))
while (( (size + parts - 1) / parts + extra > budget )); do parts=$((parts + 1)); done
part=$(( (size + parts - 1) / parts ))
split -b "$part" -d -a 2 "$wheel" "$dl/part-"
for k in $(seq 1 "$parts"); do
  mkdir -p ".device/flashinfer-$k"
  mv "$dl/part-$(printf %02d $((k - 1)))" ".device/flashinfer-$k/"
done
last=.device/flashinfer-$parts
for f in "${extras[@]}"; do cp "$f" "$last/"; done
name=$(basename "$wheel")
sum=$(sha256sum "$wheel" | cut -d' ' -f1)

cat > "$last/install.sh" <<INNER
#!/usr/bin/env bash
# Device side (bench/stage_flashinfer.sh wrote this): joins the $parts part(s) of $name, each from the
# .device/flashinfer-K that carried it, else from /root/fi-stage (where the calls before copied theirs); checks the
# wheel's sha256; installs it and the wheels beside this script into python3 (no index, no dependencies); then
# runs check.py.
set -euo pipefail
here=\$(cd "\$(dirname "\$0")" && pwd)
if python3 -c "import flashinfer, sys; sys.exit(flashinfer.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  echo "flashinfer $version is installed already"
else
  mkdir -p /root/fi-stage
  : > /root/fi-stage/$name
  for k in \$(seq 1 $parts); do
    p=part-\$(printf %02d \$((k - 1)))
    src=\$here/../flashinfer-\$k/\$p
    [ -f "\$src" ] || src=/root/fi-stage/\$p
    [ -f "\$src" ] || { echo "\$p missing: make the call that carries .device/flashinfer-\$k first" >&2; exit 1; }
    cat "\$src" >> /root/fi-stage/$name
  done
  echo "$sum  /root/fi-stage/$name" | sha256sum -c --quiet
  python3 -m pip install -q --no-index --no-deps --no-compile /root/fi-stage/$name \$(ls "\$here"/*.whl 2>/dev/null)
fi
python3 "\$here/check.py"
INNER
chmod +x "$last/install.sh"

cat > "$last/check.py" <<'INNER'
"""Device side (bench/stage_flashinfer.sh wrote this): each FlashInfer baseline of the paged-attention tasks on a
small problem of each element type the task's workloads use, against the task's PyTorch baseline on the same inputs
(output: relative error; lse: both base 2, so the largest difference is small). The first call JIT-compiles the
kernel into FlashInfer's cache, where the timed runs on this machine find it. Exits 1 if any check failed."""
import importlib.util
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
PAIRS = {"gqa-paged-decode": ("flashinfer_decode", "torch_gather_sdpa", "o"),
         "mla-paged-decode": ("flashinfer_mla", "torch_gather_matmul", "output"),
         "mla-paged-prefill": ("flashinfer_mla", "torch_gather_matmul", "output")}


def load(task: str) -> Any:
    spec = importlib.util.spec_from_file_location(task.replace("-", "_"), REPO / "tasks" / task / "baselines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def problem(task: str, dtype: torch.dtype, gen: torch.Generator) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """Four sequences of 1 to 1025 pages scattered over a larger cache; for the prefill, 1 to 9 queries each."""
    lengths = torch.tensor([1, 37, 300, 1025])
    B, N = len(lengths), int(lengths.sum())
    P = N + 100
    t = {"kv_indptr": torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).int(),
         "kv_indices": torch.randperm(P, generator=gen)[:N].int()}

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype)

    if task == "gqa-paged-decode":
        dims = {"B": B, "Hq": 32, "Hkv": 4, "D": 128, "N": N, "P": P}
        t |= {"q": normal(B, 32, 128), "k_cache": normal(P, 1, 4, 128), "v_cache": normal(P, 1, 4, 128)}
    else:
        runs = torch.tensor([1, 1, 1, 1] if task == "mla-paged-decode" else [1, 5, 9, 7])
        Q = int(runs.sum())
        dims = {"B": B, "H": 16, "Dckv": 512, "Dkpe": 64, "Q": Q, "N": N, "P": P}
        t |= {"q_nope": normal(Q, 16, 512), "q_pe": normal(Q, 16, 64), "ckv_cache": normal(P, 1, 512),
              "kpe_cache": normal(P, 1, 64), "qo_indptr": torch.cat([torch.zeros(1, dtype=torch.long),
                                                                     runs.cumsum(0)]).int()}
    return {n: v.cuda() for n, v in t.items()}, dims


def main() -> int:
    import flashinfer

    print(f"flashinfer {flashinfer.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    failed = 0
    for task, (fi_name, torch_name, out) in PAIRS.items():
        toml = tomllib.loads((REPO / "tasks" / task / "task.toml").read_text())
        for type_name in sorted({w["types"]["T"] for w in toml["workload"]}):
            m = load(task)
            inputs, dims = problem(task, getattr(torch, type_name), torch.Generator().manual_seed(1))
            try:
                t0 = time.time()
                got = getattr(m, fi_name)(dict(inputs), dict(dims))
                torch.cuda.synchronize()
                first = time.time() - t0
                want = getattr(m, torch_name)(dict(inputs), dict(dims))
                err = float((got[out].float() - want[out].float()).norm() / want[out].float().norm())
                lse = float((got["lse"].float() - want["lse"].float()).abs().max())
                entry = next(iter(m._wrappers.values()))
                backend = getattr(entry[0] if isinstance(entry, tuple) else entry, "_backend", "?")
                ok = err < 2e-2 and lse < 5e-2
                failed += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {task} {type_name}: {out} rel err {err:.1e}, lse max diff {lse:.1e}"
                      f" (backend {backend}; first call {first:.0f} s with its JIT compile)")
            except Exception as exc:
                failed += 1
                print(f"FAIL {task} {type_name}: {type(exc).__name__}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
INNER

du -sh "$wheel" "${extras[@]}" .device/flashinfer-[0-9]*
echo "working tree: $((tree / 1024 / 1024)) MiB; each folder below fits beside it in one call's 64 MiB"
echo "Staged flashinfer-python $version in $parts folder(s). Make these device calls back to back on one machine"
echo "(each within 30 s of the last), then the runs that use FlashInfer (bench/h200_cuda.sh installs it too):"
for k in $(seq 1 $((parts - 1))); do
  echo "  $k) carry [\".device/flashinfer-$k\"]  command:" \
    "mkdir -p /root/fi-stage && cp .device/flashinfer-$k/* /root/fi-stage/"
done
echo "  $parts) carry [\"$last\"]  command: bash $last/install.sh"
echo "If the machine was given back in between, start again from call 1."
