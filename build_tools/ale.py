"""Build flags for the Atari family: headers of the pinned ALE, no ALE library.

``torchfrag._C`` runs the ALE C++ engine that the installed ``ale-py`` wheel
already ships (its ``ale::ALEInterface`` symbols are exported).  Compiling
against it needs the headers of exactly that version, which only its source
distribution carries.  This module:

1. downloads the ``ale-py`` sdist from the package registry with pip (once;
   the tarball is cached under ``build/``), checks its SHA-256,
2. extracts only the headers of ``src/ale/`` and generates ``version.hpp``
   from ``version.hpp.in``,
3. returns the include directory.

No ALE library is linked: the symbols stay undefined in ``_C`` and are
resolved at import time from ``ale_py/_ale_py*.so``, which
``torchfrag/_preload/ale.py`` loads with ``RTLD_GLOBAL`` after checking that
the installed ``ale-py`` is this same version.  That works for editable and
normal installs alike, with no hard-coded path in the binary.

``TORCHFRAG_ALE_SDIST=/path/to/ale_py-<version>.tar.gz`` uses a local copy of
the sdist instead of downloading it (its hash is still checked).
"""
from __future__ import annotations

import glob
import os
import shutil
import tarfile

from build_tools import _sdist

# The ale-py version the extension is compiled for; torchfrag/_preload/ale.py
# refuses to load any other (the C++ ABI of ALE is not stable across versions).
ALE_VERSION = "0.12.1"
# SHA-256 of ale_py-0.12.1.tar.gz as served by the registry.
ALE_SDIST_SHA256 = "c503d574c5983e1063b451201ccb779d935919c0f6bf116fb0f4f8aa4c86d249"

_HEADER_SUFFIXES = (".hpp", ".hxx", ".h")


def _download_sdist(cache_dir: str) -> str:
    """Return the path of the verified sdist, downloading it if needed."""
    return _sdist.fetch(f"ale-py=={ALE_VERSION}", f"ale_py-{ALE_VERSION}.tar.gz",
                        ALE_SDIST_SHA256, cache_dir, "TORCHFRAG_ALE_SDIST", "the ALE headers")


def _extract_headers(sdist: str, include_dir: str) -> None:
    """Extract src/ale/**/*.{hpp,hxx,h} to include_dir/ale and write version.hpp."""
    prefix = f"ale_py-{ALE_VERSION}/src/"
    tmp = include_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    template = None
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith(prefix + "ale/"):
                continue
            rel = member.name[len(prefix):]
            if rel == "ale/version.hpp.in":
                template = tar.extractfile(member).read().decode()
                continue
            if not rel.endswith(_HEADER_SUFFIXES) or ".." in rel.split("/"):
                continue
            dest = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as out:
                out.write(tar.extractfile(member).read())
    if template is None:
        raise SystemExit(f"{sdist} has no src/ale/version.hpp.in")
    major, minor, patch = ALE_VERSION.split(".")
    for key, value in {"ALE_VERSION": ALE_VERSION, "ALE_VERSION_MAJOR": major,
                       "ALE_VERSION_MINOR": minor, "ALE_VERSION_PATCH": patch,
                       "ALE_VERSION_GIT_SHA": ""}.items():
        template = template.replace(f"@{key}@", value)
    # ale_interface.hpp includes "version.hpp" relative to its own folder.
    with open(os.path.join(tmp, "ale", "version.hpp"), "w") as f:
        f.write(template)
    shutil.rmtree(include_dir, ignore_errors=True)
    os.replace(tmp, include_dir)


def include_dir(build_temp: str) -> str:
    """Directory holding ``ale/ale_interface.hpp`` of the pinned version."""
    cache = os.path.join(build_temp, "ale")
    inc = os.path.join(cache, f"include-{ALE_VERSION}")
    stamp = os.path.join(inc, ".complete")
    if not os.path.isfile(stamp):
        _extract_headers(_download_sdist(cache), inc)
        with open(stamp, "w") as f:
            f.write(ALE_SDIST_SHA256 + "\n")
    return inc


def ext_args(build_temp: str) -> dict:
    """Flags merged into the torchfrag._C extension by setup.py."""
    inc = include_dir(build_temp)
    # Sources that include ALE headers; listed so they are compiled even if
    # setup.py's own glob changes.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sources = sorted(os.path.relpath(p, root)
                     for p in glob.glob(os.path.join(root, "csrc", "envs", "atari*.cpp")))
    return {
        "sources": sources,
        "include_dirs": [inc],
        "define_macros": [("TORCHFRAG_ALE_VERSION", f'"{ALE_VERSION}"')],
    }
