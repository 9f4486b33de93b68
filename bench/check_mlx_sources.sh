#!/usr/bin/env bash
# `ksearch check` on MLX's own complete Metal sources: every `.metal` file under
# mlx/backend/metal/kernels of an MLX source checkout, checked as MLX builds it (-I the checkout's root).
# Apple's compiler builds all of them, so every error finding is a false rejection.
#
#   bench/check_mlx_sources.sh MLX_CHECKOUT [OUT.json]
#
# MLX's sources are not on PyPI (only wheels, whose headers tests/check_corpus.rs checks), so this needs a
# checkout made by hand and is not part of the tests. Prints each file's error count and first errors;
# writes a JSON record (machine, command, clang, per-file findings) when OUT is given.
set -euo pipefail
src="${1:?usage: bench/check_mlx_sources.sh MLX_CHECKOUT [OUT.json]}"
out="${2:-}"
here="$(cd "$(dirname "$0")/.." && pwd)"
# The newer of the release and debug builds, unless KSEARCH names one.
ksearch="${KSEARCH:-$(ls -t "$here"/target/release/ksearch "$here"/target/debug/ksearch 2>/dev/null | head -1)}"
[ -x "$ksearch" ] || { echo "build ksearch first (cargo build)" >&2; exit 2; }
src="$(cd "$src" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$src" && find mlx/backend/metal/kernels -name '*.metal' | sort) > "$tmp/files"
[ -s "$tmp/files" ] || { echo "$src: no mlx/backend/metal/kernels/*.metal" >&2; exit 2; }
n=0
while read -r f; do
  n=$((n + 1))
  (cd "$src" && "$ksearch" check "$f" -I "$src" --json > "$tmp/$n.json" 2> "$tmp/$n.err" || true)
done < "$tmp/files"
python3 - "$tmp" "$src" "$out" "$ksearch" <<'EOF'
import json, os, platform, subprocess, sys
tmp, src, out, ksearch = sys.argv[1:5]
files = open(os.path.join(tmp, "files")).read().split()
rows, rejected = [], 0
for n, f in enumerate(files, 1):
    try:
        findings = json.load(open(os.path.join(tmp, f"{n}.json")))["findings"]
    except (ValueError, KeyError):
        findings = [{"severity": "error", "code": "?", "line": 0,
                     "message": open(os.path.join(tmp, f"{n}.err")).read().strip()[:400]}]
    errors = [x for x in findings if x["severity"] == "error"]
    rejected += bool(errors)
    rows.append({"file": f, "errors": len(errors),
                 "first": [f"{x.get('file', f)}:{x['line']}: {x['code']} {x['message'][:160]}".replace(src + "/", "")
                           for x in errors[:3]]})
    print(f"{len(errors):4} {f}")
    for line in rows[-1]["first"]:
        print(f"       {line}")
print(f"{rejected} of {len(files)} MLX sources rejected ({100 * rejected / len(files):.1f}%)")
if out:
    clang = subprocess.run(["clang++", "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    head = subprocess.run(["git", "-C", src, "rev-parse", "--verify", "-q", "HEAD"], capture_output=True, text=True).stdout.strip()
    json.dump({"what": "ksearch check on MLX's complete Metal sources",
               "command": "bench/check_mlx_sources.sh MLX_CHECKOUT OUT.json",
               "mlx_commit": head or None, "machine": platform.platform(), "cpu_count": os.cpu_count(),
               "clang": clang[0] if clang else None, "files": len(files), "rejected": rejected,
               "per_file": rows}, open(out, "w"), indent=1)
EOF
