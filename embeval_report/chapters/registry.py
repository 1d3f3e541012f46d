"""The chapter registry: every chapter module's :data:`CHAPTER` declaration, and what is derived from them.

A chapter is the module ``embeval_report.chapters.<name>`` declaring ``CHAPTER = ChapterSpec(...)``
(:mod:`.declaration`) and its notebook ``notebooks/<order>_<name>.ipynb``. From the declarations come
the chapters in report order (:func:`discover`), every option with its default (:func:`options`), the
chapters that read the shared k-NN graph and the demo's side-data writers.
"""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from pathlib import Path

from ..errors import InputError
from ..settings import ChapterSettings
from .declaration import ChapterSpec, Option

#: modules of this package that are not chapters
HELPERS = frozenset({"declaration", "registry", "setup", "recorder", "findings", "comparison", "labelled"})


@lru_cache(maxsize=1)
def _declared() -> tuple[ChapterSpec, ...]:
    from dataclasses import replace

    found = []
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name in HELPERS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        spec = getattr(module, "CHAPTER", None)
        if isinstance(spec, ChapterSpec):
            found.append(replace(spec, module=module.__name__))
    names = [c.name for c in found]
    if len(set(names)) != len(names):
        raise RuntimeError(f"two chapter modules declare the same chapter name: {sorted(names)}")
    return tuple(sorted(found, key=lambda c: c.order))


def discover() -> list[ChapterSpec]:
    """Every chapter in report order (the summary, order 0, first), including ``compare``'s chapter (stage -1)."""
    return [c for c in _declared() if c.stage >= 0]


def chapter(name: str) -> ChapterSpec:
    """One chapter's declaration by name (``compare``'s comparison chapter included)."""
    for c in _declared():
        if c.name == name:
            return c
    raise KeyError(f"no chapter {name!r}")


@lru_cache(maxsize=1)
def options() -> dict[str, Option]:
    """Every option of every chapter, by name (an option several chapters read is one shared object)."""
    out: dict[str, Option] = {}
    for c in _declared():
        for o in c.options:
            if out.setdefault(o.name, o) != o:
                raise RuntimeError(f"option {o.name!r} is declared twice with different definitions "
                                   f"({c.name} and an earlier chapter): share one Option object")
    return out


def option_chapters(name: str) -> list[str]:
    """The chapters that read option ``name``."""
    return [c.name for c in _declared() if any(o.name == name for o in c.options)]


def graph_chapters() -> tuple[str, ...]:
    """The chapters that read the run's shared cosine k-NN graph."""
    return tuple(c.name for c in _declared() if c.graph)


def graph_rescorings(names) -> tuple[str, ...]:
    """The re-scored graphs (``"mutual_proximity"``, ...) that the chapters ``names`` read from the shared sweep."""
    wanted = set(names)
    return tuple(dict.fromkeys(m for c in _declared() if c.name in wanted for m in c.graph_rescored))


def decision_chapter() -> str:
    """The chapter that holds the report's decision (its status and findings): the report opens with it."""
    return next(c.name for c in _declared() if c.decision)


def demo_writers() -> list[str]:
    """The :mod:`embeval_report.demo` modules that write the chapters' demo side data, in chapter order."""
    out = []
    for c in _declared():
        if c.demo and c.demo not in out:
            out.append(c.demo)
    return out


def select(chapters: list[ChapterSpec], names: list[str] | None) -> list[ChapterSpec]:
    """The chapters named in ``names`` (all when ``None``); the chapters that read the others' results
    (``stage`` > 0: statistical rigor, the summary) are always kept."""
    if not names:
        return chapters
    known = {c.name for c in chapters}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"--chapters: unknown chapter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [c for c in chapters if c.name in names or c.stage > 0]


def resolve_settings(params: dict | None = None, **overrides) -> ChapterSettings:
    """The settings of a run from the command line's values or a notebook's ``settings`` dict: the device
    resolved once (``auto``: CUDA when torch sees a GPU), every declared option parsed and filled with its
    default (``explicit`` keeps the names the user set). Settings the runner already resolved pass unchanged.
    Raises ValueError for an unknown option or a bad value (the command line turns it into one line)."""
    from ..kernels.device import resolve_device

    p = dict(params or {}, **overrides)
    p["device"] = resolve_device(p.get("device", "auto")).type
    given = dict(p.pop("options", None) or {})
    declared = options()
    unknown = [k for k in given if k not in declared]
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(declared)}")
    explicit = p.pop("explicit", None)
    values = {name: o.parse(given[name]) if name in given else o.default for name, o in declared.items()}
    return ChapterSettings(**p, options=values, explicit=tuple(given) if explicit is None else tuple(explicit))
