r"""The fairness chapter's groups (:func:`make_groups`, :func:`intersect`) and its task scorer: the per-entity
quality it compares between groups, and the gaps.

One unit per entity in a compared group of at least one protected attribute (:func:`entity_table`), with

* ``probe_accuracy`` — 1 where the node-classification probe's held-out prediction is right, 0 where wrong
  (NaN outside the probe's sample or without a label): the probe's plan and units are node classification's
  (:func:`~.classification.probe_plan`, :func:`~.classification.probe_units`);
* ``label_agreement`` — the share of the entity's k cosine nearest neighbours (over the whole set) with its label;
* ``k_occurrence`` — :math:`N_k(i)/k`;
* ``groups`` — the entity's compared group under each attribute, as a JSON object (``null``: no value, or a
  group too small to compare).

The gaps are functions of the whole table (:func:`gap_aggregates`): per attribute the group means
:math:`\bar v_g`, their :math:`\max_g - \min_g` (``<measure>_difference``) or :math:`\min_g / \max_g`
(``<measure>_ratio``), and over the attributes the worst one, exactly as
:func:`~.fairness.evaluate_fairness` records them (bit for bit on the chapter's own table). Everything but the
vectors is fixed by the plan (:func:`fairness_plan`): the groups, the probe's sample and folds, k.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from ..errors import InputError
from ..kernels import as_numpy, knn
from ..kernels.neighbours import usable_k
from .classification import MAX_PROBE_ENTITIES, N_FOLDS, ProbePlan, probe_plan, probe_units
from .hubness_measures import k_occurrence
from .labels import as_labelset, label_problem
from .scoring import Aggregate, PreparedBoot

#: the per-entity measures of the unit table, in the order the chapter records them
MEASURES = ("probe_accuracy", "label_agreement", "k_occurrence")
#: groups with fewer members are too small to compare
MIN_GROUP_SIZE = 30


# ---------------------------------------------------------------------------------------------
# Groups, and the per-entity neighbourhood agreement
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Groups:
    """One attribute (or intersection) split into groups: ``codes[i]`` the compared group of row ``i``
    (-1: missing value or a too-small group), ``names`` the compared groups, ``sizes`` every group's size
    (compared and too small), ``n_missing`` rows without a value."""

    attribute: str
    codes: np.ndarray
    names: tuple
    sizes: dict
    too_small: tuple
    n_missing: int
    min_size: int

    @property
    def n_compared(self) -> int:
        return int((self.codes >= 0).sum())


def _values(values) -> np.ndarray:
    arr = np.asarray(values.to_numpy(dtype=object) if isinstance(values, pd.Series) else values, dtype=object)
    out = np.empty(len(arr), dtype=object)
    for i, v in enumerate(arr):
        missing = v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or not str(v).strip()
        out[i] = None if missing else (str(int(v)) if isinstance(v, float) and float(v).is_integer() else str(v).strip())
    return out


def make_groups(values, attribute: str, min_size: int = MIN_GROUP_SIZE) -> Groups:
    """Groups of one attribute column (missing values excluded, groups below ``min_size`` marked too small)."""
    v = _values(values)
    present = np.array([x is not None for x in v])
    counts = pd.Series(v[present], dtype=object).value_counts()
    sizes = {str(k): int(c) for k, c in sorted(counts.items(), key=lambda t: (-t[1], str(t[0])))}
    big = tuple(k for k, c in sizes.items() if c >= min_size)
    small = tuple(k for k, c in sizes.items() if c < min_size)
    code = {k: i for i, k in enumerate(big)}
    codes = np.array([code.get(x, -1) if x is not None else -1 for x in v], dtype=np.int64)
    return Groups(attribute, codes, big, sizes, small, int((~present).sum()), min_size)


def intersect(a, b, name_a: str, name_b: str, min_size: int = MIN_GROUP_SIZE) -> Groups:
    """The intersection of two attributes: one group per pair of values ("a · b"), missing if either is."""
    va, vb = _values(a), _values(b)
    both = np.array([None if x is None or y is None else f"{x} · {y}" for x, y in zip(va, vb)], dtype=object)
    return make_groups(both, f"{name_a} × {name_b}", min_size)


def neighbour_label_agreement(neighbors, labels) -> np.ndarray:
    """Per row: the share of its neighbours (rows of ``neighbors``) with its label; NaN for a row without a
    label or without labelled neighbours."""
    codes, _ = pd.factorize(pd.Series(_values(labels), dtype=object), use_na_sentinel=True)
    nb = np.asarray(neighbors)
    other = codes[nb]
    ok = (other >= 0) & (codes[:, None] >= 0)
    same = ((other == codes[:, None]) & ok).sum(1)
    count = ok.sum(1)
    return np.where(count > 0, same / np.maximum(count, 1), np.nan)


@dataclass(frozen=True)
class FairnessInputs:
    """The protected attributes, the metadata holding them (and the label column), the ids, why the label cannot
    be probed (``None`` when it can) and the device."""

    attributes: tuple
    metadata: pd.DataFrame
    label_column: str
    ids: np.ndarray
    problem: str | None
    device: str = "auto"

    @property
    def labels(self) -> pd.Series | None:
        return self.metadata[self.label_column] if self.label_column in self.metadata else None


@dataclass(frozen=True)
class FairnessPlan:
    """The groups of every attribute (:class:`Groups`), the probe's sample and folds (``None`` without
    a usable label) and the neighbours k (below 1: too few rows for neighbours)."""

    groups: tuple
    probe: ProbePlan | None
    k: int


def entity_inputs(metadata: pd.DataFrame | None, attributes, *, ids=None, label_column: str = "label",
                  device="auto") -> FairnessInputs:
    """The scorer's inputs; :class:`InputError` when the set has no metadata or an attribute column is missing."""
    if metadata is None:
        raise InputError("fairness: the attributes are metadata columns, but the set has no metadata table")
    for a in attributes:
        if a not in metadata:
            raise InputError(f"fairness: no metadata column {a!r}; expected a column holding a protected attribute")
    labels = metadata[label_column] if label_column in metadata else None
    problem = (f"no metadata column {label_column!r}" if labels is None
               else label_problem(labels, column=label_column))
    ids = np.arange(len(metadata)).astype(str) if ids is None else np.asarray(ids, dtype=object)
    return FairnessInputs(tuple(attributes), metadata, label_column, ids, problem, str(device))


def fairness_plan(inputs: FairnessInputs, *, min_group_size: int, k: int, max_probe_entities: int | None = None,
                  seed: int = 0) -> FairnessPlan:
    """The groups, the probe's stratified sample and folds, and k (at most n − 2), from the metadata and the seed."""
    n = len(inputs.metadata)
    groups = tuple(make_groups(inputs.metadata[a], a, min_group_size) for a in inputs.attributes)
    probe = None
    if inputs.problem is None:
        budget = MAX_PROBE_ENTITIES if max_probe_entities is None else max_probe_entities
        probe = probe_plan(as_labelset(inputs.labels, n, N_FOLDS, inputs.label_column), inputs.ids,
                           max_entities=budget, seed=seed)
    return FairnessPlan(groups, probe, usable_k(k, n))


def entity_measures(X, inputs: FairnessInputs, plan: FairnessPlan) -> dict[str, np.ndarray]:
    """Every measure the plan allows, per row of ``X`` (NaN where not evaluated), in :data:`MEASURES` order."""
    X = as_numpy(X)
    n = len(X)
    rows = {}
    if plan.probe is not None:
        correct = np.full(n, np.nan)
        correct[plan.probe.labels.rows] = probe_units(X, plan.probe)["correct"].to_numpy(float)
        rows["probe_accuracy"] = correct
    if plan.k >= 1:
        nb, _ = knn(X, plan.k, metric="cosine", device=inputs.device, desc="k-NN (cosine)")
        if plan.probe is not None:
            rows["label_agreement"] = neighbour_label_agreement(nb, inputs.labels)
        rows["k_occurrence"] = k_occurrence(nb, n) / plan.k
    return rows


def entity_table(inputs: FairnessInputs, plan: FairnessPlan, rows: dict[str, np.ndarray]) -> pd.DataFrame:
    """The unit table (module docstring): the entities in a compared group of some attribute, in row order."""
    codes = np.stack([g.codes for g in plan.groups], axis=1)
    sel = np.flatnonzero((codes >= 0).any(axis=1))
    cells, inverse = np.unique(codes[sel], axis=0, return_inverse=True)
    texts = np.array([json.dumps({g.attribute: g.names[c] if c >= 0 else None for g, c in zip(plan.groups, cell)},
                                 ensure_ascii=False) for cell in cells], dtype=object)
    table = pd.DataFrame({"entity": inputs.ids[sel].astype(str), "groups": texts[np.ravel(inverse)]})
    for m in MEASURES:
        table[m] = rows[m][sel] if m in rows else np.nan
    return table


def row_measures(units: pd.DataFrame, inputs: FairnessInputs, plan: FairnessPlan) -> dict[str, np.ndarray]:
    """The measures of a unit table back per row of the set (NaN for the rows in no compared group, which no
    comparison reads), those the plan allows only, in :data:`MEASURES` order."""
    n = len(inputs.metadata)
    at = pd.Index(inputs.ids.astype(str)).get_indexer(units["entity"])
    allowed = {"probe_accuracy": plan.probe is not None, "label_agreement": plan.probe is not None and plan.k >= 1,
               "k_occurrence": plan.k >= 1}
    out = {}
    for m in MEASURES:
        if allowed[m]:
            out[m] = np.full(n, np.nan)
            out[m][at] = units[m].to_numpy(float)
    return out


# ---------------------------------------------------------------------------------------------
# Gaps: whole-table functions of the units
# ---------------------------------------------------------------------------------------------

def _attribute_codes(units: pd.DataFrame) -> list[np.ndarray]:
    """Per attribute (in the order of the ``groups`` objects), each unit's group code (-1: not compared)."""
    cell, texts = pd.factorize(units["groups"])
    parsed = [json.loads(t) for t in texts]
    out = []
    for a in (list(parsed[0]) if parsed else []):
        index: dict = {}
        of_cell = np.array([-1 if p.get(a) is None else index.setdefault(p[a], len(index)) for p in parsed],
                           dtype=np.int64)
        out.append(of_cell[cell])
    return out


def attribute_gaps(units: pd.DataFrame, measure: str) -> list[tuple[float, float]]:
    """Per attribute with at least two groups holding a value: ``(max − min, min / max)`` of the group means of
    ``measure`` (each unit weighing once per occurrence, as a bootstrap resample repeats it); the ratio is NaN when
    the largest mean is not positive."""
    v = pd.to_numeric(units[measure], errors="coerce").to_numpy(float)
    out = []
    for codes in _attribute_codes(units):
        ok = (codes >= 0) & np.isfinite(v)
        G = int(codes.max()) + 1 if len(codes) else 0
        num = np.bincount(codes[ok], np.ones(int(ok.sum())) * v[ok], minlength=G)
        den = np.bincount(codes[ok], np.ones(int(ok.sum())), minlength=G)
        means = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        means = means[np.isfinite(means)]
        if len(means) < 2:
            continue
        hi = float(np.max(means))
        out.append((float(hi - np.min(means)), float(np.min(means) / hi) if hi > 0 else math.nan))
    return out


def _gap_terms(units: pd.DataFrame, measure: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """What :func:`_weighted_gaps` reads of a unit table, once: per attribute with a value, the units holding one
    (their indices), their values and their groups as a one-hot (units × groups)."""
    v = pd.to_numeric(units[measure], errors="coerce").to_numpy(float)
    out = []
    for codes in _attribute_codes(units):
        ok = (codes >= 0) & np.isfinite(v)
        if not ok.any():
            continue
        onehot = np.zeros((int(ok.sum()), int(codes[ok].max()) + 1))
        onehot[np.arange(len(onehot)), codes[ok]] = 1.0
        out.append((np.flatnonzero(ok), v[ok], onehot))
    return out


def _weighted_gaps(terms: list, W: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`attribute_gaps` under each row of unit weights ``W`` (draws × units), all at once, from
    :func:`_gap_terms`: per attribute the differences and ratios of the draws (NaN where fewer than two groups hold a
    value)."""
    W = np.asarray(W, float)
    out = []
    for rows, v, onehot in terms:
        Wk = W[:, rows]
        num, den = (Wk * v) @ onehot, Wk @ onehot
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(den > 0, num / np.where(den > 0, den, 1), np.inf)
            hi, lo = np.where(np.isinf(means), -np.inf, means).max(1), means.min(1)
        two = np.isfinite(means).sum(1) >= 2
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append((np.where(two, hi - lo, np.nan), np.where(two & (hi > 0), lo / hi, np.nan)))
    return out


def gap_aggregates() -> tuple:
    """The scorer's aggregates: per measure the worst attribute's gap, as a difference (the largest over the
    attributes, lower is better) and as a ratio (the smallest, higher is better); each a function of the whole
    table (:func:`attribute_gaps`) and, for the paired bootstrap, of many weighted draws at once."""
    def aggregate(measure: str, kind: str) -> Aggregate:
        j, worst = (0, max) if kind == "difference" else (1, min)

        def fn(units: pd.DataFrame) -> float:
            values = [g[j] for g in attribute_gaps(units, measure) if math.isfinite(g[j])]
            return worst(values) if values else math.nan

        def boot(terms: list, W: np.ndarray) -> np.ndarray:
            gaps = [g[j] for g in _weighted_gaps(terms, W)]
            if not gaps:
                return np.full(len(W), np.nan)
            M = np.stack(gaps)
            fill = -np.inf if kind == "difference" else np.inf
            best = (np.max if kind == "difference" else np.min)(np.where(np.isfinite(M), M, fill), axis=0)
            return np.where(np.isfinite(M).any(0), best, np.nan)

        return Aggregate(f"{measure}_{kind}", "lower" if kind == "difference" else "higher", fn=fn,
                         boot=PreparedBoot(partial(_gap_terms, measure=measure), boot))

    return tuple(aggregate(m, kind) for m in MEASURES for kind in ("difference", "ratio"))
