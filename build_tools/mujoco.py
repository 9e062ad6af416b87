"""Compiler and linker flags for the MuJoCo tasks (csrc/envs/mujoco*).

MuJoCo comes from the pinned ``mujoco`` wheel: its ``include/`` holds the C
headers and ``libmujoco.so.<version>`` the library.  The extension records
``libmujoco.so.<version>`` as a needed library and finds it through two
run-paths: ``$ORIGIN/../mujoco`` (a regular install, where ``torchfrag`` and
``mujoco`` sit side by side in site-packages) and the wheel's absolute folder
at build time (editable and in-place builds).  ``torchfrag/_preload/mujoco.py``
also loads that library before ``torchfrag._C`` and checks its version, so a
mismatch is reported clearly instead of as a missing-symbol error.

The folder of Gymnasium's MuJoCo assets at build time is compiled in as a
fallback for when ``TORCHFRAG_MUJOCO_ASSETS`` is unset (the preload sets it).
"""
from __future__ import annotations

import importlib.util
import os

MUJOCO_VERSION = "4.0.0"


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"building torchfrag needs the '{name}' package; install it with "
            f"`pip install -c constraints.txt {name}`"
        )
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def ext_args(build_temp: str) -> dict:
    """Flags that build the MuJoCo tasks against the installed mujoco wheel."""
    del build_temp  # nothing to generate
    mujoco_dir = _package_dir("mujoco")
    include_dir = os.path.join(mujoco_dir, "include")
    library = f"libmujoco.so.{MUJOCO_VERSION}"
    if not os.path.exists(os.path.join(include_dir, "mujoco", "mujoco.h")):
        raise RuntimeError(f"mujoco headers not found under {include_dir}")
    if not os.path.exists(os.path.join(mujoco_dir, library)):
        found = sorted(f for f in os.listdir(mujoco_dir) if f.startswith("libmujoco.so"))
        raise RuntimeError(
            f"torchfrag is pinned to mujoco {MUJOCO_VERSION} but {mujoco_dir} holds "
            f"{found or 'no libmujoco'}; install mujoco=={MUJOCO_VERSION}"
        )
    try:
        assets = os.path.join(_package_dir("gymnasium"), "envs", "mujoco", "assets")
    except RuntimeError:
        assets = ""
    return {
        "include_dirs": [include_dir],
        "library_dirs": [mujoco_dir],
        "extra_link_args": [
            f"-l:{library}",
            "-Wl,-rpath,$ORIGIN/../mujoco",
            f"-Wl,-rpath,{mujoco_dir}",
        ],
        "define_macros": [
            ("TORCHFRAG_MUJOCO_VERSION", f'"{MUJOCO_VERSION}"'),
            ("TORCHFRAG_MUJOCO_DEFAULT_ASSETS", f'"{assets}"'),
        ],
    }
