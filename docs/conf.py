"""Sphinx configuration for the torchfrag documentation.

Build with ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` from the repository root
(see ``docs/README.md``). The API reference pages are generated from each subpackage's ``__all__`` at build
time (``_ext/apiref.py``), the benchmark results page from ``benchmarks/results/*.json``
(``benchmarks/results_page.py``), and the tutorials are executed while the site is built.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))

import torchfrag  # noqa: E402

project = "torchfrag"
author = "the torchfrag developers"
copyright = "2026, the torchfrag developers"
release = version = torchfrag.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx_copybutton",
    "myst_nb",
    "apiref",
    "catalogue",
    "generated",
    "pytorch_sphinx_theme2",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "README.md", "_ext", "**.ipynb_checkpoints", "jupyter_execute"]
nitpicky = False

# Autodoc: members in source order, signatures with their types, no private names.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": True}
# Members we override without a docstring are not re-documented with the base class's text (Gymnasium's
# and TorchRL's docstrings are written for their own pages and do not all parse as reST here).
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# Library classes we inherit from (nn.Module, TensorDictModuleBase, EnvBase, gymnasium.Env) document
# themselves; showing their hundreds of members on our pages drowns ours.
autodoc_inherited_members = False

# No intersphinx: CI machines reach package registries only, and a -W build must not depend on fetching
# other projects' inventories.

# Tutorials (and the code cells of a few pages) run while the site is built, so what a reader sees is
# what this checkout prints. An error in a cell fails the build.
nb_execution_mode = os.environ.get("TORCHFRAG_DOCS_EXECUTE", "force")
nb_execution_timeout = 900
# Notebooks write files (tutorial 5 writes the module its workers import): in a scratch folder, not docs/.
nb_execution_in_temp = True
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

import pytorch_sphinx_theme2  # noqa: E402

html_theme = "pytorch_sphinx_theme2"
html_theme_path = [pytorch_sphinx_theme2.get_html_theme_path()]
# The theme's navbar templates live beside its layout; pydata's template lookup needs them on the path.
# Ours first: the footer names this project, not the theme's owners.
templates_path = ["_templates", os.path.join(os.path.dirname(pytorch_sphinx_theme2.__file__), "templates")]
html_title = "torchfrag"
html_static_path = ["_static"]
html_css_files = ["torchfrag.css"]
html_theme_options = {
    "navbar_start": ["navbar-logo"],
    "logo": {"text": "torchfrag"},
    "show_lf_header": False,
    "show_lf_footer": False,
    "show_pytorch_org_link": False,
    "use_edit_page_button": False,
    "article_footer_items": [],
    "article_header_end": [],
    "secondary_sidebar_items": ["page-toc"],
    "pytorch_project": "docs",
}
html_show_sourcelink = False
html_context = {"default_mode": "light"}
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]
