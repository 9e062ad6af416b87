"""Build flags for the Box2D family: Box2D 2.3 compiled into ``torchfrag._C``.

Gymnasium's Box2D envs run on the ``box2d`` package (pybox2d 2.3.10), a SWIG
wrapper around the Box2D 2.3 C++ engine.  The registry serves 2.3.10 only as
wheels; the newest ``box2d`` source distribution, 2.3.2, carries the same
Box2D 2.3 C++ tree (``Box2D/{Common,Collision,Dynamics}``; the ``box2d-py``
2.3.8 sdist holds byte-identical sources).  The alignment tests compare our
envs with Gymnasium on the 2.3.10 wheel bit for bit, which is what shows that
the engines agree.  This module:

1. downloads the ``box2d`` sdist from the registry with pip (once; cached under
   ``build/``), checks its SHA-256,
2. extracts the engine's ``.cpp``/``.h`` files (not the SWIG interface),
3. rewrites ``b2Assert``: pybox2d's version sets a Python error, which a worker
   thread without the GIL must not do; ours throws a C++ exception that the
   pool turns into a Python one on the caller's thread,
4. applies the speed patches of ``build_tools/_box2d_patches.py`` (same float
   operations, so the same bits: no clock reads for the unread step profile, a
   branch-free revolute-joint limit),
5. returns the sources, compiled into the extension with its flags (plain
   ``float``, no ``-ffast-math`` and no FMA contraction, as the wheel's build).

``TORCHFRAG_BOX2D_SDIST=/path/to/Box2D-<version>.tar.gz`` uses a local copy of
the sdist instead of downloading it (its hash is still checked).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import tarfile

from build_tools import _box2d_patches, _sdist

BOX2D_SDIST_VERSION = "2.3.2"
# SHA-256 of Box2D-2.3.2.tar.gz as served by the registry.
BOX2D_SDIST_SHA256 = "d1557dffdf9c1d6c796ec5df53e3d93227bb026c14b8411d22c295edaa2fb225"

_ENGINE_DIRS = ("Box2D/Common/", "Box2D/Collision/", "Box2D/Dynamics/")
# Bump when the extraction changes, so old caches are rebuilt.
_LAYOUT = "3"
_ASSERT_BLOCK = re.compile(r"#define USE_EXCEPTIONS\n.*?#endif\n", re.S)
_OUR_ASSERT = (
    "// torchfrag: Box2D runs on worker threads without the GIL, so a failed\n"
    "// assertion throws a C++ exception (the pool re-raises it in Python).\n"
    "#include <stdexcept>\n"
    "#define b2Assert(A) \\\n"
    "  do { if (!(A)) throw std::logic_error(\"Box2D assertion failed: \" #A); } while (0)\n"
)


def _extract_engine(sdist: str, root: str) -> None:
    """Extract the engine's sources under root/Box2D with our b2Assert."""
    prefix = f"Box2D-{BOX2D_SDIST_VERSION}/"
    tmp = root + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    patched = set()
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar.getmembers():
            rel = member.name[len(prefix):]
            if (not member.isfile() or not member.name.startswith(prefix)
                    or not (rel.startswith(_ENGINE_DIRS) or rel == "Box2D/Box2D.h")
                    or ".." in rel.split("/")
                    or not rel.endswith((".cpp", ".h"))):
                continue
            text = tar.extractfile(member).read().decode("latin-1")
            if rel == "Box2D/Common/b2Settings.h":
                text, count = _ASSERT_BLOCK.subn(_OUR_ASSERT, text)
                if count != 1:
                    raise SystemExit(f"{sdist}: b2Settings.h has no USE_EXCEPTIONS block")
            text = _box2d_patches.apply(rel, text)
            patched.add(rel)
            dest = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w", encoding="latin-1") as out:
                out.write(text)
    if not os.path.isfile(os.path.join(tmp, "Box2D", "Common", "b2Settings.h")):
        raise SystemExit(f"{sdist} has no Box2D/Common/b2Settings.h")
    missing = {p.path for p in _box2d_patches.PATCHES} - patched
    if missing:
        raise SystemExit(f"{sdist} lacks {sorted(missing)}, which the speed patches change")
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)


def source_root(build_temp: str) -> str:
    """Directory holding ``Box2D/Common/b2Settings.h`` and the engine's sources."""
    cache = os.path.join(build_temp, "box2d")
    root = os.path.join(cache, f"src-{BOX2D_SDIST_VERSION}")
    stamp = os.path.join(root, ".complete")
    # The stamp names the layout and the patches' digest: editing a patch re-extracts.
    layout = f"{_LAYOUT}-{_box2d_patches.digest()}"
    fresh = False
    if os.path.isfile(stamp):
        with open(stamp) as f:
            fresh = f.read().split()[-1:] == [layout]
    if not fresh:
        sdist = _sdist.fetch(f"box2d=={BOX2D_SDIST_VERSION}", f"Box2D-{BOX2D_SDIST_VERSION}.tar.gz",
                             BOX2D_SDIST_SHA256, cache, "TORCHFRAG_BOX2D_SDIST",
                             "the Box2D engine sources")
        _extract_engine(sdist, root)
        with open(stamp, "w") as f:
            f.write(f"{BOX2D_SDIST_SHA256} layout {layout}\n")
    return root


def ext_args(build_temp: str) -> dict:
    """Flags merged into the torchfrag._C extension by setup.py."""
    root = source_root(build_temp)
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # Relative paths keep the object files under build/ (setuptools mirrors them).
    sources = sorted(os.path.relpath(p, project)
                     for p in glob.glob(os.path.join(root, "Box2D", "**", "*.cpp"), recursive=True))
    return {"sources": sources, "include_dirs": [root]}
