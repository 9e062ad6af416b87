"""Import of the compiled core, after loading the libraries it links against."""
from __future__ import annotations

import importlib
import pkgutil

from torchfrag import _preload


def _load() -> object:
    # Each _preload module checks versions and loads one native library
    # (RTLD_GLOBAL) so that torchfrag._C finds its symbols.
    for info in sorted(pkgutil.iter_modules(_preload.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"torchfrag._preload.{info.name}")
        module.preload()
    try:
        from torchfrag import _C
    except ImportError as err:  # pragma: no cover - depends on the build
        raise ImportError(
            "torchfrag's C++ extension (torchfrag._C) is not built or failed to load: "
            f"{err}. Install with `pip install -c constraints.txt --no-build-isolation -e .`."
        ) from err
    return _C


C = _load()
