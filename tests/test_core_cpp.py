"""The C++ core tested on its own: csrc/tests/test_core.cpp (scheduler, ring, wait policy).
wait policy).

Built here with the system compiler, plainly and under ThreadSanitizer and
AddressSanitizer+UBSan when the compiler has their runtimes.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "csrc", "tests", "test_core.cpp")
CXX = os.environ.get("CXX", "g++")

MODES = {
    "plain": ["-O2"],
    "thread": ["-O1", "-fsanitize=thread"],
    "address": ["-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"],
}


def _has_runtime(mode: str) -> bool:
    lib = {"thread": "libtsan.so", "address": "libasan.so"}.get(mode)
    if lib is None:
        return True
    out = subprocess.run([CXX, f"-print-file-name={lib}"], capture_output=True, text=True)
    return os.path.isabs(out.stdout.strip())


@pytest.mark.parametrize("mode", list(MODES))
def test_core_unit_tests(tmp_path, mode: str) -> None:
    if shutil.which(CXX) is None:
        pytest.skip(f"no C++ compiler ({CXX})")
    if not _has_runtime(mode):
        pytest.skip(f"the compiler has no {mode} sanitizer runtime")
    exe = tmp_path / f"test_core_{mode}"
    build = subprocess.run([CXX, "-std=c++17", "-g", "-Wall", "-Wextra", "-Werror", "-pthread",
                            *MODES[mode], SOURCE, "-o", str(exe)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-4000:]
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1", "ASAN_OPTIONS": "detect_leaks=1"}
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0 and "ALL PASSED" in run.stdout, run.stdout + run.stderr[-4000:]
    assert "ThreadSanitizer" not in run.stderr and "AddressSanitizer" not in run.stderr
    assert "runtime error" not in run.stderr
