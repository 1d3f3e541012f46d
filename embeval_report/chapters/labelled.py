"""What the label chapters share (node classification, clustering, fairness): the ``label`` column's label set,
the task scorers' inputs, the label budget and the sentence on excluded entities. Not a chapter."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ChapterSkipped, InputError
from ..metrics.labels import LabelSet, label_problem, prepare_labels
from ..present.display import escape

LABEL_COLUMN = "label"


def precheck(es, side, settings) -> str | None:
    """Why the label column cannot be evaluated (fewer than 2 classes with 5 members, no label), or ``None``."""
    meta = es.metadata
    if meta is None or LABEL_COLUMN not in meta:
        return None  # the registry reports the missing input
    return label_problem(meta[LABEL_COLUMN], column=LABEL_COLUMN)


def chapter_labels(es) -> LabelSet:
    """The label set both label chapters evaluate; :class:`ChapterSkipped` with the reason when unusable."""
    labels = es.metadata[LABEL_COLUMN]
    try:
        return prepare_labels(labels, n=es.n, column=LABEL_COLUMN)
    except InputError as e:
        raise ChapterSkipped(label_problem(labels, column=LABEL_COLUMN) or str(e)) from None


@dataclass(frozen=True)
class LabelInputs:
    """The scorer's inputs: the label set and the set's ids."""

    labels: LabelSet
    ids: np.ndarray


def label_inputs(es, side, settings) -> LabelInputs:
    """The labels of the ``label`` column (classes of at least 5 members) and the ids."""
    return LabelInputs(chapter_labels(es), es.ids)


def probe_budget(settings) -> int:
    """Entities the probes use: the ``probe_entities`` option, capped by ``--sample-size`` when it is given."""
    n = int(settings.option("probe_entities"))
    return n if settings.sample_size is None else min(n, int(settings.sample_size))


def exclusion_text(ls: LabelSet) -> str:
    """Markdown sentence on the entities a label set excludes ("" when none was excluded)."""
    parts = []
    if ls.n_missing:
        parts.append(f"{ls.n_missing:,} of {ls.n_total:,} entities have no `{escape(ls.column)}` and are "
                     "excluded")
    if ls.dropped:
        n_drop = sum(ls.dropped.values())
        names = ", ".join(f"{escape(k)} ({v})" for k, v in list(ls.dropped.items())[:8])
        more = f" and {len(ls.dropped) - 8} more" if len(ls.dropped) > 8 else ""
        parts.append(f"{len(ls.dropped)} class{'es' if len(ls.dropped) > 1 else ''} with fewer than "
                     f"{ls.min_class_size} members ({names}{more}; {n_drop:,} entities) "
                     f"{'are' if len(ls.dropped) > 1 else 'is'} dropped, since a stratified "
                     f"{ls.min_class_size}-fold split cannot place one in every test fold")
    if ls.sampled_from:
        parts.append(f"the evaluation uses a stratified random sample of {ls.n:,} of the "
                     f"{ls.sampled_from:,} labelled entities")
    if not parts:
        return ""
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."
