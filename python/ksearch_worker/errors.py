"""The one exception type that becomes an `ok: false` reply."""

from __future__ import annotations


class WorkerError(Exception):
    """A request the worker refuses, with the `error.kind` the Rust side dispatches on."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
