"""A CUDA kernel's header handed to `mx.fast.cuda_kernel` as one `#include` line of a file that holds it.

MLX copies and hashes a custom kernel's whole source, header included, at every call (MLX 0.32.4,
mlx/backend/cuda/custom_kernel.cpp: `std::hash` of the source in `CustomKernel::eval_gpu`, to find the
compiled module). Measured on the H200 (bench/results/h200-attention-decode-header-file-20261130.json), each
KB of header costs a call about 0.24 µs of host time: with the attention decode's 19.7 KB header inline a call
took 23.0 µs, with the header as a file 16.8 µs. NVRTC reads an included file from disk only when it
compiles, so a header that is a file costs a call nothing. The file's name is the SHA-256 of its content: MLX keys its compiled code (in memory and in
its on-disk cache) by the source it is handed, which names the file, so a changed header is a new key and
never meets code compiled from the old one.

The files live in a directory of the user's own (mode 0700); where that cannot be had, or the path could
not be written inside a C string, the header is handed over as it is: slower, never wrong. Compiler
messages then name the file's path; `plain_path` lets a caller give them the header's own name back.

`ksearch export` embeds this file's code in the CUDA modules it writes: standard library only.
"""

import hashlib
import os
import stat
import tempfile

_PREFIX = "ksearch-mlx-headers-"


def header_directory() -> str:
    """Where this user's header files go (created on first use)."""
    return os.path.join(tempfile.gettempdir(), f"{_PREFIX}{os.getuid()}")


def _private_directory(path: str) -> bool:
    """The directory exists (made if need be), is a real directory of this user's, and only theirs."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and (st.st_mode & 0o077) == 0


def _file_of(header: str, directory: str) -> str:
    return os.path.join(directory, hashlib.sha256(header.encode()).hexdigest()[:32] + ".cuh")


def header_path(header: str, directory: str | None = None) -> str | None:
    """The file holding `header` (written once, atomically), or None where no safe file can be had."""
    directory = directory or header_directory()
    if any(c in directory for c in '"\\\n') or not _private_directory(directory):
        return None
    data = header.encode()
    path = _file_of(header, directory)
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return path
    except OSError:
        pass
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # readers see the whole file or none
    except OSError:
        return None
    return path


def by_include(header: str, directory: str | None = None) -> str:
    """What to hand MLX as the header: `#include "<file>"` and a newline, or the header itself (empty, or
    no safe file)."""
    if not header:
        return header
    path = header_path(header, directory)
    return header if path is None else f'#include "{path}"\n'


def plain_path(text: str, header: str, name: str, directory: str | None = None) -> str:
    """Compiler output with the header file's path replaced by `name` (the header's file in the plan): the
    line numbers it gives are the header's own."""
    if not header:
        return text
    return text.replace(_file_of(header, directory or header_directory()), name)
