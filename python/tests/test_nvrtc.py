"""The jailed NVRTC compile of mlx-cuda modules (nvrtc.py): MLX's headers read from its library, its module
names and cache layout, and the compile itself in the jail (NVRTC needs no GPU; the test packages install it)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ksearch_worker import jail, nvrtc

# A library shaped like libmlx's JIT sources: constexpr texts and their include names, two pointer arrays.
LIBRARY = r"""
constexpr char text_a[] = "// first\n#pragma once\n#define A 1\n";
constexpr char text_b[] = "// second\n#pragma once\n#define B 2\n";
constexpr char text_c[] = "// third\n#define C 3\n";
constexpr const char* names[] = {
  "mlx/backend/cuda/device/a.cuh", "mlx/backend/cuda/device/b.cuh", "mlx/backend/cuda/device/c.h"};
constexpr const char* texts[] = {text_a, text_b, text_c};
extern "C" const char* pick(int i, int which) { return which ? names[i] : texts[i]; }
"""


def _cxx() -> str:
    found = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if found is None:
        pytest.fail("a C++ compiler is needed (the CPU target and `ksearch check` need one too)")
    return found


def test_mlx_headers_are_read_from_the_library_file(tmp_path: Path) -> None:
    (tmp_path / "lib.cpp").write_text(LIBRARY)
    subprocess.run([_cxx(), "-shared", "-fPIC", "-O2", "lib.cpp", "-o", "libfake.so"], cwd=tmp_path, check=True)
    got = nvrtc.embedded_headers(str(tmp_path / "libfake.so"))
    assert got == [("mlx/backend/cuda/device/a.cuh", "// first\n#pragma once\n#define A 1\n"),
                   ("mlx/backend/cuda/device/b.cuh", "// second\n#pragma once\n#define B 2\n"),
                   ("mlx/backend/cuda/device/c.h", "// third\n#define C 3\n")]


def test_a_library_without_them_gives_none(tmp_path: Path) -> None:
    (tmp_path / "lib.cpp").write_text('extern "C" int f() { return 1; }\n')
    subprocess.run([_cxx(), "-shared", "-fPIC", "lib.cpp", "-o", "libplain.so"], cwd=tmp_path, check=True)
    assert nvrtc.embedded_headers(str(tmp_path / "libplain.so")) is None
    (tmp_path / "not-elf").write_bytes(b"#!/bin/sh\n")
    assert nvrtc.embedded_headers(str(tmp_path / "not-elf")) is None
    assert nvrtc.embedded_headers(str(tmp_path / "missing")) is None


def test_module_names_hash_the_source_as_std_hash_does(tmp_path: Path) -> None:
    sources = [b"", b"abc", b"namespace mlx::core::cu {\n__global__ void k() {}\n}\n", bytes(range(1, 256)) * 9]
    (tmp_path / "h.cpp").write_text(r"""
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary); std::stringstream s; s << f.rdbuf();
    std::printf("%zx\n", std::hash<std::string>{}(s.str()));
  }
}
""")
    subprocess.run([_cxx(), "-O1", "h.cpp", "-o", "h"], cwd=tmp_path, check=True)
    files = []
    for i, src in enumerate(sources):
        (tmp_path / f"s{i}").write_bytes(src)
        files.append(str(tmp_path / f"s{i}"))
    printed = subprocess.run([str(tmp_path / "h"), *files], capture_output=True, text=True, check=True).stdout.split()
    assert [nvrtc.module_name("custom_kernel_k_4", s) for s in sources] == [f"custom_kernel_k_4_{h}" for h in printed]


def test_long_module_names_are_split_into_folders_as_mlx_does() -> None:
    cache = Path("/c")
    assert nvrtc.module_path(cache, "m_1") == Path("/c/m_1.ptx")
    name = "x" * 245
    assert nvrtc.module_path(cache, name) == Path(f"/c/{name}.ptx")
    long = "a" * 245 + "b" * 245 + "c" * 7
    assert nvrtc.module_path(cache, long) == Path("/c") / ("a" * 245) / ("b" * 245) / ("c" * 7 + ".ptx")


def test_a_module_is_written_with_its_kernel_names(tmp_path: Path) -> None:
    path = nvrtc.write_module(tmp_path, "k_1f", b"\x7fELFcode", [("mlx::core::cu::k", "_ZN3mlx4core2cu1kEv")])
    assert path.read_bytes() == b"\x7fELFcode"
    assert path.with_suffix(".txt").read_text() == "mlx::core::cu::k\t_ZN3mlx4core2cu1kEv\n"
    assert sorted(os.listdir(tmp_path)) == ["k_1f.ptx", "k_1f.txt"]  # no temporary file left


def test_the_generated_source_is_read_exactly() -> None:
    source = b"#include \"x\"\n// ```\n__global__ void f() {}\n\n"
    printed = b"Generated source code for `custom_kernel_f_4`:\n```\n" + source + b"\n```\n"
    assert nvrtc.parse_generated(printed) == ("custom_kernel_f_4", source)
    for bad in (b"", b"Generated source code for `f`:\n```\nint x;\n", source):
        with pytest.raises(ValueError):
            nvrtc.parse_generated(bad)


def _libnvrtc() -> str:
    for site in sys.path:
        found = sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "lib", "libnvrtc.so.*")))
        if found:
            return found[0]
    pytest.fail("libnvrtc is missing: python/requirements-test.txt installs nvidia-cuda-nvrtc")


def _compiler(cache: Path, include: list[str], headers: list[tuple[str, str]]) -> nvrtc.Compiler:
    """A Compiler as the worker makes one, with MLX's part (its library, the GPU) given directly."""
    c = object.__new__(nvrtc.Compiler)
    c.cache, c._env, c.why, c.proven = cache, jail.env, None, False
    c._scratch = Path(tempfile.mkdtemp(prefix="ksearch-nvrtc-test-"))
    c.nvrtc, c.headers, c.arch, c.include = _libnvrtc(), headers, (9, 0), include
    return c


def test_modules_compile_in_the_jail_at_once_and_land_in_the_cache(tmp_path: Path) -> None:
    include = tmp_path / "include"
    (include / "lib").mkdir(parents=True)
    (include / "lib" / "scale.h").write_text("#define SCALE 2.0f\n")
    secret = tmp_path / "secret.h"
    secret.write_text("#define LEAK 1\n")
    secret.chmod(0o600)
    c = _compiler(tmp_path / "cache", [str(include)], [("mlx/backend/cuda/device/utils.cuh", "#define ONE 1.0f\n")])

    def job(name: str, body: str, files: dict[str, str] | None = None) -> nvrtc.Job:
        source = ('#include "mlx/backend/cuda/device/utils.cuh"\n#include <lib/scale.h>\n'
                  f'#include "/private/h.cuh"\nnamespace mlx::core::cu {{\n__global__ void {name}(float* out) {{\n'
                  f"{body}\n}}\n}}\n").encode()
        return nvrtc.Job(nvrtc.module_name(name, source), f"mlx::core::cu::{name}", source,
                         files if files is not None else {"/private/h.cuh": "#define TWO 2.0f\n"})

    good = job("custom_kernel_good", "out[0] = ONE + TWO * SCALE;")
    wrong = job("custom_kernel_wrong", "out[0] = undeclared;")
    leak = job("custom_kernel_leak", f'#include "{secret}"\nout[0] = LEAK;')
    done = c.compile([good, wrong, leak])
    assert done[good.module].code and done[good.module].lowered == "_ZN3mlx4core2cu18custom_kernel_goodEPf"
    path = nvrtc.module_path(c.cache, good.module)
    assert path.read_bytes() == done[good.module].code
    assert path.with_suffix(".txt").read_text() == "mlx::core::cu::custom_kernel_good\t" \
        "_ZN3mlx4core2cu18custom_kernel_goodEPf\n"
    assert done[wrong.module].code is None and "undeclared" in done[wrong.module].log
    assert not done[wrong.module].infrastructure and not c.cached(wrong.module)
    # A file outside what the jail may read does not reach the compiler, whatever the candidate names.
    assert done[leak.module].code is None and "cannot open source file" in done[leak.module].log
    assert not c.cached(leak.module)


def test_a_module_past_the_size_limit_is_the_candidates_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setattr(nvrtc, "MAX_MODULE_BYTES", 64 << 10)
    c = _compiler(tmp_path / "cache", [], [])
    source = (b"namespace mlx::core::cu {\n__device__ char big[1 << 20] = {1};\n"
              b"__global__ void custom_kernel_big(char* out) { out[0] = big[threadIdx.x]; }\n}\n")
    job = nvrtc.Job(nvrtc.module_name("custom_kernel_big", source), "mlx::core::cu::custom_kernel_big", source, {})
    done = c.compile([job])[job.module]
    assert done.code is None and not done.infrastructure and "more than the 65536" in done.log
    assert not c.cached(job.module)


def test_an_nvrtc_failure_that_is_not_the_programs_is_not_the_candidates(tmp_path: Path) -> None:
    c = _compiler(tmp_path / "cache", [], [])
    c.arch = (99, 9)  # no such architecture: NVRTC refuses the option, not the program
    source = b"namespace mlx::core::cu {\n__global__ void custom_kernel_ok(float* out) { out[0] = 1; }\n}\n"
    job = nvrtc.Job(nvrtc.module_name("custom_kernel_ok", source), "mlx::core::cu::custom_kernel_ok", source, {})
    done = c.compile([job])[job.module]
    assert done.code is None and done.infrastructure and not done.jail_broken, done
