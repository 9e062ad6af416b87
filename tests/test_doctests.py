"""Every docstring example in the library (and the shared benchmark helpers) runs and is right."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import torchfrag


def _modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(torchfrag.__path__, "torchfrag.")]
    return ["torchfrag", *sorted(names), "benchmarks._common", "benchmarks.learning"]


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
