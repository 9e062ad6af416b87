"""Builds torchfrag._C (the C++ env pool) with pybind11; no libtorch involved.

Native dependencies (ALE, MuJoCo) contribute their flags through the modules
in ``build_tools/``.  ``TORCHFRAG_SANITIZE=address|thread`` builds an
instrumented extension for the sanitizer test scripts.
"""
from __future__ import annotations

import glob
import importlib
import os
import sys

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)

ParallelCompile("TORCHFRAG_BUILD_JOBS", default=0).install()


def _native_args() -> dict:
    """Merge the flags each build_tools module contributes."""
    merged: dict[str, list] = {}
    build_temp = os.path.join(ROOT, "build", "native")
    os.makedirs(build_temp, exist_ok=True)
    for path in sorted(glob.glob(os.path.join(ROOT, "build_tools", "[a-z]*.py"))):
        module = importlib.import_module(f"build_tools.{os.path.basename(path)[:-3]}")
        if not hasattr(module, "ext_args"):
            continue
        for key, value in module.ext_args(build_temp).items():
            merged.setdefault(key, []).extend(value)
    return merged


def _sanitizer_flags() -> tuple[list[str], list[str]]:
    mode = os.environ.get("TORCHFRAG_SANITIZE", "").strip()
    if not mode:
        return [], []
    if mode == "address":
        flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    elif mode == "thread":
        flags = ["-fsanitize=thread", "-fno-omit-frame-pointer"]
    else:
        raise SystemExit(f"TORCHFRAG_SANITIZE must be 'address' or 'thread', got {mode!r}")
    return flags + ["-O1", "-g"], flags


class AtomicBuildExt(build_ext):
    """build_ext whose ``--inplace`` copy replaces the .so atomically.

    The default copy truncates the file in place, which crashes any running
    process that has the old extension mapped (tests, benchmarks).
    """

    def copy_file(self, infile, outfile, *args, **kwargs):  # noqa: D102
        if not str(outfile).endswith(".so"):
            return super().copy_file(infile, outfile, *args, **kwargs)
        import shutil

        tmp = f"{outfile}.tmp-{os.getpid()}"
        shutil.copyfile(infile, tmp)
        shutil.copymode(infile, tmp)
        os.replace(tmp, outfile)
        return outfile, 1


native = _native_args()
san_compile, san_link = _sanitizer_flags()
sources = sorted(glob.glob("csrc/*.cpp")) + sorted(glob.glob("csrc/envs/*.cpp"))
sources += [s for s in native.pop("sources", []) if s not in sources]

ext = Pybind11Extension(
    "torchfrag._C",
    sources,
    include_dirs=["csrc"] + native.pop("include_dirs", []),
    library_dirs=native.pop("library_dirs", []),
    libraries=native.pop("libraries", []),
    define_macros=native.pop("define_macros", []),
    extra_compile_args=(["-O3"] if not san_compile else []) + san_compile
    + native.pop("extra_compile_args", []),
    extra_link_args=san_link + native.pop("extra_link_args", []),
    cxx_std=17,
    # Header edits must trigger a rebuild too.
    depends=sorted(glob.glob("csrc/**/*.h", recursive=True)),
)

setup(ext_modules=[ext], cmdclass={"build_ext": AtomicBuildExt})
