r"""Task scorers: how a task chapter scores *any* vectors on its inputs, unit by unit.

A task chapter (retrieval, node classification, clustering, link prediction, …) declares one
:class:`TaskScorer` in its :class:`~embeval_report.chapters.declaration.ChapterSpec`. Three uses call it
the same way:

* the chapter itself, whose headline numbers are the scorer's aggregates of its own units;
* ``compare`` and ``--baseline``, which pair two models' unit tables by unit id
  (:func:`paired_aggregate`, :mod:`embeval_report.metrics.paired`);
* the remedy checks, which score the same model after a remedy (centring, CSLS, …) on the *same plan*.

The three steps:

``inputs(es, side, settings)``
    the task's side data, read once (labels, edges and their split, queries and judgements, …);
``plan(inputs, settings)``
    everything the protocol fixes before any vector is read: folds, held-out edges, negatives, sampled
    queries, seeds, options. Made from the seed and the unit ids only, **never from the vectors**, so two
    models, or a model and its remedied copy, are scored on the same plan; :func:`plan_fingerprint` of the
    plan is recorded with the units, and ``compare`` says whether two reports used the same one;
``score(vectors, inputs, plan)``
    one row per unit: the unit id (column ``key``) and one column per per-unit value.

Each of the scorer's :class:`Aggregate` turns the unit table into one of the chapter's numbers: either the
mean of a column (a query's reciprocal rank, a test edge's hits@10: paired per unit, with the paired
randomisation test) or a function of the whole table (macro-F1, ARI, Spearman's ρ, ROC-AUC: paired by a
bootstrap over the shared units, :func:`paired_aggregate`).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import scipy.sparse as sp


@dataclass(frozen=True)
class Aggregate:
    """How one recorded metric follows from the unit table.

    ``mean_of``: the metric is the mean of this column over the units where it is finite; otherwise ``fn(table)``
    computes it from the whole table (its columns as the scorer writes them). ``unit_column``: a per-unit column
    whose differences say on which units a model wins or loses (shown beside a whole-table comparison).
    ``boot(table, W)``: optional, ``fn`` of the table with its rows weighted by each row of ``W`` (resamples ×
    units, the counts of a bootstrap draw), for every resample at once; the paired bootstrap uses it instead of
    calling ``fn`` once per resample. ``over``: optional, a column finite exactly on the units ``fn`` reads (a
    chapter with two kinds of units: its word pairs, not its analogy questions); a paired comparison then runs
    over the units where it is finite in both tables, as a mean metric's does. ``task``: whether the metric is an
    outcome of the task; one that describes the geometry instead (a silhouette) is compared between models but not
    counted as a task a remedy improves. ``boot_exact``: ``boot`` computes each draw from integer counts with
    row-wise arithmetic, so its value for a draw does not depend on the other draws of its call; the paired
    bootstrap then calls it on hundreds of draws at once (:func:`~embeval_report.metrics.paired.resampled_values`).

    >>> t = pd.DataFrame({"query": ["a", "b"], "rr": [1.0, 0.5]})
    >>> Aggregate("mrr", mean_of="rr").value(t)
    0.75
    """

    metric: str
    direction: str = "higher"
    mean_of: str | None = None
    fn: Callable[[pd.DataFrame], float] | None = None
    unit_column: str | None = None
    boot: Callable[[pd.DataFrame, np.ndarray], np.ndarray] | None = None  # fn under unit weights, vectorised
    over: str | None = None           # the column finite on the units fn reads (None: every unit)
    task: bool = True   # an outcome of the task (a silhouette is geometry: compared, but no remedy "costs" it)
    boot_exact: bool = False  # boot's value for a draw is the same whichever draws share its call (integer counts)

    def __post_init__(self):
        if (self.mean_of is None) == (self.fn is None):
            raise ValueError(f"aggregate {self.metric}: give exactly one of mean_of and fn")
        if self.direction not in ("higher", "lower"):
            raise ValueError(f"aggregate {self.metric}: direction must be 'higher' or 'lower'")

    @property
    def is_mean(self) -> bool:
        return self.mean_of is not None

    @property
    def columns(self) -> tuple[str, ...]:
        """The unit-table columns this aggregate reads (a whole-table aggregate: those its scorer declares)."""
        return (self.mean_of,) if self.mean_of else ()

    def value(self, table: pd.DataFrame) -> float:
        """The metric's value on ``table``."""
        if self.mean_of is not None:
            x = np.asarray(table[self.mean_of], float)
            x = x[np.isfinite(x)]
            return float(x.mean()) if len(x) else math.nan
        return float(self.fn(table))


@dataclass(frozen=True)
class TaskScorer:
    """A task's protocol as three steps (see the module docstring) and the aggregates of its unit table.

    ``unit``: the units in words, plural ("entities", "test edges"); ``key``: the unit id column;
    ``columns``: the unit table's value columns (besides ``key``) that the aggregates read;
    ``map_inputs(inputs, f)``: the inputs with any vectors of their own (a retrieval chapter's query vectors)
    mapped by ``f``, so that a remedy applied to the set applies to them too (``None``: the inputs hold none).
    ``invariant``: remedy name (:data:`~embeval_report.metrics.remedies.REMEDIES`) -> why that remedy cannot change
    the units (the protocol undoes it: a probe that standardises its features on the training folds subtracts any
    shift of every vector); the remedy checks then pair the recorded units with themselves instead of scoring again.
    ``outcomes``: optional, ``score`` restricted to the columns the task's outcome aggregates (``task=True``) read,
    for the remedy checks, which compare those only (k-means' partition without its silhouettes); the other
    declared columns it may leave out (:meth:`task_units` fills them with NaN).
    """

    unit: str
    key: str
    columns: tuple[str, ...]
    aggregates: tuple[Aggregate, ...]
    inputs: Callable[..., Any]
    plan: Callable[..., Any]
    score: Callable[..., pd.DataFrame]
    map_inputs: Callable[[Any, Callable], Any] | None = None
    invariant: dict = field(default_factory=dict, compare=False)
    outcomes: Callable[..., pd.DataFrame] | None = None

    def __post_init__(self):
        missing = [c for a in self.aggregates for c in (a.mean_of, a.over) if c and c not in self.columns]
        if missing:
            raise ValueError(f"scorer of {self.unit}: aggregates read undeclared columns {missing}")

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(a.metric for a in self.aggregates)

    def aggregate(self, name: str) -> Aggregate:
        """The aggregate of metric ``name``."""
        for a in self.aggregates:
            if a.metric == name:
                return a
        raise KeyError(f"no aggregate {name!r}; known: {', '.join(self.metrics)}")

    def units(self, vectors, inputs, plan) -> pd.DataFrame:
        """``score(vectors, inputs, plan)``, checked: the key column first, one row per unit, every declared column."""
        table = self.score(vectors, inputs, plan)
        return check_units(table, self.key, self.columns)

    def task_units(self, vectors, inputs, plan) -> pd.DataFrame:
        """:meth:`units` for the outcome aggregates only: ``outcomes`` when declared (any declared column it leaves
        out is NaN), else ``score``."""
        if self.outcomes is None:
            return self.units(vectors, inputs, plan)
        table = self.outcomes(vectors, inputs, plan)
        for c in self.columns:
            if c not in table.columns:
                table[c] = np.nan
        return check_units(table, self.key, self.columns)

    def values(self, table: pd.DataFrame) -> dict[str, float]:
        """Every aggregate of ``table``: metric name -> value."""
        return {a.metric: a.value(table) for a in self.aggregates}


def check_units(table: pd.DataFrame, key: str, columns) -> pd.DataFrame:
    """``table`` with ``key`` first and the declared ``columns`` present, every unit id once (a ValueError
    otherwise: a scorer's bug, not bad input)."""
    missing = [c for c in (key, *columns) if c not in table.columns]
    if missing:
        raise ValueError(f"unit table: no column(s) {', '.join(missing)}")
    if table[key].duplicated().any():
        dup = table.loc[table[key].duplicated(), key].iloc[0]
        raise ValueError(f"unit table: unit {dup!r} appears more than once")
    return table[[key, *[c for c in table.columns if c != key]]].reset_index(drop=True)


#: numeric arrays above this many values enter a fingerprint as a digest of their values (as integers or floats),
#: not as a JSON list (ten million negatives as text take seconds and a gigabyte)
DIGEST_ABOVE = 1 << 16


def plan_fingerprint(plan: Any) -> str:
    """A short, stable fingerprint of a plan (its JSON form; arrays by value, numeric ones above
    :data:`DIGEST_ABOVE` values by a digest of them, sparse matrices by their entries; sets and dict keys sorted):
    equal plans give equal fingerprints in any process.

    >>> plan_fingerprint({"seed": 0, "folds": np.array([0, 1])}) == plan_fingerprint({"folds": [0, 1], "seed": 0})
    True
    """
    text = json.dumps(_plain(plan), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _plain(obj):
    if hasattr(obj, "__dataclass_fields__"):
        return {k: _plain(getattr(obj, k)) for k in obj.__dataclass_fields__}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(_plain(v) for v in obj)
    if isinstance(obj, pd.DataFrame):
        return {str(c): _plain(obj[c].to_numpy()) for c in obj.columns}
    if sp.issparse(obj):  # a split's interactions: by their entries
        m = obj.tocsr(copy=True)
        m.sum_duplicates()
        m.sort_indices()
        return {"shape": list(m.shape), **{k: _plain(getattr(m, k)) for k in ("indptr", "indices", "data")}}
    if isinstance(obj, np.ndarray):
        if obj.size > DIGEST_ABOVE and obj.dtype.kind in "biuf":  # millions of negatives: a digest of the values
            v = np.ascontiguousarray(obj, dtype="<f8" if obj.dtype.kind == "f" else "<i8")
            digest = hashlib.blake2b(memoryview(v).cast("B"), digest_size=16).hexdigest()
            return {"shape": list(obj.shape), "values": digest}
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


@dataclass(frozen=True)
class PreparedBoot:
    """An :class:`Aggregate`'s ``boot`` in two steps: ``prepare(table, **kw)`` reads the unit table once (its columns
    as arrays, codes, one-hots, chance terms: whatever does not depend on the draws) and ``weighted(prepared, W)``
    computes the values of the draws of ``W`` from it. Called as ``boot(table, W, **kw)`` it does both; the paired
    bootstrap calls :meth:`bind` once per table and the bound function once per batch of draws
    (:func:`~embeval_report.metrics.paired.resampled_values`), with the same values (the same arithmetic)."""

    prepare: Callable[..., Any]
    weighted: Callable[[Any, np.ndarray], np.ndarray]

    def __call__(self, table: pd.DataFrame, W: np.ndarray, *args, **kw) -> np.ndarray:
        return self.weighted(self.prepare(table, *args, **kw), W)

    def bind(self, table: pd.DataFrame, *args, **kw) -> Callable[[np.ndarray], np.ndarray]:
        """``W -> boot(table, W, *args, **kw)``, the table read once."""
        prepared = self.prepare(table, *args, **kw)
        return lambda W: self.weighted(prepared, W)


def _mean_terms(table: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    x = pd.to_numeric(table[column], errors="coerce").to_numpy(float)
    ok = np.isfinite(x)
    return np.where(ok, x, 0.0), ok.astype(float)


def _weighted_mean(terms: tuple[np.ndarray, np.ndarray], W: np.ndarray) -> np.ndarray:
    values, finite = terms
    with np.errstate(divide="ignore", invalid="ignore"):
        return (W @ values) / (W @ finite)


#: ``weighted_mean(table, W, column)``: an :class:`Aggregate`'s ``boot`` for a whole-table metric that is a mean over
#: units: the mean of ``column`` over its finite values under each row of unit weights ``W`` (resamples × units); NaN
#: for a row without any (a :class:`PreparedBoot`: ``partial(weighted_mean, column=c)`` reads the column once per table)
weighted_mean = PreparedBoot(_mean_terms, _weighted_mean)


def joined_units(a: pd.DataFrame, b: pd.DataFrame, key: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of two unit tables whose ids both hold, in the same order (``a``'s)."""
    common = pd.Index(a[key]).intersection(pd.Index(b[key]), sort=False)
    ia = a.set_index(key).loc[common].reset_index()
    ib = b.set_index(key).loc[common].reset_index()
    return ia, ib


def compare_units(a: pd.DataFrame, b: pd.DataFrame, *, key: str, metric: str, direction: str = "higher",
                  aggregate: Aggregate | None = None, level: float = 0.95, seed: int = 0, units: str = "units",
                  unit_tests: bool = True, aligned: bool = False):
    """One metric of two unit tables (model A, model B) over the units both hold: ``(comparison, differences)``.

    A mean metric (``aggregate`` None or a ``mean_of`` aggregate; the column named ``metric``) is compared unit by
    unit (:func:`~embeval_report.metrics.paired.paired_comparison`; ``differences``: the per-unit B − A;
    ``unit_tests=False``: without its t and Wilcoxon tests), a whole-table one by the paired bootstrap of its
    function (:func:`~embeval_report.metrics.paired.paired_aggregate`; ``differences`` None). ``aligned``: ``a``
    and ``b`` are already :func:`joined_units`'s (the same units, row for row, ``a``'s order, as the join keeps
    them), so they are not joined again (the remedy checks join a task's tables once for all of its metrics)."""
    from . import paired

    if aggregate is not None and not aggregate.is_mean:
        ta, tb = (a, b) if aligned else joined_units(a, b, key)
        if aggregate.over is not None:  # the units the metric reads, in both tables (a file's blanks: not finite)
            keep = np.logical_and(*(np.isfinite(pd.to_numeric(t[aggregate.over], errors="coerce").to_numpy(float))
                                    for t in (ta, tb)))
            ta, tb = ta[keep].reset_index(drop=True), tb[keep].reset_index(drop=True)
        result, _ = paired.paired_aggregate(aggregate.fn, ta, tb, direction=direction, level=level, seed=seed,
                                            units=units, unit_column=aggregate.unit_column, boot=aggregate.boot,
                                            boot_exact=aggregate.boot_exact)
        return result, None
    column = aggregate.mean_of if aggregate is not None else metric
    if aligned:
        x, y = a[column], b[column]
    else:
        joined = a[[key, column]].merge(b[[key, column]], on=key, suffixes=("_a", "_b"))
        x, y = joined[f"{column}_a"], joined[f"{column}_b"]
    return (paired.paired_comparison(x, y, direction=direction, level=level, seed=seed, units=units,
                                     unit_tests=unit_tests),
            paired.paired_differences(x, y))

