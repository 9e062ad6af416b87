"""The docs site builds without a warning, runs the tutorials, and documents every public name.

The site is built once per session, as a reader would build it (``python -m sphinx -W``): every
tutorial notebook is executed during the build (an error in a cell fails it), so this file is also the
tutorials' test. The README's headline table and ``benchmarks/results/`` are checked against
``benchmarks/results_index.py``, the one place that says which result file is current.
"""
from __future__ import annotations

import glob
import importlib
import inspect
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))

pytest.importorskip("sphinx", reason="the docs tools come with the test extra")

from apiref import PACKAGES, data_doc, public_names  # noqa: E402

from benchmarks import results_index  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The built site (html folder); the build log is attached to a failure."""
    out = tmp_path_factory.mktemp("docs")
    env = {**os.environ, "MPLBACKEND": "Agg", "TORCHFRAG_DOCS_EXECUTE": "force",
           "PYTHONPATH": os.pathsep.join([ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           os.path.join(ROOT, "docs"), str(out / "html")],
                          capture_output=True, text=True, env=env, timeout=1800)
    problems = [line for line in proc.stderr.splitlines()
                if ("WARNING" in line or "ERROR" in line) and "IPKernelApp" not in line]
    assert proc.returncode == 0 and not problems, "docs build failed:\n" + "\n".join(problems or
                                                                                 proc.stderr.splitlines()[-40:])
    return str(out / "html")


def test_the_site_has_every_page(site: str) -> None:
    pages = {os.path.relpath(p, site) for p in glob.glob(os.path.join(site, "**", "*.html"), recursive=True)}
    for page in ["index.html", "install.html", "envs.html", "envs_catalogue.html", "gymnasium.html",
                 "torchrl.html", "device.html", "fragments.html", "own_algorithm.html", "policies.html",
                 "multi_machine.html", "security.html", "benchmarks.html", "results.html", "development.html"]:
        assert page in pages, page
    for notebook in glob.glob(os.path.join(ROOT, "tutorials", "*.ipynb")):
        assert f"tutorials/{os.path.basename(notebook)[:-6]}.html" in pages


def test_tutorials_ran_during_the_build(site: str) -> None:
    """Every code cell of every tutorial has run (execution counts set) and none raised."""
    executed = glob.glob(os.path.join(os.path.dirname(site), "jupyter_execute", "**", "*.ipynb"), recursive=True)
    names = {os.path.basename(p) for p in executed}
    assert {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "tutorials", "*.ipynb"))} <= names
    for path in executed:
        cells = [c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
        assert all(c.get("execution_count") for c in cells), path
        errors = [o for c in cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, (path, errors)


def _inventory(site: str) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with open(os.path.join(site, "objects.inv"), "rb") as f:
        inv = InventoryFile.load(f, "", os.path.join)
    return {name for kind, entries in inv.items() if kind.startswith("py:") for name in entries}


@pytest.mark.parametrize("package", list(PACKAGES))
def test_every_public_name_is_in_the_reference(site: str, package: str) -> None:
    documented = _inventory(site)
    missing = []
    for name in public_names(package):
        obj = getattr(importlib.import_module(package), name)
        homes = [p for p in PACKAGES if name in public_names(p)]
        if not any(f"{home}.{name}" in documented for home in homes):
            missing.append(name)
        doc = data_doc(package, name) if not (inspect.isclass(obj) or inspect.isroutine(obj)) else inspect.getdoc(obj)
        assert doc and doc.strip(), f"{package}.{name} has no docstring"
    assert not missing, f"{package}: not in the API reference: {missing}"


def test_every_subpackage_with_public_names_has_a_page() -> None:
    import pkgutil

    import torchfrag

    for mod in pkgutil.iter_modules(torchfrag.__path__):
        if not mod.ispkg or mod.name.startswith("_") or mod.name in {"conf"}:
            continue
        package = f"torchfrag.{mod.name}"
        if getattr(importlib.import_module(package), "__all__", None):
            assert package in PACKAGES, f"{package} exports names but has no reference page"


def test_readme_headline_table_is_the_generated_one() -> None:
    assert results_index.readme_table() == results_index.render_headline_table().strip(), (
        "the README's headline table differs from benchmarks/results/: run "
        "`python -m benchmarks.results_index --readme`")


def test_every_result_file_is_indexed_and_exists() -> None:
    on_disk = set(os.listdir(results_index.RESULTS))
    listed = results_index.listed_files()
    assert not on_disk - listed, f"result files no benchmark entry lists: {sorted(on_disk - listed)}"
    assert not listed - on_disk, f"listed result files that do not exist: {sorted(listed - on_disk)}"


def test_readme_is_short_and_links_resolve() -> None:
    import re

    text = open(os.path.join(ROOT, "README.md")).read()
    assert text.count("\n") <= 260, "the README should stay a front page; move detail into docs/"
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in target:
            assert os.path.exists(os.path.join(ROOT, target)), f"README links to a missing file: {target}"
