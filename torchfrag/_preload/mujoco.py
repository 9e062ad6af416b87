"""Load MuJoCo's shared library for ``torchfrag._C`` and check its version.

``torchfrag._C`` is compiled against the headers of one MuJoCo version
(:data:`MUJOCO_VERSION`) and needs exactly that library: MuJoCo's structs
change layout between versions, so a different library would corrupt memory
rather than fail cleanly.  :func:`preload` therefore compares the installed
wheel's version, loads ``libmujoco.so.<version>`` from it with
``RTLD_GLOBAL`` (so ``torchfrag._C`` binds to the very library the ``mujoco``
Python package uses) and asks the loaded library for its version.

It also tells the C++ tasks where Gymnasium's MuJoCo models are (and the
DeepMind Control Suite tasks where dm_control's suite is, ``TORCHFRAG_DMC_ASSETS``): the
environment variable ``TORCHFRAG_MUJOCO_ASSETS`` is set to
``<gymnasium>/envs/mujoco/assets`` unless the user already set it.  A task's
``xml_file`` option is resolved against that folder exactly as Gymnasium
resolves it (absolute, ``./``-relative and ``~`` paths are used as they are).
Neither ``mujoco`` nor ``gymnasium`` is imported here; both are only located.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os

from torchfrag._dmc_models import GENERATED_ENV_VAR, write_generated_models

MUJOCO_VERSION = "4.0.0"
ASSETS_ENV_VAR = "TORCHFRAG_MUJOCO_ASSETS"
DMC_ASSETS_ENV_VAR = "TORCHFRAG_DMC_ASSETS"

_library: ctypes.CDLL | None = None


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    if not spec.submodule_search_locations:
        # A module of that name shadows the package (a script named mujoco.py
        # whose folder is on sys.path, say).
        raise ImportError(f"'{name}' resolves to {spec.origin}, which is not the {name} package; "
                          "rename that file or take its folder off sys.path")
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def gymnasium_assets_dir() -> str | None:
    """Folder of Gymnasium's MuJoCo XML models, or ``None`` without Gymnasium."""
    gym_dir = _package_dir("gymnasium")
    if gym_dir is None:
        return None
    return os.path.join(gym_dir, "envs", "mujoco", "assets")


def dmc_assets_dir() -> str | None:
    """Folder of the DeepMind Control Suite's XML models, or ``None`` without dm_control.

    dm_control is only located, never imported: it needs another MuJoCo than
    the one the pool links (the ``dmc`` extra installs it for its files).
    """
    dmc_dir = _package_dir("dm_control")
    if dmc_dir is None:
        return None
    return os.path.join(dmc_dir, "suite")


def preload() -> None:
    """Check the mujoco version and load ``libmujoco`` globally.

    Raises:
        ImportError: mujoco is missing, has another version than the one
            torchfrag was built for, or its library cannot be loaded.
    """
    global _library
    if _library is not None:
        return
    mujoco_dir = _package_dir("mujoco")
    if mujoco_dir is None:
        raise ImportError(
            f"torchfrag needs mujoco=={MUJOCO_VERSION} (its MuJoCo tasks are compiled against "
            f"it), but mujoco is not installed; run `pip install mujoco=={MUJOCO_VERSION}`"
        )
    try:
        installed = importlib.metadata.version("mujoco")
    except importlib.metadata.PackageNotFoundError:
        installed = "unknown"
    if installed != MUJOCO_VERSION:
        raise ImportError(
            f"torchfrag was built against mujoco {MUJOCO_VERSION} but mujoco {installed} is "
            f"installed; install mujoco=={MUJOCO_VERSION} or rebuild torchfrag against "
            f"mujoco {installed}"
        )
    path = os.path.join(mujoco_dir, f"libmujoco.so.{MUJOCO_VERSION}")
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
    except OSError as err:
        raise ImportError(f"cannot load MuJoCo's library {path}: {err}") from err
    lib.mj_versionString.restype = ctypes.c_char_p
    loaded = lib.mj_versionString().decode()
    if loaded != MUJOCO_VERSION:
        raise ImportError(
            f"torchfrag was built against mujoco {MUJOCO_VERSION} but {path} reports "
            f"version {loaded}; reinstall mujoco=={MUJOCO_VERSION}"
        )
    assets = gymnasium_assets_dir()
    if assets is not None:
        os.environ.setdefault(ASSETS_ENV_VAR, assets)
    dmc = dmc_assets_dir()
    if dmc is not None:
        os.environ.setdefault(DMC_ASSETS_ENV_VAR, dmc)
    if os.environ.get(DMC_ASSETS_ENV_VAR) and not os.environ.get(GENERATED_ENV_VAR):
        generated = write_generated_models(os.environ[DMC_ASSETS_ENV_VAR])
        if generated is not None:
            os.environ[GENERATED_ENV_VAR] = generated
    _library = lib
