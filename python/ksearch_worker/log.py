"""Lines on the worker's stderr, which the Rust side reads: phases for the progress display
(`src/progress.rs`) and debug lines it logs (`ksearch -vv`)."""

from __future__ import annotations

import sys


def say(line: str) -> None:
    """One `ksearch-worker: ...` line. Never raises: candidate code shares this stderr, and a log line must
    never cost a reply."""
    try:
        print(f"ksearch-worker: {line}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
