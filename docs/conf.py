"""Sphinx configuration of the lightning-gnn-dist documentation (``make docs``).

The guide is MyST Markdown (``docs/**/*.md``); the API reference is generated from the docstrings
(autodoc + autosummary, Google style through napoleon, as PyG and Lightning write them). Three
folders are generated on every build and git-ignored: ``docs/api/`` (one page per subpackage,
listing its ``__all__``), ``docs/benchmarks/results/`` (the committed benchmark tables of
``benchmarks/results/*.md``, copied so the site shows them next to the guide) and
``docs/_generated/`` (the ``--help`` text of the command line).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("LGD_PROGRESS", "0")

project = "lightning-gnn-dist"
author = "lightning-gnn-dist developers"
copyright = "2026, lightning-gnn-dist developers"
release = version = importlib.import_module("lightning_gnn_dist").__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.mathjax",
    "sphinx_copybutton",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# -- MyST -------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # `[text](page.md#a-heading)` links work as on GitHub

# -- API reference ----------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
# Overridden Lightning hooks without a docstring of their own would show Lightning's text (and its
# markup); say nothing instead.
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
add_module_names = False
# With `sphinx -n` (nitpicky), report unresolved references to this package only: torch, PyG and
# Lightning types have no inventory here (no network for intersphinx).
nitpick_ignore_regex = [(r"py:.*", r"(?!lightning_gnn_dist\b).*"), (r"py:.*", r".*\._\w+$")]

# -- HTML -------------------------------------------------------------------------------------
html_theme = "sphinx_rtd_theme"  # the look of PyG's site (its pyg_sphinx_theme derives from it)
html_title = f"{project} {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme_options = {"navigation_depth": 3, "collapse_navigation": False}
copybutton_prompt_text = r"\$ "
copybutton_prompt_is_regexp = True

# The subpackages, top (Lightning-facing) to bottom; each page lists the package's ``__all__``.
API_PACKAGES = [
    ("lightning_gnn_dist", "Top level: strategy, datamodule, callbacks, reference module"),
    ("lightning_gnn_dist.cli", "Command line"),
    ("lightning_gnn_dist.testing", "The emulated cluster"),
    ("lightning_gnn_dist.lightning", "Lightning integration"),
    ("lightning_gnn_dist.plots", "Plots"),
    ("lightning_gnn_dist.nn", "Distributed layers and models"),
    ("lightning_gnn_dist.loaders", "Mini-batch loaders"),
    ("lightning_gnn_dist.costmodel", "Cost model"),
    ("lightning_gnn_dist.comm", "Communication (exchange modes)"),
    ("lightning_gnn_dist.partition", "Partitioning"),
    ("lightning_gnn_dist.data", "Datasets and per-rank data"),
    ("lightning_gnn_dist.utils", "Utilities"),
]

# Modules documented whole (their public names are not re-exported by a package ``__all__``).
API_MODULES = {
    "lightning_gnn_dist.lightning": [
        "compat",
        "strategy",
        "datamodule",
        "callbacks",
        "batch_monitor",
        "module",
        "metrics",
        "launcher",
        "reports",
        "registration",
        "resume",
        "cli",
    ],
    "lightning_gnn_dist.partition": [
        "store",
        "metrics",
        "weights",
        "work",
        "batch_volume",
        "refine",
        "volume",
        "compare",
    ],
    "lightning_gnn_dist.data": ["local", "vertex_cut", "sampler", "subgraph_sampler", "limits"],
    "lightning_gnn_dist.utils": ["progress", "tempdirs"],
    "lightning_gnn_dist.costmodel": ["network", "probe"],
}


def _write_if_changed(path: Path, text: str) -> None:
    """Rewrite only changed files, so incremental builds stay incremental."""
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _api_pages() -> None:
    out = DOCS / "api"
    index = [
        "API reference",
        "=============",
        "",
        "Generated from the docstrings. The classes users build (strategy, datamodule, callbacks,",
        "``NodePredictor``) are importable from :mod:`lightning_gnn_dist` itself. Each page",
        "below is one subpackage, from the Lightning-facing top down to the data layer",
        "(design §8 of the project).",
        "",
        ".. toctree::",
        "   :maxdepth: 1",
        "",
    ]
    for name, title in API_PACKAGES:
        module = importlib.import_module(name)
        slug = name.replace(".", "_")
        index.append(f"   {slug}")
        heading = f"``{name}`` — {title}"
        lines = [heading, "=" * len(heading), "", f".. automodule:: {name}", "   :no-members:", ""]
        lines += [f".. currentmodule:: {name}", ""]
        names = list(getattr(module, "__all__", []))
        if names:
            lines += [".. autosummary::", "   :toctree: generated", ""]
            lines += [f"   {n}" for n in names]
            lines.append("")
        modules = API_MODULES.get(name, [])
        if modules:
            lines += ["Modules", "-------", "", ".. autosummary::", "   :toctree: generated", ""]
            lines += [f"   {m}" for m in modules]
            lines.append("")
        _write_if_changed(out / f"{slug}.rst", "\n".join(lines))
    _write_if_changed(out / "index.rst", "\n".join(index) + "\n")


def _benchmark_pages() -> None:
    """Copy ``benchmarks/results/*.md`` (and the figures they show) into the site."""
    src = REPO / "benchmarks" / "results"
    out = DOCS / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for path in sorted(src.glob("*.md")) + sorted(src.glob("*.png")):
        wanted.add(path.name)
        target = out / path.name
        if path.suffix == ".md":
            _write_if_changed(target, path.read_text())
        elif not target.exists() or target.stat().st_mtime < path.stat().st_mtime:
            shutil.copy2(path, target)
    for stale in out.iterdir():
        if stale.name not in wanted:
            stale.unlink()


def _cli_help() -> None:
    """The ``--help`` text of each ``partition`` command, of ``emulate`` and of ``probe``, for
    ``cli.md`` to include."""
    from lightning_gnn_dist.cli import emulate, probe
    from lightning_gnn_dist.cli.partition import _partition_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; make the page stable
    parser = _partition_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        _write_if_changed(DOCS / "_generated" / f"cli-{name}.txt", sub.format_help())
    for name, module in (("emulate", emulate), ("probe", probe)):
        _write_if_changed(DOCS / "_generated" / f"cli-{name}.txt", module._parser().format_help())


def _drop_builtin_docstrings(app, what, name, obj, options, lines) -> None:
    """A registry such as ``EXCHANGE_MODES`` is a plain ``dict``: autodoc would print ``dict``'s
    own docstring for it. Keep only text written for the object itself."""
    if what in ("data", "attribute") and type(obj).__module__ == "builtins":
        doc = inspect.getdoc(type(obj)) or ""
        if "\n".join(lines).strip() == doc.strip():
            lines.clear()


def setup(app) -> None:
    app.connect("autodoc-process-docstring", _drop_builtin_docstrings)


_api_pages()
_benchmark_pages()
_cli_help()
