"""A CUDA kernel's header as a file that MLX's source includes (ksearch_worker.header_file): the file holds the
header exactly, is named by its content, is written again when removed or changed, lives only in a private
directory, and compiler output gets the header's own name back. The include line is also run through a real
C preprocessor where one is installed: MLX's NVRTC reads it the same way."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ksearch_worker import header_file

HEADER = "namespace k {\n__device__ int twice(int x) { return 2 * x; }\n}\n"


def included_path(line: str) -> str:
    assert line.startswith('#include "') and line.endswith('"\n'), line
    return line[len('#include "'):-2]


def test_the_header_becomes_one_include_of_a_file_holding_it(tmp_path: Path) -> None:
    d = str(tmp_path / "h")
    line = header_file.by_include(HEADER, d)
    path = included_path(line)
    assert os.path.dirname(path) == d
    assert Path(path).read_text() == HEADER
    assert os.stat(d).st_mode & 0o777 == 0o700
    assert header_file.by_include(HEADER, d) == line, "the same content, the same file"
    other = header_file.by_include(HEADER + "// v2\n", d)
    assert other != line, "other content, another name: MLX's cache key changes with it"
    assert Path(included_path(other)).read_text() == HEADER + "// v2\n"
    assert header_file.by_include("", d) == "", "no header, nothing to include"


def test_a_removed_or_altered_file_is_written_again(tmp_path: Path) -> None:
    d = str(tmp_path)
    os.chmod(d, 0o700)
    path = included_path(header_file.by_include(HEADER, d))
    os.remove(path)
    assert included_path(header_file.by_include(HEADER, d)) == path
    assert Path(path).read_text() == HEADER
    Path(path).write_text("#error altered\n")
    header_file.by_include(HEADER, d)
    assert Path(path).read_text() == HEADER
    assert [p for p in os.listdir(d) if p.endswith(".tmp")] == [], "no temporary file left behind"


def test_no_private_directory_means_the_header_itself(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)  # others could read it, or with 0o777 swap the file before NVRTC reads it
    assert header_file.by_include(HEADER, str(shared)) == HEADER
    assert header_file.by_include(HEADER, str(tmp_path / 'q"uote')) == HEADER, "not writable in a C string"
    target = tmp_path / "real"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert header_file.by_include(HEADER, str(link)) == HEADER, "a symbolic link is not the user's directory"
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert header_file.by_include(HEADER, str(blocker)) == HEADER


def test_compiler_messages_name_the_header_again(tmp_path: Path) -> None:
    d = str(tmp_path / "h")
    path = included_path(header_file.by_include(HEADER, d))
    msg = f"{path}(2): error: identifier \"y\" is undefined\n{path}(3): note"
    assert header_file.plain_path(msg, HEADER, "decode.cuh", d) == \
        "decode.cuh(2): error: identifier \"y\" is undefined\ndecode.cuh(3): note"
    assert header_file.plain_path("no path here", HEADER, "decode.cuh", d) == "no path here"


def test_the_default_directory_is_the_users_own() -> None:
    d = header_file.header_directory()
    assert d.endswith(f"ksearch-mlx-headers-{os.getuid()}")


@pytest.mark.skipif(shutil.which("cpp") is None, reason="no C preprocessor")
def test_a_preprocessor_reads_the_include_as_the_header(tmp_path: Path) -> None:
    line = header_file.by_include(HEADER, str(tmp_path / "h"))
    src = tmp_path / "k.cu"
    src.write_text(line + "int after;\n")
    out = subprocess.run(["cpp", "-P", str(src)], capture_output=True, text=True, check=True).stdout
    assert "__device__ int twice(int x) { return 2 * x; }" in out and "int after;" in out
