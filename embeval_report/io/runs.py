"""Other training runs of the same entities, matched to the main set by id (the stability chapters).

* ``runs`` — other training runs of the same model (stability across runs);
* ``tranches`` — checkpoints along training, optionally of several runs (stability over time);
* ``vocabularies`` — named id subsets (restricted stability).

Every file is read and validated here, before any chapter runs; a file with its own ids is
matched by them, one without (``.npy``) must list the main set's entities in its order.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .embedding_set import EmbeddingSet, MatchedVectors, load_matched
from .files import read_ids_file
from .stores import store_label, store_path

MAIN_LABEL = "main set"


# ---------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunFile:
    """One file of the ``runs`` field, matched to the main set by id."""

    label: str
    path: str
    matched: MatchedVectors


def _unique_labels(paths: list[str], taken=(MAIN_LABEL,)) -> list[str]:
    names = [store_label(p) if isinstance(p, dict) else Path(p).name for p in paths]
    out, seen = [], set(taken)
    for i, nm in enumerate(names, 1):
        lab = nm if names.count(nm) == 1 and nm not in seen else f"run {i}: {nm}"
        seen.add(lab)
        out.append(lab)
    return out


def load_runs(es: EmbeddingSet, paths: list | None = None) -> list[RunFile]:
    """The ``runs`` files of ``es`` (or ``paths``), each read, validated and matched to the main set by id."""
    if paths is None:
        paths = list(es.fields.get("runs") or [])
        if not paths:
            raise InputError("manifest field 'runs': expected a list of vectors files of other training runs")
    labels = _unique_labels(paths)
    return [RunFile(lab, str(store_path(p) if isinstance(p, dict) else p), load_matched(p, es, label=f"runs: {lab}"))
            for p, lab in zip(paths, labels)]


# ---------------------------------------------------------------------------------------------
# Tranches
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Checkpoint:
    """One tranche of one run, matched to the main set by id."""

    name: str
    order: object
    run: str
    file: str
    matched: MatchedVectors


def _sort_orders(entries: list[dict], run: str) -> list:
    """Sort keys of one run's tranches: all given orders (numbers, or dates/strings) or list position."""
    given = ["order" in e for e in entries]
    where = f"manifest field 'tranches' (run {run!r})"
    if not any(given):
        return list(range(len(entries)))
    if not all(given):
        missing = [e["name"] for e, g in zip(entries, given) if not g]
        raise InputError(f"{where}: 'order' is given for some tranches but not for {', '.join(missing)}; "
                         "give it for every tranche of a run or for none (then list order is used)")
    orders = [e["order"] for e in entries]
    if all(isinstance(o, (int, float)) for o in orders):
        keys = [float(o) for o in orders]
    elif all(isinstance(o, str) for o in orders):
        parsed = pd.to_datetime(pd.Series(orders), errors="coerce")
        if parsed.isna().any():
            bad = orders[int(np.flatnonzero(parsed.isna().to_numpy())[0])]
            raise InputError(f"{where}: 'order' {bad!r} is not a number or a date; expected numbers or dates")
        keys = list(parsed)
    else:
        raise InputError(f"{where}: 'order' mixes numbers and text ({', '.join(map(repr, orders))}); "
                         "expected all numbers or all dates")
    if len(set(keys)) < len(keys):
        dup = next(o for o, k_ in zip(orders, keys) if keys.count(k_) > 1)
        raise InputError(f"{where}: two tranches have the same order {dup!r}")
    return keys


def load_tranches(es: EmbeddingSet, entries: list | None = None) -> dict[str, list[Checkpoint]]:
    """The ``tranches`` of ``es`` (or ``entries``) grouped by run (default run ``"run"``), each run sorted by
    order."""
    entries = entries if entries is not None else es.fields.get("tranches")
    if not entries:
        raise InputError("manifest field 'tranches': expected a list of {name, vectors, order?, run?} checkpoints")
    by_run: dict[str, list[dict]] = {}
    for i, e in enumerate(entries, 1):
        by_run.setdefault(str(e.get("run", "run")), []).append(dict(e, _item=i))
    out = {}
    for run, items in by_run.items():
        names = [str(e["name"]) for e in items]
        dup = {nm for nm in names if names.count(nm) > 1}
        if dup:
            raise InputError(f"manifest field 'tranches' (run {run!r}): duplicate tranche name(s) "
                             f"{', '.join(sorted(dup))}")
        keys = _sort_orders(items, run)
        ordered = [e for _, e in sorted(zip(keys, items), key=lambda t: t[0])]
        out[run] = [Checkpoint(str(e["name"]), e.get("order", j), run, Path(e["vectors"]).name,
                               load_matched(e["vectors"], es,
                                            label=f"tranches, item {e['_item']} ({e['name']}): {Path(e['vectors']).name}"))
                    for j, e in enumerate(ordered)]
    if not any(len(v) >= 2 for v in out.values()) and not shared_tranche_names(out):
        raise InputError("manifest field 'tranches': need at least two checkpoints of one run (to follow training) "
                         "or the same tranche name in two runs (to compare runs)")
    return out


def shared_tranche_names(runs: dict[str, list[Checkpoint]]) -> list[str]:
    """Tranche names present in at least two runs, in training order."""
    count: dict[str, int] = {}
    first_step: dict[str, int] = {}
    for cps in runs.values():
        for j, cp in enumerate(cps):
            count[cp.name] = count.get(cp.name, 0) + 1
            first_step[cp.name] = min(first_step.get(cp.name, j), j)
    return sorted([nm for nm, c in count.items() if c >= 2], key=lambda nm: first_step[nm])



# ---------------------------------------------------------------------------------------------
# Vocabularies
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Vocabulary:
    """A named id subset; ``ids`` unique, in file order (ids unknown to the set are kept and counted later)."""

    name: str
    file: str
    ids: np.ndarray
    label: str


def read_vocabularies(es: EmbeddingSet, entries: list | None = None) -> list[Vocabulary]:
    """The ``vocabularies`` field (or ``entries``): names must differ, and each file needs at least one id of the
    set."""
    entries = (es.fields.get("vocabularies") or []) if entries is None else entries
    out, seen = [], set()
    known = pd.Index(es.ids)
    for i, e in enumerate(entries, 1):
        name = str(e["name"])
        if name in seen:
            raise InputError(f"manifest field 'vocabularies', item {i}: duplicate name {name!r}")
        seen.add(name)
        label = f"vocabularies: {name} ({Path(e['ids']).name})"
        ids = pd.unique(read_ids_file(Path(e["ids"]), label))
        if not (known.get_indexer(ids) >= 0).any():
            raise InputError(f"{label}: none of its {len(ids)} ids is an id of the embedding set "
                             f"(first ids: {', '.join(map(str, ids[:3]))})")
        out.append(Vocabulary(name, str(e["ids"]), np.asarray(ids, dtype=object), label))
    return out
