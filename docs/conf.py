"""Sphinx configuration of the iglu_np documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` from the
repository root (the ``docs`` extra installs what it needs).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # document the checkout's iglu_np, not another install
sys.path.insert(0, str(Path(__file__).parent / "_ext"))

import iglu_np  # noqa: E402

project = "iglu_np"
author = "the iglu_np authors"
copyright = "2026, the iglu_np authors"
version = release = iglu_np.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
    "activation_pages",
    "mathml",
]
# Formulas are MathML written at build time (docs/_ext/mathml.py): the pages typeset
# their math with no script and no network.
html_math_renderer = "mathml"

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "data", "Thumbs.db", ".DS_Store"]
templates_path = []

# numpydoc: the classes list their members by hand (the activation objects' derivative
# methods are instance attributes that autodoc cannot see).
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
autodoc_typehints = "none"
autosummary_generate = False

myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

html_theme = "pydata_sphinx_theme"
html_title = f"iglu_np {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_show_sourcelink = False
