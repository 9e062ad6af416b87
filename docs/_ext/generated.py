"""Sphinx extension: pages made from the checkout when the site is built.

* ``results.md`` from ``benchmarks/results/`` (``benchmarks.results_index``);
* ``tutorials/*.ipynb``: the notebooks of the top-level ``tutorials/`` folder, copied in so myst-nb runs
  them (they are the repository's, not the docs': users open them from ``tutorials/``).
"""
from __future__ import annotations

import glob
import os
import shutil
import sys
from typing import Any


def write_if_changed(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` unless it holds it already (so Sphinx does not rebuild the page)."""
    old = open(path).read() if os.path.exists(path) else None
    if old != text:
        with open(path, "w") as f:
            f.write(text)


def generate(app: Any) -> None:
    root = os.path.dirname(app.srcdir)
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.results_index import render_results_page

    write_if_changed(os.path.join(app.srcdir, "results.md"), render_results_page())
    out = os.path.join(app.srcdir, "tutorials")
    os.makedirs(out, exist_ok=True)
    for notebook in sorted(glob.glob(os.path.join(root, "tutorials", "*.ipynb"))):
        target = os.path.join(out, os.path.basename(notebook))
        if not os.path.exists(target) or open(notebook, "rb").read() != open(target, "rb").read():
            shutil.copyfile(notebook, target)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "version": "1"}
