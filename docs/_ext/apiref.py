"""Sphinx extension: one API reference page per public subpackage, generated from its ``__all__``.

Every name a subpackage exports gets an ``autoclass``/``autofunction``/``autodata`` entry on that
subpackage's page, so a name added to ``__all__`` appears in the reference without editing the docs, and
``tests/test_docs.py`` can check that nothing public is missing. A name exported by two subpackages is
documented once, where it is defined, and cross-referenced from the other page.
"""
from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

from generated import write_if_changed

#: The public subpackages, in the order the reference lists them, each with a one-line summary.
PACKAGES: dict[str, str] = {
    "torchfrag.envs": "The C++ environment pool and its faces: raw pool, Gymnasium, dm_env and TorchRL.",
    "torchfrag.collectors": "A batched asynchronous collector over the pool.",
    "torchfrag.fragments": "TensorDict-in/TensorDict-out fragments a training loop is written with.",
    "torchfrag.graph": "torch.fx capture of a loop into a fragment graph.",
    "torchfrag.policies": "Distribution policies: where each fragment runs, and what crosses processes.",
    "torchfrag.runtime": "Running a placed graph: in process, over RPC, with checkpoints.",
    "torchfrag.algos": "PPO, A2C, DQN, SAC and IMPALA written as fragments over TorchRL losses.",
    "torchfrag.testing": "Test helpers for users' own suites: a simulated cluster of hosts.",
}


def public_names(package: str) -> list[str]:
    """The names ``package`` exports (its ``__all__``)."""
    return list(importlib.import_module(package).__all__)


def _home(obj: Any, package: str) -> str:
    """The public package that documents ``obj``: the one whose module tree defines it."""
    module = getattr(obj, "__module__", None) or ""
    for candidate in PACKAGES:
        if module == candidate or module.startswith(candidate + "."):
            return candidate
    return package


def data_doc(package: str, name: str) -> str:
    """The ``#:`` comment documenting a module-level constant of ``package`` (searched in its modules)."""
    from sphinx.pycode import ModuleAnalyzer

    mod = importlib.import_module(package)
    modules = [package] + [f"{package}.{m}" for m in _submodules(mod)]
    for module in modules:
        try:
            docs = ModuleAnalyzer.for_module(module).find_attr_docs()
        except Exception:  # a compiled or missing module: nothing to read
            continue
        for (_, attr), lines in docs.items():
            if attr == name:
                return "\n".join(lines).strip()
    return ""


def _submodules(mod: Any) -> list[str]:
    import pkgutil

    path = getattr(mod, "__path__", None)
    return [m.name for m in pkgutil.iter_modules(path)] if path else []


def _directive(obj: Any) -> str:
    if inspect.isclass(obj):
        return "autoclass"
    if inspect.isroutine(obj):
        return "autofunction"
    return "autodata"


def render_page(package: str) -> str:
    """The reStructuredText of ``package``'s reference page."""
    mod = importlib.import_module(package)
    title = f"``{package}``"
    lines = [title, "=" * len(title), "", f".. currentmodule:: {package}", ""]
    # The module's own docstring is the page's introduction; the one-line summary stands in without one.
    lines += [(inspect.getdoc(mod) or "").strip() or PACKAGES[package], ""]
    for name in mod.__all__:
        obj = getattr(mod, name)
        home = _home(obj, package)
        if home != package and name in getattr(importlib.import_module(home), "__all__", ()):
            lines += [f".. py:data:: {name}", "   :no-index:", "",
                      f"   Re-exported here; documented as :py:obj:`{home}.{name}`.", ""]
            continue
        directive = _directive(obj)
        if directive == "autodata":
            doc = data_doc(package, name) or f"A module-level constant of ``{package}``."
            lines += [f".. py:data:: {name}", "", *("   " + line for line in doc.splitlines()), ""]
            continue
        lines += [f".. {directive}:: {name}", ""]
    return "\n".join(lines)


def write_pages(app: Any) -> None:
    """Write ``api/<package>.rst`` for every public package (only when the text changed)."""
    out = os.path.join(app.srcdir, "api")
    os.makedirs(out, exist_ok=True)
    for package in PACKAGES:
        path = os.path.join(out, f"{package.split('.')[-1]}.rst")
        text = render_page(package)
        write_if_changed(path, text)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", write_pages)
    return {"parallel_read_safe": True, "version": "1"}
