"""Where the chapter notebooks, the exploration notebook, templates and the Quarto project template live.

In a source checkout (editable install) they are the repository's top-level ``notebooks/``,
``templates/`` and ``_quarto.yml``; a wheel carries copies under ``embeval_report/_data/``.
"""
from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for base in (_PKG.parent, _PKG / "_data"):
        if (base / name).exists():
            return base / name
    raise FileNotFoundError(f"embeval-report installation is missing {name!r}")


def notebooks_dir() -> Path:
    return _find("notebooks")


def templates_dir() -> Path:
    return _find("templates")


def quarto_template() -> Path:
    return _find("_quarto.yml")


#: the exploration notebook every report folder gets (its template: ``notebooks/explore/explore.ipynb``)
EXPLORE_NOTEBOOK = "explore.ipynb"


def explore_template() -> Path:
    return notebooks_dir() / "explore" / EXPLORE_NOTEBOOK
