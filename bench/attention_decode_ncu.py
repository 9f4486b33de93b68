"""Summarise an ncu CSV of bench/attention_decode_profile.py --ncu: the decode kernels' own GPU time per
configuration (split_us: a one-launch kernel, in clusters or merged by the block that sees every split's
signature, or the split pass of two launches, whose merge is combine_us; MLX's own kernels, such as copies or
the fills of a launch with init_value, under other_kernels) (median over its calls: 3 timed and 1 checked), MLX's SDPA beside them, the fastest configurations first.

Run: python3 bench/attention_decode_ncu.py NCU.csv RUN.json OUT.json TOP > CONFIGS.txt
OUT.json gets every configuration; CONFIGS.txt the TOP fastest as "--set A=1 --set B=2" lines
(for CONFIGS= of bench/attention_decode.sh). MLX names an instantiated kernel after its template values in
the order they are passed (RUN.json's template_order), which is how a row is matched to its configuration.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from collections import defaultdict


def rows(path: str) -> list[dict[str, str]]:
    with open(path) as f:
        lines = [line for line in f if not line.startswith("==")]
    return list(csv.DictReader(lines))


def main() -> None:
    csv_path, run_path, out_path, top = sys.argv[1:5]
    run = json.loads(open(run_path).read().strip().splitlines()[-1])
    times: dict[str, list[float]] = defaultdict(list)
    dram: dict[str, list[float]] = defaultdict(list)
    for r in rows(csv_path):
        value = float(r["Metric Value"].replace(",", ""))
        if r["Metric Name"] == "gpu__time_duration.sum":
            times[r["Kernel Name"]].append(value / 1e3)  # µs
        elif r["Metric Name"] == "dram__bytes_read.sum":
            dram[r["Kernel Name"]].append(value)

    def kernel_us(kernel: str, values: list[int]) -> tuple[float | None, float | None]:
        # custom_kernel_<kernel>_<candidate hash>_<template ints>_<dtype>
        name = re.compile(f"custom_kernel_{kernel}_[0-9a-f]+_" + "_".join(str(v) for v in values) + "_")
        hits = [n for n in times if name.search(n)]
        if len(hits) != 1:
            return None, None
        return statistics.median(times[hits[0]]), statistics.median(dram[hits[0]]) if dram[hits[0]] else None

    configs = []
    for c in run["configurations"]:
        t = run["dims"] | c["params"]  # every template value of the decode launches
        order = run["template_order"]  # the order the exported module passes template values in
        if t.get("NC", 0) > 0:  # one launch in clusters
            split_us, split_bytes = kernel_us("attn_decode", [t[n] for n in order["attn_decode"]])
            combine_us = 0.0
        elif t.get("LM", 0) > 0:  # one launch, merged by the block that sees every split's signature
            split_us, split_bytes = kernel_us("attn_decode_last", [t[n] for n in order["attn_decode_last"]])
            combine_us = 0.0
        else:
            split_us, split_bytes = kernel_us("attn_decode_split", [t[n] for n in order["attn_decode_split"]])
            combine_us, _ = kernel_us("attn_decode_combine", [t[n] for n in order["attn_decode_combine"]])
        total = split_us + combine_us if split_us is not None and combine_us is not None else None
        if c["path"] == "kernel" and total is None:
            print(f"no ncu row matches the kernels of {c['params']}", file=sys.stderr)
        configs.append({**c, "split_us": split_us, "combine_us": combine_us, "total_us": total,
                        "split_dram_bytes": split_bytes})
    sdpa_names = sorted(n for n in times if "sdpa" in n.lower() or "cudnn" in n.lower())
    sdpa = [v for n in sdpa_names for v in times[n]]
    calls = run["sdpa_calls"]
    ok = sorted((c for c in configs if c["total_us"] is not None and c["path"] == "kernel"),
                key=lambda c: c["total_us"])
    # Everything else ncu saw (MLX's own kernels: the fills of a launch with init_value, copies), median µs.
    other = {n: statistics.median(v) for n, v in times.items()
             if "custom_kernel_" not in n and n not in sdpa_names}
    json.dump({"run": {k: v for k, v in run.items() if k != "configurations"},
               "sdpa_kernels_us_per_call": sum(sdpa) / calls if sdpa else None, "sdpa_kernels": sdpa_names,
               "other_kernels": other,
               "configurations": ok + [c for c in configs if c not in ok]}, open(out_path, "w"), indent=1)
    for c in ok[: int(top)]:
        print(" ".join(f"--set {k}={c[k]}" for k in sorted(c) if k.isupper()))


if __name__ == "__main__":
    main()
