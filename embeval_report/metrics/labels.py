"""The labelled entities that node classification and clustering evaluate.

Labels come from a metadata column (``label``). :func:`prepare_labels` keeps the entities that can
be evaluated: missing labels (None, NaN, empty or blank strings) are excluded and counted, and
classes with fewer than ``min_class_size`` members (default 5, the number of CV folds) are
dropped and listed. :func:`label_problem` says why a column cannot be evaluated at all (fewer
than 2 classes with enough members), the reason the chapters are skipped with.
"""
from __future__ import annotations

import contextvars
import math
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from ..errors import InputError
from ..io import iter_groups
from ..kernels import as_numpy

try:  # scikit-learn's private helpers of StandardScaler's scale: without them, Standardiser is StandardScaler
    from sklearn.preprocessing._data import _handle_zeros_in_scale, _is_constant_feature
except ImportError:  # pragma: no cover - a scikit-learn that moved them
    _handle_zeros_in_scale = _is_constant_feature = None

#: folds of the stratified cross-validation, and so the smallest class that can be evaluated
N_FOLDS = 5
#: classes a label column needs (with at least ``min_class_size`` members each)
MIN_CLASSES = 2
#: below this many matrix entries (n x d), scikit-learn runs single-threaded (BLAS and OpenMP):
#: thread start-up and spin-waiting cost more than they save, many times more on a busy machine
_SMALL_PROBLEM = 4_000_000
_WHAT = "node classification and clustering"


@dataclass(frozen=True)
class LabelSet:
    """The labelled entities a chapter evaluates, with what was excluded and why.

    ``rows`` are row numbers of the embedding set, ``codes[i]`` the class index of ``rows[i]`` in
    ``classes`` (largest class first, then by name).
    """

    column: str
    rows: np.ndarray
    codes: np.ndarray
    classes: tuple
    n_total: int
    n_missing: int
    dropped: dict            # class name -> size, classes excluded for being smaller than min_class_size
    min_class_size: int
    sampled_from: int | None = None  # labelled entities before a stratified subsample, if one was drawn

    @property
    def n(self) -> int:
        return int(len(self.rows))

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def counts(self) -> np.ndarray:
        return np.bincount(self.codes, minlength=self.n_classes)

    def names(self) -> np.ndarray:
        """Class name of each kept entity."""
        return np.asarray(self.classes, dtype=object)[self.codes]


class OnLabels:
    """Mixin of results over a :class:`LabelSet` (field ``labels``): ``n`` is the number of evaluated entities."""

    @property
    def n(self) -> int:
        return self.labels.n


def _label_text(v) -> str | None:
    """A label as a string; ``None`` for a missing value (None, NaN, empty or blank string)."""
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return None
        if float(v).is_integer():
            return str(int(v))
    s = str(v).strip()
    return s or None


def _make_labelset(column, rows, names, n_total, n_missing, min_class_size, sampled_from=None,
                   dropped=None) -> LabelSet:
    """Drop classes below ``min_class_size`` and code the rest (largest class first)."""
    counts = pd.Series(names, dtype=object).value_counts()
    small = counts[counts < min_class_size]
    dropped = dict(dropped or {})
    dropped.update({str(k): int(v) for k, v in small.sort_values(ascending=False).items()})
    kept = counts[counts >= min_class_size]
    order = sorted(kept.index, key=lambda c: (-kept[c], str(c)))
    code_of = {c: i for i, c in enumerate(order)}
    keep = np.array([nm in code_of for nm in names], dtype=bool)
    return LabelSet(column=column, rows=np.asarray(rows, dtype=np.int64)[keep],
                    codes=np.array([code_of[nm] for nm in np.asarray(names, dtype=object)[keep]], dtype=np.int64),
                    classes=tuple(order), n_total=n_total, n_missing=n_missing, dropped=dropped,
                    min_class_size=min_class_size, sampled_from=sampled_from)


def _labelled(labels, min_class_size: int, column: str, n: int | None) -> tuple[LabelSet | None, int]:
    """The label set before the class-count check (``None`` when no entity has a label), and the total."""
    arr = labels.to_numpy(dtype=object) if isinstance(labels, pd.Series) else np.asarray(labels, dtype=object)
    if arr.ndim != 1 or (n is not None and len(arr) != n):
        raise InputError(f"metadata column '{column}': expected one label per vector ({n}), got shape {arr.shape}")
    if min_class_size < 2:
        raise ValueError("min_class_size must be at least 2 (a class needs a member in training and in test)")
    names = np.array([_label_text(v) for v in arr], dtype=object)
    present = np.array([v is not None for v in names], dtype=bool)
    if not present.any():
        return None, len(arr)
    return _make_labelset(column, np.flatnonzero(present), names[present], len(arr), int((~present).sum()),
                          min_class_size), len(arr)


def prepare_labels(labels, *, min_class_size: int = N_FOLDS, column: str = "label", n: int | None = None,
                   what: str = _WHAT) -> LabelSet:
    """Validate a label column and keep the entities that can be evaluated.

    Missing labels (None, NaN, empty or blank strings) are excluded and counted. Classes with
    fewer than ``min_class_size`` members (default 5, the number of CV folds) are **dropped**
    and listed, rather than merged into an "other" class: a merged class mixes unrelated
    entities, so the probe would be scored on a class no one defined. Numbers are compared as
    text (``1.0`` and ``1`` are the same class).

    Raises
    ------
    InputError
        Wrong length, no labelled entity, or fewer than 2 classes left (the message names the
        column, the counts and the classes).
    """
    ls, n_total = _labelled(labels, min_class_size, column, n)
    if ls is None:
        raise InputError(f"metadata column '{column}': no entity has a label (all {n_total:,} values are missing); "
                         f"{what} need labels")
    _check_classes(ls, what)
    return ls


def class_count_problem(ls: LabelSet) -> str | None:
    """Why ``ls`` cannot be evaluated (fewer than 2 classes with enough members, with the class sizes), or ``None``."""
    if ls.n_classes >= MIN_CLASSES:
        return None
    sizes = {**dict(zip(ls.classes, (int(c) for c in ls.counts))), **ls.dropped}
    shown = ", ".join(f"'{k}': {v:,}" for k, v in list(sizes.items())[:6]) + (", …" if len(sizes) > 6 else "")
    labelled = ls.n_total - ls.n_missing
    have = "no class has" if ls.n_classes == 0 else "only 1 class has"
    return (f"needs at least {MIN_CLASSES} classes with at least {ls.min_class_size} members; among the "
            f"{labelled:,} labelled entities of the metadata column '{ls.column}' {have} that many "
            f"({len(sizes)} class{'es' if len(sizes) != 1 else ''} in all; sizes {shown})")


def label_problem(labels, *, min_class_size: int = N_FOLDS, column: str = "label") -> str | None:
    """Why a label column cannot be evaluated at all, or ``None`` when it can (see :func:`prepare_labels`).

    >>> label_problem(["a"] * 299 + ["b"])
    "needs at least 2 classes with at least 5 members; among the 300 labelled entities of the metadata column 'label' only 1 class has that many (2 classes in all; sizes 'a': 299, 'b': 1)"
    """
    ls, n_total = _labelled(labels, min_class_size, column, None)
    if ls is None:
        return (f"needs labels: all {n_total:,} values of the metadata column '{column}' are missing "
                f"(at least {MIN_CLASSES} classes with at least {min_class_size} members each are needed)")
    return class_count_problem(ls)


def _check_classes(ls: LabelSet, what: str) -> None:
    if ls.n_classes >= MIN_CLASSES:
        return
    labelled = ls.n_total - ls.n_missing
    found = (f"only one class ('{ls.classes[0]}', {ls.n:,} entities)" if ls.n_classes == 1 else "no class")
    if ls.dropped:
        found += (f" with at least {ls.min_class_size} members; smaller classes: "
                  + ", ".join(f"'{k}' ({v})" for k, v in list(ls.dropped.items())[:5])
                  + (" …" if len(ls.dropped) > 5 else ""))
    raise InputError(f"metadata column '{ls.column}': {what} need at least 2 classes with at least "
                     f"{ls.min_class_size} labelled entities each; among {labelled:,} labelled entities there is "
                     f"{found}")


def _subset(ls: LabelSet, keep: np.ndarray, min_class_size: int | None = None, *, sampled: bool = False,
            what: str = _WHAT) -> LabelSet:
    """The label set restricted to positions ``keep`` (classes that fall below the minimum dropped)."""
    m = ls.min_class_size if min_class_size is None else min_class_size
    out = _make_labelset(ls.column, ls.rows[keep], ls.names()[keep], ls.n_total, ls.n_missing, m,
                         sampled_from=ls.n if sampled else ls.sampled_from, dropped=ls.dropped)
    _check_classes(out, what)
    return out


def stratified_subsample(ls: LabelSet, size: int | None, *, seed: int = 0) -> LabelSet:
    """A seeded stratified random sample of ``size`` labelled entities (``ls`` itself when smaller)."""
    if size is None or ls.n <= size:
        return ls
    keep, _ = train_test_split(np.arange(ls.n), train_size=int(size), stratify=ls.codes, random_state=seed)
    return _subset(ls, np.sort(keep), sampled=True)


def as_labelset(labels, n: int, min_class_size: int, column: str) -> LabelSet:
    """``labels`` as a :class:`LabelSet` with classes of at least ``min_class_size`` members."""
    if isinstance(labels, LabelSet):
        if labels.min_class_size < min_class_size:
            return _subset(labels, np.arange(labels.n), min_class_size)
        return labels
    return prepare_labels(labels, min_class_size=min_class_size, column=column, n=n)


def label_array(labels) -> np.ndarray:
    """A label column (Series, list or array) as an object array."""
    return np.asarray(labels.to_numpy(dtype=object) if isinstance(labels, pd.Series) else labels, dtype=object)


def small_problem(n: int, d: int) -> bool:
    """Whether an n x d fit is small: run single-threaded (:func:`threads`), side by side (:func:`map_fits`)."""
    return n * d <= _SMALL_PROBLEM


def threads(n: int, d: int):
    """Single-threaded BLAS and OpenMP for small problems, where thread start-up dominates (and contends)."""
    return threadpool_limits(1) if small_problem(n, d) else nullcontext()


def _cores() -> int:
    """The cores this process may use (``OMP_NUM_THREADS`` when it is set lower)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        return max(1, min(cores, int(os.environ.get("OMP_NUM_THREADS", cores))))
    except ValueError:
        return cores


def map_fits(fit, items, n: int, d: int) -> list:
    """``[fit(item) for item in items]``. For a small problem (:func:`threads` runs each fit single-threaded) the fits
    run side by side, one per core, each still single-threaded (BLAS for the process, OpenMP in its own thread): the
    same numbers as one after the other, in a fraction of the time (the 5 probe folds of 8,000 x 384: 34 -> 24 s on
    a loaded 2-core machine; scikit-learn's solvers leave most cores idle at this size). The caller is inside
    ``threads(n, d)``; warnings raised in the fits reach the caller's filters and records."""
    return map_threads(fit, items, parallel=small_problem(n, d))


def map_threads(fn, items, *, parallel: bool = True) -> list:
    """``[fn(item) for item in items]``, with ``parallel`` side by side in threads, one per core, each with
    single-threaded BLAS (for the process, while they run) and OpenMP (in its own thread). Items whose numbers do not
    depend on the BLAS thread count (a matrix product that splits its outputs among threads, not its sums) come out
    the same bit for bit; warnings raised in ``fn`` reach the caller's filters and records."""
    items = list(items)
    workers = min(len(items), _cores())
    if workers < 2 or not parallel:
        return [fn(item) for item in items]

    def one(item):
        with threadpool_limits(1, user_api="openmp"):  # OpenMP's thread count is set per thread
            return fn(item)

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, items))


def aside(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` started now in a thread of its own (with the caller's context variables: the chapter's
    compute context), collected by calling the function returned (which raises what ``fn`` raised); on one core
    ``fn`` called now. For work that would leave a core idle while the caller does other work meanwhile: its
    numbers are those of the call in turn where they do not depend on the BLAS thread count (a limit that ``fn``
    sets with threadpoolctl holds for the whole process while it runs)."""
    if _cores() < 2:
        done = fn(*args, **kwargs)
        return lambda: done
    context = contextvars.copy_context()
    pool = ThreadPoolExecutor(1)
    future = pool.submit(context.run, fn, *args, **kwargs)
    pool.shutdown(wait=False)
    return future.result


def per_group(X, labels, groups, column: str, evaluate, summarise) -> pd.DataFrame:
    """One row per group of entities: ``summarise(evaluate(X_g, labels_g))`` (a dict of columns), or a ``note``
    saying why the group's labels cannot be evaluated (one class, too few members)."""
    X, labels = as_numpy(X), label_array(labels)
    rows = []
    for name, idx in iter_groups(groups):
        row = {column: name, "entities": len(idx)}
        try:
            r = evaluate(X[idx], labels[idx])
        except InputError as e:
            rows.append(dict(row, note=str(e).split(": ", 1)[-1]))
            continue
        rows.append(dict(row, **summarise(r), note=""))
    return drop_empty_note(pd.DataFrame(rows))


def drop_empty_note(df: pd.DataFrame) -> pd.DataFrame:
    """A per-group table without its ``note`` column when no group has a note."""
    return df.drop(columns=["note"]) if "note" in df and not df["note"].fillna("").astype(bool).any() else df


class Standardiser(StandardScaler):
    """scikit-learn's ``StandardScaler`` (centring and scaling) whose ``fit`` on dense float64 rows without NaN takes
    the column means and variances in three passes over the rows instead of scikit-learn's seven (it builds, casts and
    sums a NaN mask to count each column): the same sums in the same order as the first call of scikit-learn's
    ``_incremental_mean_and_var``, so the same ``mean_``, ``var_``, ``scale_`` and ``n_samples_seen_`` bit for bit
    (tested), hence the same probes. The link-prediction operator probes standardise 40,000 x 384 features four times
    (0.3 of 0.4 s per fit went to the scaler); other input (NaN, float32, sample weights) is scikit-learn's own fit."""

    def fit(self, X, y=None, sample_weight=None):
        if not (_handle_zeros_in_scale is not None and self.with_mean and self.with_std and sample_weight is None
                and isinstance(X, np.ndarray) and X.dtype == np.float64 and X.ndim == 2 and len(X) >= 2
                and X.shape[1] >= 1):
            return super().fit(X, y, sample_weight)
        total = X.sum(axis=0)
        if not np.isfinite(total).all():  # a NaN (or an infinity) somewhere: scikit-learn's checks and NaN handling
            return super().fit(X, y, sample_weight)
        super().fit(X[:2], y)  # scikit-learn's validation and attributes (feature count), then the statistics
        count = np.full(X.shape[1], float(len(X)))
        mean = (np.zeros(X.shape[1]) + total) / count
        centred = X - total / count
        correction = centred.sum(axis=0)
        centred **= 2
        spread = centred.sum(axis=0)
        spread -= correction ** 2 / count
        var = spread / count
        self.mean_, self.var_, self.n_samples_seen_ = mean, var, count[0]
        self.scale_ = _handle_zeros_in_scale(np.sqrt(var), copy=False,
                                             constant_mask=_is_constant_feature(var, mean, count[0]))
        return self

