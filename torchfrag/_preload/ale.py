"""Load the ALE engine shipped by the installed ``ale-py`` wheel.

``torchfrag._C`` is compiled against the headers of one ``ale-py`` version and
leaves the ``ale::ALEInterface`` symbols undefined; they are resolved from
``ale_py/_ale_py*.so``.  The C++ ABI of ALE changes between versions, so any
other version is refused here with a clear message instead of crashing later.
"""
from __future__ import annotations

import ctypes
import glob
import os

# Must equal build_tools/ale.py's ALE_VERSION (a test checks that they agree).
ALE_VERSION = "0.12.1"

_handle: ctypes.CDLL | None = None


def library_path() -> str:
    """Path of the ``_ale_py`` extension module of the installed ale-py."""
    import ale_py

    folder = os.path.dirname(os.path.abspath(ale_py.__file__))
    found = sorted(glob.glob(os.path.join(folder, "_ale_py*.so")))
    if not found:
        raise ImportError(f"ale-py is installed at {folder} but has no _ale_py*.so library")
    return found[0]


def preload() -> None:
    """Check the ale-py version and load its library with ``RTLD_GLOBAL``."""
    global _handle
    if _handle is not None:
        return
    try:
        import ale_py
    except ImportError as err:
        raise ImportError(
            f"torchfrag needs ale-py=={ALE_VERSION} (its Atari envs run the ALE engine that "
            f"ale-py ships), but ale-py could not be imported: {err}. "
            f"Install it with `pip install ale-py=={ALE_VERSION}`."
        ) from err
    installed = getattr(ale_py, "__version__", "unknown")
    if installed != ALE_VERSION:
        raise ImportError(
            f"torchfrag was built against ale-py {ALE_VERSION} but ale-py {installed} is "
            f"installed; the ALE C++ ABI differs between versions. Install "
            f"`ale-py=={ALE_VERSION}` or rebuild torchfrag against ale-py {installed}."
        )
    # Importing ale_py already loaded the library privately (RTLD_LOCAL);
    # loading it again by path with RTLD_GLOBAL promotes the same mapping so
    # that torchfrag._C's undefined ALE symbols resolve to it.
    _handle = ctypes.CDLL(library_path(), mode=os.RTLD_GLOBAL)
