"""K-Search's score of cuda-target evaluations: per candidate, the mean over the task's feedback workloads (the
held-out ones reported apart) of baseline time / candidate time, the baseline FlashInfer's where it ran, else
the task's PyTorch baseline (each workload against the preferred one timed there; named in the result, with
why FlashInfer was not timed). A workload the candidate
did not pass scores 0, as K-Search counts a failed workload; a passed workload whose baseline was not timed is
left out of the mean (and counted apart); with no baseline timed at all there is no score (`not_scored`).

    python3 bench/cuda_score.py RESULTS.jsonl > SCORES.json

RESULTS.jsonl: the lines bench/h200_cuda.sh records (`{name, command, wall_s, result}`, result the last line
of `ksearch eval --json`). The published fractions of FlashInfer's speed it compares with (K-Search, H100, 120
iterations): GQA paged decode 76.0%, MLA paged decode 47.1%, MLA paged prefill 57.4%.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PUBLISHED = {"gqa-paged-decode": 0.760, "mla-paged-decode": 0.471, "mla-paged-prefill": 0.574}


def _choice(names: list[str]) -> list[str]:
    """Baselines in the order they are preferred: FlashInfer's, then PyTorch's, then any other."""
    return sorted(names, key=lambda b: (not b.startswith("flashinfer"), not b.startswith("torch"), b))


def score(result: dict[str, Any]) -> dict[str, Any]:
    rows = result.get("workloads") or []
    names = _choice(sorted({b for r in rows for b in (r.get("baselines") or {})}))
    out: dict[str, Any] = {"task": result.get("task"), "candidate": result.get("name"), "hash": result.get("candidate"),
                           "baseline": names[0] if names else None, "workloads": {}}
    unavailable = {b: why for r in rows for b, why in (r.get("baselines_unavailable") or {}).items()}
    if unavailable:
        out["baselines_not_timed"] = unavailable
    if not names:
        # No baseline ran anywhere: there is nothing to score against (not a score of 0).
        out["not_scored"] = "no baseline was timed on any workload" + (f": {unavailable}" if unavailable else "")
    used: set[str] = set()
    for part in ("feedback", "held_out"):
        ratios = []
        for r in rows:
            if bool(r.get("held_out")) != (part == "held_out"):
                continue
            timed = r.get("baselines") or {}
            # Each workload against the preferred baseline timed there (FlashInfer may be refused on some).
            baseline = next((b for b in names if timed.get(b)), None)
            t, base = r.get("median_s"), timed.get(baseline or "")
            ratio: float | None
            if r.get("status") != "passed":
                ratio = 0.0  # K-Search counts a failed workload as 0
            elif t and base:
                ratio = base / t
            else:
                ratio = None  # passed, but no baseline was timed here: left out of the mean, said so
            if ratio is not None and baseline and part == "feedback":
                used.add(baseline)
            out["workloads"][r["workload"]] = {"status": r.get("status"), "median_s": t, "baseline": baseline,
                                               "baseline_s": base,
                                               "baseline_over_candidate": None if ratio is None else round(ratio, 4)}
            if ratio is not None:
                ratios.append(ratio)
        out[f"score_{part}"] = round(sum(ratios) / len(ratios), 4) if ratios and names else None
        out[f"scored_{part}_workloads"] = len(ratios) if names else 0
    out["baselines_used"] = sorted(used)
    published = PUBLISHED.get(str(result.get("task")))
    # K-Search's fractions are of FlashInfer's speed: compared only when FlashInfer is what every workload used.
    if published is not None and used and all(b.startswith("flashinfer") for b in used):
        out["k_search_published"] = published
        out["reaches_published"] = (out["score_feedback"] or 0.0) >= published
    return out


def main() -> None:
    scores = []
    with open(sys.argv[1]) as f:
        for line in f:
            entry = json.loads(line)
            result = entry.get("result") or {}
            if isinstance(result, dict) and result.get("target") == "cuda" and result.get("workloads"):
                scores.append({"name": entry.get("name"), **score(result)})
    json.dump({"scores": scores}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
