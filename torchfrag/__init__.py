"""torchfrag: fast C++ environment pools and fragmented dataflow graphs for TorchRL.

Subpackages are imported lazily so that ``import torchfrag`` stays cheap:

* :mod:`torchfrag.envs` - ``make``, ``list_envs``, ``spec``, the Gymnasium
  adapter and (with TorchRL) :class:`~torchfrag.envs.PoolEnv`.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {"envs", "collectors", "fragments", "graph", "policies", "runtime", "algos"}


_ATTRS = {"Fragment": "torchfrag.fragments", "capture": "torchfrag.graph"}


def __getattr__(name: str) -> Any:
    if name in _ATTRS:
        return getattr(importlib.import_module(_ATTRS[name]), name)
    if name in _LAZY:
        return importlib.import_module(f"torchfrag.{name}")
    raise AttributeError(f"module 'torchfrag' has no attribute {name!r}")
