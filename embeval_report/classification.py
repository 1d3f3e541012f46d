r"""Node classification (a linear probe) and clustering alignment: is the label in the vectors?

Implements seed 000 §218.3 (node classification, ``evaluate_node_classification``) and §218.4
(clustering alignment, ``evaluate_clustering``) with the standard protocols. Labels come from a
metadata column (``label``); see :func:`prepare_labels` for what is excluded.

**Node classification** (linearly decodable?)

* Probe: ``StandardScaler`` + multinomial ``LogisticRegression`` (L2, C = 1, lbfgs, max_iter =
  1000), both fitted on the training folds only. Scores from scikit-learn: accuracy
  :math:`\frac1n\sum_i[\hat y_i = y_i]`, micro-F1 (equal to accuracy for single-label data) and
  macro-F1 :math:`\frac1C\sum_c 2P_cR_c/(P_c+R_c)` (every class counts equally).
* Protocol: stratified k-fold cross-validation (k = 5, shuffled with the run's seed). Reported:
  the mean over folds, the standard deviation (ddof 1) and a Student-t interval
  :math:`\bar s \pm t_{k-1}\,\mathrm{sd}/\sqrt k` over the folds. The folds share training data,
  so this interval is approximate and tends to be too narrow (Bengio & Grandvalet 2004).
* Chance: ``DummyClassifier`` ``most_frequent`` (majority class) and ``stratified`` (random guesses
  at the class frequencies; expected accuracy :math:`\sum_c p_c^2`) on the same folds.
* Learning curve over the label budget (the seed's training fractions 0.1, 0.3, …, 0.9), with
  seeded *stratified* shuffle splits, 5 repeats per fraction.

The seed's ``evaluate_node_classification`` uses random (non-stratified) splits, 10 trials per
fraction, no feature scaling, no baseline, and ``multi_class="multinomial"``, which scikit-learn
≥ 1.7 rejects (multinomial is the default for lbfgs; seed catalog Part B, Appendix C).

**Clustering alignment** (clustered?)

* k-means with k = the number of classes on the **L2-normalised** vectors (so it groups by
  direction, as cosine similarity does), ``n_init = 10``, seeded; ``MiniBatchKMeans`` (batch 4096,
  also ``n_init = 10``) above :data:`MINIBATCH_THRESHOLD` entities.
* ``ari``: adjusted Rand index (Hubert & Arabie 1985), 1 for identical partitions and 0 in
  expectation for a random one (it can be negative). ``nmi``: mutual information normalised by the
  arithmetic mean of the two entropies (scikit-learn's default; equal to the V-measure), in
  [0, 1] but *not* corrected for chance. ``ami``: the chance-adjusted version (Vinh, Epps &
  Bailey 2010).
* ``silhouette`` (Rousseeuw 1987) :math:`s(i) = (b(i) - a(i))/\max(a(i), b(i))` with the cosine
  distance :math:`1 - \cos`, of the k-means partition; ``label_silhouette``: the same for the
  classes themselves. Computed exactly within a seeded sample of at most
  :data:`SILHOUETTE_SAMPLE` entities (as ``sklearn.metrics.silhouette_score(sample_size=…)``), by
  chunked matrix products in torch (no n x n matrix). The seed uses the Euclidean distance on the
  raw vectors.
* Uncertainty: ARI / NMI / AMI carry the 2.5–97.5 % range over :data:`N_SEED_RUNS` k-means runs
  with other seeds (algorithmic variability; the entities are fixed); the silhouettes a percentile
  bootstrap over the sampled entities (their per-entity values held fixed).

The seed sweeps k from (true k − 2) to (true k + 3) and picks the k with the best ARI for its
t-SNE figure; here the headline uses the true k and the sweep is a side table and figure.
"""
from __future__ import annotations

import math
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy import stats as sps
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.dummy import DummyClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import (accuracy_score, adjusted_mutual_info_score, adjusted_rand_score, confusion_matrix,
                             f1_score, normalized_mutual_info_score, precision_recall_fscore_support)
from sklearn.model_selection import StratifiedKFold, StratifiedShuffleSplit, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from .display import escape
from .errors import InputError
from .io import iter_groups
from .kernels import as_numpy, chunk_rows, resolve_device, unit_rows
from .plotting import PALETTE, WIDTH
from .results import Metric
from .stats import bootstrap_ci, percentile_interval

N_FOLDS = 5
TRAIN_FRACTIONS = (0.1, 0.3, 0.5, 0.7, 0.9)
N_REPEATS = 5
PROBE_C = 1.0
PROBE_MAX_ITER = 1000
#: the probe runs on a stratified sample of at most this many labelled entities
MAX_PROBE_ENTITIES = 20_000
#: confusion-matrix figure only up to this many classes
MAX_CONFUSION_CLASSES = 15
KMEANS_N_INIT = 10
N_SEED_RUNS = 20
#: seed runs above MINIBATCH_THRESHOLD entities (each run is a full pass over the data)
N_SEED_RUNS_LARGE = 10
#: MiniBatchKMeans above this many entities
MINIBATCH_THRESHOLD = 50_000
MINIBATCH_SIZE = 4096
#: silhouettes are computed within a seeded sample of at most this many entities
SILHOUETTE_SAMPLE = 10_000
#: points drawn in the 2-D projection figure (t-SNE runs on this sample)
PROJECTION_SAMPLE = {"pca": 5000, "tsne": 2000}
#: below this many matrix entries (n x d), scikit-learn runs single-threaded (BLAS and OpenMP):
#: thread start-up and spin-waiting cost more than they save, many times more on a busy machine
_SMALL_PROBLEM = 4_000_000

SEED_NC = "seed 000 §218.3"
SEED_CL = "seed 000 §218.4"


# ---------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------

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

    def exclusion_text(self) -> str:
        """Markdown sentence on the excluded entities ("" when none was excluded)."""
        parts = []
        if self.n_missing:
            parts.append(f"{self.n_missing:,} of {self.n_total:,} entities have no `{escape(self.column)}` and are "
                         "excluded")
        if self.dropped:
            n_drop = sum(self.dropped.values())
            names = ", ".join(f"{escape(k)} ({v})" for k, v in list(self.dropped.items())[:8])
            more = f" and {len(self.dropped) - 8} more" if len(self.dropped) > 8 else ""
            parts.append(f"{len(self.dropped)} class{'es' if len(self.dropped) > 1 else ''} with fewer than "
                         f"{self.min_class_size} members ({names}{more}; {n_drop:,} entities) "
                         f"{'are' if len(self.dropped) > 1 else 'is'} dropped, since a stratified "
                         f"{self.min_class_size}-fold split cannot place one in every test fold")
        if self.sampled_from:
            parts.append(f"the evaluation uses a stratified random sample of {self.n:,} of the "
                         f"{self.sampled_from:,} labelled entities")
        if not parts:
            return ""
        text = "; ".join(parts)
        return text[0].upper() + text[1:] + "."


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


def prepare_labels(labels, *, min_class_size: int = N_FOLDS, column: str = "label", n: int | None = None,
                   what: str = "node classification and clustering") -> LabelSet:
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
    arr = labels.to_numpy(dtype=object) if isinstance(labels, pd.Series) else np.asarray(labels, dtype=object)
    if arr.ndim != 1 or (n is not None and len(arr) != n):
        raise InputError(f"metadata column '{column}': expected one label per vector ({n}), got shape {arr.shape}")
    if min_class_size < 2:
        raise ValueError("min_class_size must be at least 2 (a class needs a member in training and in test)")
    names = np.array([_label_text(v) for v in arr], dtype=object)
    present = np.array([v is not None for v in names], dtype=bool)
    n_total, n_missing = len(arr), int((~present).sum())
    if not present.any():
        raise InputError(f"metadata column '{column}': no entity has a label (all {n_total:,} values are missing); "
                         f"{what} need labels")
    ls = _make_labelset(column, np.flatnonzero(present), names[present], n_total, n_missing, min_class_size)
    _check_classes(ls, what)
    return ls


def _check_classes(ls: LabelSet, what: str) -> None:
    if ls.n_classes >= 2:
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
            what: str = "node classification and clustering") -> LabelSet:
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


def _as_labelset(labels, n: int, min_class_size: int, column: str) -> LabelSet:
    if isinstance(labels, LabelSet):
        if labels.min_class_size < min_class_size:
            return _subset(labels, np.arange(labels.n), min_class_size)
        return labels
    return prepare_labels(labels, min_class_size=min_class_size, column=column, n=n)


# ---------------------------------------------------------------------------------------------
# Node classification: linear probe with stratified k-fold cross-validation
# ---------------------------------------------------------------------------------------------

#: name -> (label, LaTeX formula)
CLASSIFICATION_METRICS = {
    "accuracy": ("Probe accuracy", r"\mathrm{acc} = \tfrac1n \sum_i [\hat y_i = y_i]"),
    "micro_f1": ("Probe micro-F1", r"F_1^{\mu} = \frac{2\sum_c TP_c}{2\sum_c TP_c + \sum_c FP_c + \sum_c FN_c}"
                                   r" \;(= \mathrm{acc}\text{ for one label per entity})"),
    "macro_f1": ("Probe macro-F1", r"F_1^{M} = \tfrac1C \sum_c \frac{2 P_c R_c}{P_c + R_c}"),
}
_SKLEARN_FN = {"accuracy": "accuracy_score", "micro_f1": "f1_score", "macro_f1": "f1_score"}
MODEL_NAMES = {"probe": "logistic-regression probe", "majority": "majority class (DummyClassifier most_frequent)",
               "stratified": "stratified random (DummyClassifier stratified)"}


def make_probe(C: float = PROBE_C, max_iter: int = PROBE_MAX_ITER, seed: int = 0):
    """The probe: standardisation then multinomial L2 logistic regression (lbfgs)."""
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=max_iter, random_state=seed))


def _threads(n: int, d: int):
    """Single-threaded BLAS and OpenMP for small problems, where thread start-up dominates (and contends)."""
    return threadpool_limits(1) if n * d <= _SMALL_PROBLEM else nullcontext()


def fold_scores(y_true, y_pred, n_classes: int) -> dict[str, float]:
    """Accuracy, micro-F1 and macro-F1 over all ``n_classes`` classes (absent predictions score 0)."""
    labels = np.arange(n_classes)
    return {"accuracy": float(accuracy_score(y_true, y_pred)),
            "micro_f1": float(f1_score(y_true, y_pred, labels=labels, average="micro", zero_division=0)),
            "macro_f1": float(f1_score(y_true, y_pred, labels=labels, average="macro", zero_division=0))}


def t_interval(values, level: float = 0.95, bounds=(0.0, 1.0)) -> tuple[float, float]:
    """Student-t interval of the mean of ``values``: mean ± t_{k−1} sd/√k (clipped to ``bounds``)."""
    v = np.asarray(values, float)
    k = len(v)
    if k < 2:
        return float("nan"), float("nan")
    half = sps.t.ppf(0.5 + level / 2, k - 1) * v.std(ddof=1) / math.sqrt(k)
    return float(np.clip(v.mean() - half, *bounds)), float(np.clip(v.mean() + half, *bounds))


@dataclass(frozen=True)
class ClassificationResult:
    """Everything the node-classification chapter shows."""

    labels: LabelSet
    values: dict                # name -> point value (probe metrics and baselines)
    metrics: dict               # accuracy, micro_f1, macro_f1 -> Metric
    folds: pd.DataFrame         # fold, model, n_test, accuracy, micro_f1, macro_f1
    predictions: np.ndarray     # out-of-fold probe prediction (class code) of each entity
    confusion: np.ndarray       # C x C counts, rows = true class, out-of-fold
    per_class: pd.DataFrame     # class, n, precision, recall, F1, most confused with
    learning: pd.DataFrame      # one row per (train_fraction, repeat)
    n_folds: int
    level: float
    info: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.labels.n

    @property
    def learning_summary(self) -> pd.DataFrame:
        """Mean and sd (ddof 1) over repeats per training fraction: the seed's table plus n_train."""
        if not len(self.learning):
            return pd.DataFrame(columns=["train_fraction", "n_train", "repeats", "accuracy_mean", "accuracy_std",
                                         "macro_f1_mean", "macro_f1_std", "majority_accuracy"])
        g = self.learning.groupby("train_fraction")
        return pd.DataFrame({"n_train": g["n_train"].first(), "repeats": g.size(),
                             "accuracy_mean": g["accuracy"].mean(), "accuracy_std": g["accuracy"].std(),
                             "macro_f1_mean": g["macro_f1"].mean(), "macro_f1_std": g["macro_f1"].std(),
                             "majority_accuracy": g["majority_accuracy"].mean()}).reset_index()


def evaluate_node_classification(X, labels, *, n_folds: int = N_FOLDS, train_fractions=TRAIN_FRACTIONS,
                                 n_repeats: int = N_REPEATS, C: float = PROBE_C, max_iter: int = PROBE_MAX_ITER,
                                 max_entities: int | None = MAX_PROBE_ENTITIES, level: float = 0.95, seed: int = 0,
                                 column: str = "label") -> ClassificationResult:
    r"""Linear-probe node classification with stratified k-fold CV, chance baselines and a learning curve.

    Parameters
    ----------
    X : array (n, d) or torch tensor
    labels : one label per row (missing allowed) or a :class:`LabelSet`
    n_folds : folds of the stratified CV (shuffled with ``seed``); classes smaller than this are dropped
    train_fractions, n_repeats : learning curve (empty ``train_fractions`` skips it)
    C, max_iter : the logistic regression's inverse L2 strength and iteration cap
    max_entities : stratified subsample above this many labelled entities (``None``: all)

    Metrics (all higher is better; no seed threshold, so no verdict): ``accuracy``,
    ``micro_f1`` and ``macro_f1`` — means over the folds with a Student-t interval over folds.
    Reference: seed 000 §218.3; scikit-learn ``accuracy_score`` / ``f1_score``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> y = np.repeat(["a", "b"], 50)
    >>> X = rng.standard_normal((100, 4)) + 5 * (y == "a")[:, None]
    >>> evaluate_node_classification(X, y, train_fractions=()).values["accuracy"]
    1.0
    """
    X = as_numpy(X)
    if n_folds < 2:
        raise ValueError("n_folds must be at least 2")
    ls = stratified_subsample(_as_labelset(labels, len(X), n_folds, column), max_entities, seed=seed)
    Xl = np.asarray(X[ls.rows], dtype=np.float64)
    y, n_cls = ls.codes, ls.n_classes
    cv = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    rows, oof, not_converged = [], np.empty(ls.n, dtype=np.int64), 0
    with _threads(*Xl.shape), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        for f, (tr, te) in enumerate(cv.split(Xl, y)):
            models = {"probe": make_probe(C, max_iter, seed), "majority": DummyClassifier(strategy="most_frequent"),
                      "stratified": DummyClassifier(strategy="stratified", random_state=seed + f)}
            for name, model in models.items():
                pred = model.fit(Xl[tr], y[tr]).predict(Xl[te])
                if name == "probe":
                    oof[te] = pred
                rows.append(dict(fold=f + 1, model=name, n_test=len(te), **fold_scores(y[te], pred, n_cls)))
        learning = _learning_curve(Xl, y, train_fractions, n_repeats, C, max_iter, seed)
        not_converged = sum(issubclass(w.category, ConvergenceWarning) for w in caught)
    folds = pd.DataFrame(rows)
    values, metrics = {}, {}
    ci_method = (f"{level:.0%} Student-t interval over the {n_folds} stratified CV folds (mean ± t·sd/√k; "
                 "approximate: the folds share training data)")
    for model in MODEL_NAMES:
        t = folds[folds.model == model]
        for name in CLASSIFICATION_METRICS:
            key = name if model == "probe" else f"{model}_{name}"
            values[key] = float(t[name].mean())
            values[key + "_std"] = float(t[name].std(ddof=1))
            values[key + "_ci_low"], values[key + "_ci_high"] = t_interval(t[name], level)
    p = ls.counts / ls.n
    values["chance_accuracy_expected"] = float((p ** 2).sum())
    for name, (label, formula) in CLASSIFICATION_METRICS.items():
        lo, hi = values[name + "_ci_low"], values[name + "_ci_high"]
        metrics[name] = Metric(name=name, value=values[name], direction="higher",
                               reference=f"{SEED_NC}; scikit-learn {_SKLEARN_FN[name]}",
                               ci_low=lo, ci_high=hi, verdict=None, label=label, formula=formula, ci_method=ci_method)
    conf = confusion_matrix(y, oof, labels=np.arange(n_cls))
    return ClassificationResult(
        labels=ls, values=values, metrics=metrics, folds=folds, predictions=oof, confusion=conf,
        per_class=_per_class_table(ls, oof, conf), learning=learning, n_folds=n_folds, level=level,
        info=dict(n_entities=ls.n, n_classes=n_cls, n_folds=n_folds, n_missing=ls.n_missing,
                  dropped_classes=ls.dropped, sampled_from=ls.sampled_from, C=C, max_iter=max_iter,
                  probe="StandardScaler + LogisticRegression(lbfgs, L2)", not_converged_fits=int(not_converged),
                  train_fractions=list(train_fractions), repeats=n_repeats, ci_method=ci_method))


def _learning_curve(Xl, y, fractions, n_repeats: int, C: float, max_iter: int, seed: int) -> pd.DataFrame:
    """Probe scores on the held-out rest after training on a stratified fraction (seeded repeats).

    A fraction whose training or test part cannot hold one entity of every class is skipped.
    """
    n_cls = int(y.max()) + 1
    rows = []
    for frac in fractions:
        splitter = StratifiedShuffleSplit(n_splits=n_repeats, train_size=float(frac), random_state=seed)
        try:
            splits = list(splitter.split(Xl, y))
        except ValueError:  # too few entities for this fraction
            continue
        for r, (tr, te) in enumerate(splits):
            pred = make_probe(C, max_iter, seed).fit(Xl[tr], y[tr]).predict(Xl[te])
            majority = np.bincount(y[tr], minlength=n_cls).argmax()
            s = fold_scores(y[te], pred, n_cls)
            rows.append(dict(train_fraction=float(frac), n_train=len(tr), repeat=r + 1, accuracy=s["accuracy"],
                             macro_f1=s["macro_f1"], majority_accuracy=float((y[te] == majority).mean())))
    return pd.DataFrame(rows, columns=["train_fraction", "n_train", "repeat", "accuracy", "macro_f1",
                                       "majority_accuracy"])


def _per_class_table(ls: LabelSet, pred, conf) -> pd.DataFrame:
    """Per class, from the out-of-fold predictions: n, precision, recall, F1, most confused with."""
    y = ls.codes
    prec, rec, f1, support = precision_recall_fscore_support(y, pred, labels=np.arange(ls.n_classes),
                                                             zero_division=0)
    off = conf.astype(float).copy()
    np.fill_diagonal(off, -1)
    rows = []
    for c, name in enumerate(ls.classes):
        j = int(off[c].argmax())
        share = conf[c, j] / max(conf[c].sum(), 1)
        rows.append({"class": name, "n": int(support[c]), "precision": float(prec[c]), "recall": float(rec[c]),
                     "F1": float(f1[c]), "most often predicted instead": ls.classes[j] if conf[c, j] else "—",
                     "share of the class %": 100 * float(share) if conf[c, j] else 0.0})
    return pd.DataFrame(rows).sort_values(["F1", "n"], ascending=[False, False], ignore_index=True)


def confused_pairs(r: ClassificationResult, top: int = 5, min_share: float = 0.02) -> pd.DataFrame:
    """The largest off-diagonal cells of the confusion matrix, as shares of the true class."""
    conf = r.confusion
    share = conf / np.maximum(conf.sum(1, keepdims=True), 1)
    rows = [{"true class": r.labels.classes[i], "predicted as": r.labels.classes[j], "entities": int(conf[i, j]),
             "share of the true class %": 100 * float(share[i, j])}
            for i in range(len(conf)) for j in range(len(conf)) if i != j and share[i, j] >= min_share]
    df = pd.DataFrame(rows, columns=["true class", "predicted as", "entities", "share of the true class %"])
    return df.sort_values("share of the true class %", ascending=False, ignore_index=True).head(top)


def summary_table(r: ClassificationResult) -> pd.DataFrame:
    """Probe and chance baselines side by side: mean ± sd over folds and the t-interval."""
    rows = []
    for model, text in MODEL_NAMES.items():
        row = {"model": text}
        for name, col in (("accuracy", "accuracy"), ("micro_f1", "micro-F1"), ("macro_f1", "macro-F1")):
            key = name if model == "probe" else f"{model}_{name}"
            lo, hi = r.values[key + "_ci_low"], r.values[key + "_ci_high"]
            row[col] = f"{r.values[key]:.3f} ± {r.values[key + '_std']:.3f}"
            if name != "micro_f1":
                row[f"{col} {r.level:.0%} CI"] = f"{lo:.3f} – {hi:.3f}"
        rows.append(row)
    return pd.DataFrame(rows)


def learning_display_table(r: ClassificationResult) -> pd.DataFrame:
    """The learning curve as the report shows it (percentages)."""
    t = r.learning_summary
    return pd.DataFrame({"training fraction %": 100 * t["train_fraction"], "training entities": t["n_train"],
                         "repeats": t["repeats"], "accuracy %": 100 * t["accuracy_mean"],
                         "accuracy sd": 100 * t["accuracy_std"], "macro-F1 %": 100 * t["macro_f1_mean"],
                         "macro-F1 sd": 100 * t["macro_f1_std"], "majority baseline %": 100 * t["majority_accuracy"]})


def node_classification_by_group(X, labels, groups, *, column: str = "kind", n_folds: int = N_FOLDS,
                                  max_entities: int | None = MAX_PROBE_ENTITIES, level: float = 0.95, seed: int = 0,
                                  label_column: str = "label") -> pd.DataFrame:
    """The probe within each group of entities (users, items, …): its own CV, no learning curve.

    A group whose labels cannot be evaluated (one class, too few members) gets a row that says so.
    """
    X = as_numpy(X)
    labels = np.asarray(labels.to_numpy(dtype=object) if isinstance(labels, pd.Series) else labels, dtype=object)
    rows = []
    for name, idx in iter_groups(groups):
        row = {column: name, "entities": len(idx)}
        try:
            r = evaluate_node_classification(X[idx], labels[idx], n_folds=n_folds, train_fractions=(),
                                             max_entities=max_entities, level=level, seed=seed, column=label_column)
        except InputError as e:
            rows.append(dict(row, note=str(e).split(": ", 1)[-1]))
            continue
        v = r.values
        rows.append(dict(row, evaluated=r.n, classes=r.labels.n_classes, accuracy=v["accuracy"],
                         **{f"accuracy {level:.0%} CI": f"{v['accuracy_ci_low']:.3f} – {v['accuracy_ci_high']:.3f}"},
                         **{"macro-F1": v["macro_f1"], "majority baseline": v["majority_accuracy"],
                            "lift (points)": 100 * (v["accuracy"] - v["majority_accuracy"]), "note": ""}))
    return _drop_empty_note(pd.DataFrame(rows))


def _drop_empty_note(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["note"]) if "note" in df and not df["note"].fillna("").astype(bool).any() else df


def recorded_probe(results_dir) -> dict | None:
    """The node-classification chapter's recorded probe accuracy and majority baseline, if it ran."""
    from .results import read_results

    rec = read_results(results_dir).get("node_classification") if results_dir else None
    try:
        return {"accuracy": rec["metrics"]["accuracy"]["value"],
                "majority": rec["info"]["baselines"]["majority"]["accuracy"]}
    except (TypeError, KeyError):
        return None


def classification_record(r: ClassificationResult, by_group: pd.DataFrame | None = None, column: str | None = None
                          ) -> dict:
    """JSON-serialisable context for ``Recorder.note``: baselines, per-class scores, learning curve."""
    v = r.values
    baselines = {m: {k: v[f"{m}_{k}"] for k in CLASSIFICATION_METRICS} for m in ("majority", "stratified")}
    baselines["expected_stratified_accuracy"] = v["chance_accuracy_expected"]
    out = dict(r.info, classes=list(r.labels.classes), baselines=baselines,
               fold_scores=r.folds.to_dict(orient="records"), per_class=r.per_class.to_dict(orient="records"),
               learning_curve=r.learning_summary.to_dict(orient="records"))
    if by_group is not None:
        out["by_group"] = {"column": column, "rows": by_group.to_dict(orient="records")}
    return out


# ---------------------------------------------------------------------------------------------
# Clustering alignment
# ---------------------------------------------------------------------------------------------

#: name -> (label, LaTeX formula, reference)
CLUSTERING_METRICS = {
    "ari": ("Adjusted Rand index (ARI)",
            r"\mathrm{ARI} = \frac{\sum_{ij}\binom{n_{ij}}{2} - E}{\tfrac12[\sum_i\binom{a_i}{2} + \sum_j\binom{b_j}{2}] - E},"
            r"\ E = \frac{\sum_i\binom{a_i}{2}\sum_j\binom{b_j}{2}}{\binom n2}",
            f"Hubert & Arabie 1985; {SEED_CL}; scikit-learn adjusted_rand_score (0 = chance, 1 = identical)"),
    "nmi": ("Normalized mutual information (NMI)", r"\mathrm{NMI} = \frac{I(Y;K)}{\tfrac12[H(Y) + H(K)]}",
            f"{SEED_CL}; scikit-learn normalized_mutual_info_score (arithmetic mean; not chance-corrected)"),
    "ami": ("Adjusted mutual information (AMI)",
            r"\mathrm{AMI} = \frac{I(Y;K) - \mathbb{E}[I]}{\tfrac12[H(Y) + H(K)] - \mathbb{E}[I]}",
            "Vinh, Epps & Bailey 2010; scikit-learn adjusted_mutual_info_score (0 = chance)"),
    "silhouette": ("Silhouette of the k-means clusters (cosine)",
                   r"s(i) = \frac{b(i) - a(i)}{\max(a(i), b(i))},\ d = 1 - \cos",
                   f"Rousseeuw 1987; {SEED_CL} (seed: Euclidean); scikit-learn silhouette_score(metric='cosine')"),
    "label_silhouette": ("Silhouette of the label classes (cosine)",
                         r"s(i)\text{ with the classes as clusters},\ d = 1 - \cos",
                         "Rousseeuw 1987; scikit-learn silhouette_score(metric='cosine') on the labels"),
}


def kmeans_fit(U, k: int, *, n_init: int = KMEANS_N_INIT, seed: int = 0,
               minibatch_threshold: int = MINIBATCH_THRESHOLD) -> tuple[np.ndarray, float, str]:
    """k-means labels, inertia and algorithm name (``MiniBatchKMeans`` above ``minibatch_threshold`` rows)."""
    with _threads(*U.shape):
        if len(U) > minibatch_threshold:
            km = MiniBatchKMeans(n_clusters=k, n_init=n_init, random_state=seed, batch_size=MINIBATCH_SIZE).fit(U)
            return km.labels_.astype(np.int64), float(km.inertia_), f"MiniBatchKMeans (batch {MINIBATCH_SIZE})"
        km = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(U)
    return km.labels_.astype(np.int64), float(km.inertia_), "KMeans (Lloyd)"


def silhouette_values(X, labels, *, device="auto") -> np.ndarray:
    r"""Per-entity silhouette :math:`s(i) = (b(i) - a(i)) / \max(a(i), b(i))` with cosine distance.

    :math:`a(i)` is the mean distance :math:`1 - \cos` to the other members of :math:`i`'s cluster,
    :math:`b(i)` the smallest mean distance to another cluster (Rousseeuw 1987); :math:`s(i) = 0`
    in a cluster of one (scikit-learn's convention). Exact, by chunked matrix products in torch:
    each block of rows gets its distances to all rows and sums them per cluster through a one-hot
    matrix, so memory is bounded (no n x n matrix). Matches
    ``sklearn.metrics.silhouette_samples(X, labels, metric="cosine")``.
    """
    X = as_numpy(X)
    codes, _ = pd.factorize(pd.Series(np.asarray(labels, dtype=object)), sort=True)
    m = len(X)
    if len(codes) != m:
        raise ValueError(f"labels: expected {m} values, got {len(codes)}")
    k = int(codes.max()) + 1 if m else 0
    if not 2 <= k <= m - 1:
        raise ValueError(f"the silhouette needs 2 ≤ number of clusters ≤ n − 1; got {k} clusters for n = {m}")
    dev = resolve_device(device)
    U = unit_rows(torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float64, device=dev))
    code_t = torch.as_tensor(codes, device=dev)
    onehot = torch.zeros(m, k, dtype=torch.float64, device=dev)
    onehot[torch.arange(m, device=dev), code_t] = 1.0
    sizes = onehot.sum(0)
    out = torch.empty(m, dtype=torch.float64, device=dev)
    step = chunk_rows(m, m * 8 * 2)
    for s in range(0, m, step):
        u = U[s:s + step]
        r = torch.arange(len(u), device=dev)
        D = (1.0 - u @ U.T).clamp_(0.0, 2.0)
        D[r, r + s] = 0.0
        S = D @ onehot                                  # (chunk, k): summed distance to each cluster
        own = code_t[s:s + step]
        own_size = sizes[own]
        a = S[r, own] / (own_size - 1).clamp_min(1)
        S[r, own] = torch.inf
        b = (S / sizes).min(1).values
        sil = (b - a) / torch.maximum(a, b)
        out[s:s + step] = torch.where((own_size > 1) & torch.isfinite(sil), sil, torch.zeros_like(sil))
    return out.cpu().numpy()


def match_clusters(contingency: np.ndarray) -> np.ndarray:
    """One-to-one matching of clusters (columns) to classes (rows) maximising the entities matched
    (Hungarian algorithm); ``out[j]`` is the class of cluster ``j`` (−1 when unmatched)."""
    rows, cols = linear_sum_assignment(-np.asarray(contingency, float))
    out = np.full(contingency.shape[1], -1, dtype=np.int64)
    out[cols] = rows
    return out


@dataclass(frozen=True)
class ClusteringResult:
    """Everything the clustering chapter shows."""

    labels: LabelSet
    k: int
    values: dict                 # metric name -> point value (+ cluster_accuracy, inertia, …)
    metrics: dict                # ari, nmi, ami, silhouette, label_silhouette -> Metric
    clusters: np.ndarray         # k-means cluster of each labelled entity (primary run)
    contingency: np.ndarray      # C x k counts (rows: classes, columns: clusters)
    matching: np.ndarray         # class index matched to each cluster
    seed_runs: pd.DataFrame      # seed, ari, nmi, ami, inertia of the runs with other seeds
    sweep: pd.DataFrame | None   # k, ari, nmi, ami, silhouette, inertia around the true k
    sample: np.ndarray           # positions (into labels.rows) of the silhouette sample
    silhouettes: np.ndarray      # per sampled entity, k-means partition
    label_silhouettes: np.ndarray  # per sampled entity, label classes
    algorithm: str
    level: float
    info: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.labels.n


def _sample_positions(n: int, size: int | None, seed: int, salt: int) -> np.ndarray:
    if size is None or n <= size:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, 96, salt]).choice(n, int(size), replace=False))


def _partition_scores(y, clusters) -> dict[str, float]:
    return {"ari": float(adjusted_rand_score(y, clusters)), "nmi": float(normalized_mutual_info_score(y, clusters)),
            "ami": float(adjusted_mutual_info_score(y, clusters))}


def _unit(X) -> np.ndarray:
    """L2-normalised rows, float32 for float32 input (k-means memory at large n), else float64."""
    X = np.asarray(X)
    return unit_rows(torch.as_tensor(X, dtype=torch.float32 if X.dtype == np.float32 else torch.float64)).numpy()


def evaluate_clustering(X, labels, *, n_init: int = KMEANS_N_INIT, n_seed_runs: int = N_SEED_RUNS,
                        silhouette_sample: int | None = SILHOUETTE_SAMPLE, sweep: bool = True,
                        minibatch_threshold: int = MINIBATCH_THRESHOLD, min_class_size: int = N_FOLDS,
                        n_boot: int = 1000, level: float = 0.95, seed: int = 0, device="auto",
                        column: str = "label") -> ClusteringResult:
    r"""k-means with k = number of classes on the L2-normalised vectors, scored against the labels.

    Parameters
    ----------
    X : array (n, d) or torch tensor
    labels : one label per row (missing allowed) or a :class:`LabelSet` (classes smaller than
        ``min_class_size`` dropped, as in the node-classification chapter)
    n_init : k-means restarts per run (the best inertia is kept)
    n_seed_runs : further runs with seeds ``seed + 1 …`` for the ARI / NMI / AMI intervals (0: none; at most
        :data:`N_SEED_RUNS_LARGE` above ``minibatch_threshold`` entities)
    silhouette_sample : silhouettes within a seeded sample of at most this many entities (``None``: all)
    sweep : also run k from max(2, C − 2) to C + 3 (the seed's range)

    Metrics (higher is better; no seed threshold, so no verdict): ``ari``, ``nmi``, ``ami``,
    ``silhouette`` (k-means partition) and ``label_silhouette`` (classes), cosine distance.
    Reference: seed 000 §218.4; scikit-learn ``adjusted_rand_score``,
    ``normalized_mutual_info_score``, ``adjusted_mutual_info_score``, ``silhouette_score``.
    """
    X = as_numpy(X)
    ls = _as_labelset(labels, len(X), min_class_size, column)
    U = _unit(X[ls.rows])
    y, k = ls.codes, ls.n_classes
    if ls.n <= k:
        raise InputError(f"metadata column '{ls.column}': clustering needs more labelled entities ({ls.n}) than "
                         f"classes ({k})")
    clusters, inertia, algorithm = kmeans_fit(U, k, n_init=n_init, seed=seed, minibatch_threshold=minibatch_threshold)
    values = _partition_scores(y, clusters)
    values["inertia"] = inertia
    if ls.n > minibatch_threshold:
        n_seed_runs = min(n_seed_runs, N_SEED_RUNS_LARGE)
    runs = []
    for r in range(1, n_seed_runs + 1):
        c, inert, _ = kmeans_fit(U, k, n_init=n_init, seed=seed + r, minibatch_threshold=minibatch_threshold)
        runs.append(dict(seed=seed + r, inertia=inert, **_partition_scores(y, c)))
    seed_runs = pd.DataFrame(runs, columns=["seed", "inertia", "ari", "nmi", "ami"])
    sample = _sample_positions(ls.n, silhouette_sample, seed, 1)
    sil = silhouette_values(U[sample], clusters[sample], device=device) if len(np.unique(clusters[sample])) > 1 \
        else np.zeros(len(sample))
    lab_sil = silhouette_values(U[sample], y[sample], device=device) if len(np.unique(y[sample])) > 1 \
        else np.zeros(len(sample))
    values["silhouette"], values["label_silhouette"] = float(sil.mean()), float(lab_sil.mean())
    cont = np.zeros((k, k), dtype=np.int64)
    np.add.at(cont, (y, clusters), 1)
    matching = match_clusters(cont)
    values["cluster_accuracy"] = float(cont[matching, np.arange(k)].sum() / ls.n)
    sample_text = (f"all {ls.n:,} entities" if len(sample) == ls.n else
                   f"a seeded random sample of {len(sample):,} of the {ls.n:,} entities")
    seed_method = (f"{level:.0%} range (percentiles) over {n_seed_runs} k-means runs with seeds {seed + 1}–"
                   f"{seed + n_seed_runs}, n_init = {n_init} each: algorithmic variability, entities fixed"
                   if n_seed_runs >= 2 else "")
    boot_method = (f"{level:.0%} percentile bootstrap over the entities of {sample_text} ({n_boot} resamples; "
                   "per-entity silhouettes held fixed)")
    metrics = {}
    for name, (label, formula, ref) in CLUSTERING_METRICS.items():
        if name in ("ari", "nmi", "ami"):
            lo, hi = percentile_interval(seed_runs[name], level) if n_seed_runs >= 2 else (None, None)
            method = seed_method
        else:
            per = sil if name == "silhouette" else lab_sil
            lo, hi = bootstrap_ci(np.mean, per, level=level, n_boot=n_boot, seed=seed, method="percentile") \
                if n_boot and len(per) > 1 else (None, None)
            method = boot_method if n_boot else ""
        metrics[name] = Metric(name=name, value=values[name], direction="higher", reference=ref, ci_low=lo,
                               ci_high=hi, verdict=None, label=label, formula=formula, ci_method=method)
    sweep_table = _k_sweep(U, y, k, clusters, inertia, sample, n_init, seed, minibatch_threshold, device) \
        if sweep else None
    return ClusteringResult(
        labels=ls, k=k, values=values, metrics=metrics, clusters=clusters, contingency=cont, matching=matching,
        seed_runs=seed_runs, sweep=sweep_table, sample=sample, silhouettes=sil, label_silhouettes=lab_sil,
        algorithm=algorithm, level=level,
        info=dict(n_entities=ls.n, n_classes=k, n_missing=ls.n_missing, dropped_classes=ls.dropped,
                  algorithm=algorithm, n_init=n_init, n_seed_runs=n_seed_runs, normalised="L2 (unit vectors)",
                  silhouette_sample=int(len(sample)), silhouette_distance="cosine (1 - cos)",
                  minibatch_threshold=minibatch_threshold, seed=seed, inertia=inertia,
                  cluster_accuracy=values["cluster_accuracy"]))


def _k_sweep(U, y, k, clusters, inertia, sample, n_init, seed, minibatch_threshold, device) -> pd.DataFrame:
    """Scores for k from max(2, C − 2) to C + 3 (the seed's range; the true k re-uses the main run)."""
    rows = []
    for kk in range(max(2, k - 2), min(k + 4, len(U))):
        c, inert = (clusters, inertia) if kk == k else kmeans_fit(U, kk, n_init=n_init, seed=seed,
                                                                  minibatch_threshold=minibatch_threshold)[:2]
        sil = float(silhouette_values(U[sample], c[sample], device=device).mean()) \
            if 2 <= len(np.unique(c[sample])) <= len(sample) - 1 else float("nan")
        rows.append(dict(k=kk, **_partition_scores(y, c), silhouette=sil, inertia=inert))
    return pd.DataFrame(rows)


def contingency_table(r: ClusteringResult) -> pd.DataFrame:
    """Classes x clusters counts, clusters ordered by the class they are matched to."""
    order = np.argsort(np.where(r.matching >= 0, r.matching, r.k + np.arange(r.k)), kind="stable")
    cols = [f"c{j} ({r.labels.classes[r.matching[j]]})" if r.matching[j] >= 0 else f"c{j}" for j in order]
    df = pd.DataFrame(r.contingency[:, order], columns=cols)
    df.insert(0, "class", list(r.labels.classes))
    df["entities"] = r.contingency.sum(1)
    return df


def clustering_by_group(X, labels, groups, *, column: str = "kind", min_class_size: int = N_FOLDS,
                        silhouette_sample: int | None = SILHOUETTE_SAMPLE, seed: int = 0, device="auto",
                        label_column: str = "label") -> pd.DataFrame:
    """k-means alignment within each group of entities (one seeded run each, no intervals, no sweep)."""
    X = as_numpy(X)
    labels = np.asarray(labels.to_numpy(dtype=object) if isinstance(labels, pd.Series) else labels, dtype=object)
    rows = []
    for name, idx in iter_groups(groups):
        row = {column: name, "entities": len(idx)}
        try:
            r = evaluate_clustering(X[idx], labels[idx], n_seed_runs=0, silhouette_sample=silhouette_sample,
                                    sweep=False, n_boot=0, min_class_size=min_class_size, seed=seed, device=device,
                                    column=label_column)
        except InputError as e:
            rows.append(dict(row, note=str(e).split(": ", 1)[-1]))
            continue
        v = r.values
        rows.append(dict(row, evaluated=r.n, k=r.k, ARI=v["ari"], NMI=v["nmi"], AMI=v["ami"],
                         **{"matched %": 100 * v["cluster_accuracy"], "silhouette (clusters)": v["silhouette"],
                            "silhouette (labels)": v["label_silhouette"], "note": ""}))
    return _drop_empty_note(pd.DataFrame(rows))


def partition_agreement(clusters, other) -> dict[str, float]:
    """ARI and NMI between the k-means clusters and another column (e.g. ``kind``), missing values skipped."""
    other = pd.Series(np.asarray(other, dtype=object))
    ok = other.notna().to_numpy()
    if ok.sum() < 2:
        return {"ari": float("nan"), "nmi": float("nan")}
    o = other[ok].astype(str).to_numpy()
    return {"ari": float(adjusted_rand_score(o, clusters[ok])),
            "nmi": float(normalized_mutual_info_score(o, clusters[ok]))}


def clustering_record(r: ClusteringResult, by_group: pd.DataFrame | None = None, column: str | None = None,
                      kind_agreement: dict | None = None) -> dict:
    """JSON-serialisable context for ``Recorder.note``."""
    out = dict(r.info, classes=list(r.labels.classes), seed_runs=r.seed_runs.to_dict(orient="records"),
               contingency=contingency_table(r).to_dict(orient="records"),
               sweep=None if r.sweep is None else r.sweep.to_dict(orient="records"))
    if by_group is not None:
        out["by_group"] = {"column": column, "rows": by_group.to_dict(orient="records")}
    if kind_agreement is not None:
        out["clusters_vs_kind"] = {"column": column, **kind_agreement}
    return out


@dataclass(frozen=True)
class Projection:
    """2-D coordinates of a sample of the labelled entities, for the figures."""

    method: str                # "pca" | "tsne"
    positions: np.ndarray      # positions into the LabelSet's rows
    coords: np.ndarray         # (m, 2)
    explained: tuple | None    # PCA: share of variance of the two axes


def project(X, labels: LabelSet, *, method: str = "pca", sample_size: int | None = None, seed: int = 0,
            device="auto") -> Projection:
    """PCA (of all the unit vectors, exact via the covariance) or t-SNE (cosine, on a seeded sample).

    The sample (``PROJECTION_SAMPLE[method]`` by default) only bounds what is drawn and, for
    t-SNE, the cost: t-SNE is O(m log m) per iteration and distorts global distances, PCA is linear
    and keeps them.
    """
    from .isotropy import PrincipalDirections

    X = as_numpy(X)
    size = sample_size or PROJECTION_SAMPLE.get(method)
    if method not in PROJECTION_SAMPLE:
        raise ValueError(f"method must be 'pca' or 'tsne', not {method!r}")
    pos = _sample_positions(labels.n, size, seed, 2)
    if method == "pca":
        U = _unit(X[labels.rows])
        pcs = PrincipalDirections.fit(U, device=device)
        coords = (U[pos] - pcs.mean) @ pcs.vectors[:, :2]
        lam = np.clip(pcs.eigenvalues, 0, None)
        return Projection("pca", pos, coords, tuple(float(x) for x in lam[:2] / lam.sum()))
    from sklearn.manifold import TSNE
    V = X[labels.rows[pos]].astype(np.float64)
    perplexity = float(min(30.0, max(2.0, (len(pos) - 1) / 3)))
    with _threads(*V.shape):
        coords = TSNE(n_components=2, perplexity=perplexity, init="pca", metric="cosine",
                      random_state=seed).fit_transform(V)
    return Projection("tsne", pos, coords, None)


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _names(items, limit: int = 3) -> str:
    items = list(items)[:limit]
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1] if items else ""


def decodability(r: ClassificationResult) -> str:
    """A word for how well the probe reads the label, from its lift over the majority class."""
    v = r.values
    maj, acc = v["majority_accuracy"], v["accuracy"]
    gain = (acc - maj) / max(1 - maj, 1e-12)
    if not v["accuracy_ci_low"] > maj:
        return "not detectably"
    return "almost perfectly" if gain >= 0.9 else "strongly" if gain >= 0.7 else "clearly" if gain >= 0.4 \
        else "partly" if gain >= 0.15 else "weakly"


def classification_narrative(r: ClassificationResult, by_group: pd.DataFrame | None = None,
                             column: str | None = None) -> str:
    """Markdown paragraphs that say what this set's probe numbers mean."""
    v, m, ls = r.values, r.metrics, r.labels
    col = escape(ls.column)
    top_class = escape(ls.classes[0])
    reading = decodability(r)
    maj, acc = v["majority_accuracy"], v["accuracy"]
    gain = (acc - maj) / max(1 - maj, 1e-12)
    parts = [
        f"**The `{col}` is {reading} linearly decodable from the vectors.** A logistic-regression probe on the "
        f"standardised vectors predicts the {ls.n_classes} classes of {ls.n:,} entities with accuracy "
        f"{m['accuracy'].text('.3f')} in {r.n_folds}-fold stratified cross-validation. Always answering the most "
        f"frequent class ({top_class}) scores {maj:.3f}, and guessing at the class frequencies "
        f"{v['stratified_accuracy']:.3f} (expected {v['chance_accuracy_expected']:.3f}); "
        + (f"the probe is {100 * (acc - maj):.1f} points above the majority class and closes {gain:.0%} of the gap "
           f"between it and a perfect score. " if reading != "not detectably" else
           f"the probe does no better than always answering the majority class ({100 * (acc - maj):+.1f} points; the "
           f"interval includes the baseline). ")
        + f"Macro-F1, which weighs every class equally, is {m['macro_f1'].text('.3f')}, "
        f"against {v['majority_macro_f1']:.3f} for the majority class"
        + (": the smaller classes are predicted clearly worse than the large ones." if acc - v["macro_f1"] > 0.05
           else "." )]
    pc = r.per_class
    if len(pc) >= 2:
        best, worst = pc.iloc[0], pc.iloc[-1]
        text = (f"**By class.** The best-recognised class is {escape(best['class'])} (F1 {best['F1']:.2f}) and the "
                f"hardest {escape(worst['class'])} (F1 {worst['F1']:.2f}, recall {worst['recall']:.2f})")
        if worst["share of the class %"] > 0:
            text += (f", whose entities are most often predicted as {escape(worst['most often predicted instead'])} "
                     f"({worst['share of the class %']:.0f} % of them)")
        pairs = confused_pairs(r, top=3, min_share=0.05)
        if len(pairs):
            text += (". The most frequent confusions: " + "; ".join(
                f"{escape(p['true class'])} → {escape(p['predicted as'])} {p['share of the true class %']:.0f} %"
                for _, p in pairs.iterrows())
                + ". Confused classes sit close together in the space; if the distinction matters downstream, the "
                  "vectors do not carry it well.")
        else:
            text += ". No class loses more than 5 % of its entities to any single other class."
        parts.append(text)
    ls_sum = r.learning_summary
    if len(ls_sum) >= 2 and reading == "not detectably":
        parts.append(f"**Label budget.** With no detectable signal, more labels do not help: the probe's accuracy is "
                     f"{ls_sum.iloc[0]['accuracy_mean']:.3f} when trained on {ls_sum.iloc[0]['train_fraction']:.0%} of "
                     f"the entities and {ls_sum.iloc[-1]['accuracy_mean']:.3f} on {ls_sum.iloc[-1]['train_fraction']:.0%}.")
    elif len(ls_sum) >= 2:
        first, last = ls_sum.iloc[0], ls_sum.iloc[-1]
        ratio = first["accuracy_mean"] / max(last["accuracy_mean"], 1e-12)
        parts.append(
            f"**Label budget.** Trained on {first['train_fraction']:.0%} of the entities "
            f"({int(first['n_train']):,}), the probe reaches accuracy {first['accuracy_mean']:.3f} "
            f"(sd {first['accuracy_std']:.3f} over {int(first['repeats'])} splits); on {last['train_fraction']:.0%} "
            f"({int(last['n_train']):,}) it reaches {last['accuracy_mean']:.3f}, so {ratio:.0%} of the accuracy is "
            "available with the smallest budget. "
            + ("The label is carried by a few strong directions: a small labelled set is enough to read it (the seed: "
               "embeddings that reach high accuracy with 10 % of the labels encode richer structure than those that "
               "need 70 %)." if ratio >= 0.95 else
               "Accuracy still grows with more labels: the label is spread over many weak directions, and a "
               "downstream model will need a sizeable labelled set."))
    if by_group is not None and "accuracy" in by_group and by_group["accuracy"].notna().sum() >= 2:
        t = by_group[by_group["accuracy"].notna()]
        items = [f"{escape(x[column])} {x['accuracy']:.3f} (majority {x['majority baseline']:.3f}, "
                 f"{int(x['evaluated']):,} entities)" for _, x in t.iterrows()]
        hi, lo = t.loc[t["accuracy"].idxmax()], t.loc[t["accuracy"].idxmin()]
        text = f"**By {escape(column)}** (a separate probe within each): " + "; ".join(items) + "."
        if hi["accuracy"] - lo["accuracy"] > 0.05:
            text += (f" The label is clearly easier to read from {escape(hi[column])} than from {escape(lo[column])} "
                     "vectors; the overall number mixes the two.")
        else:
            text += " The groups are about equally decodable."
        parts.append(text)
    excl = ls.exclusion_text()
    if excl:
        parts.append(excl)
    if r.info.get("not_converged_fits"):
        parts.append(f"{r.info['not_converged_fits']} probe fits stopped at max_iter = {r.info['max_iter']} before "
                     "converging; their scores may be slightly low.")
    return "\n\n".join(parts)


def alignment_reading(ari: float) -> str:
    """Words for an ARI (not a verdict: the seed gives no bands)."""
    return ("reproduce the classes almost exactly" if ari >= 0.9 else "largely match the classes" if ari >= 0.6
            else "partly match the classes" if ari >= 0.3 else "match the classes only weakly" if ari >= 0.1
            else "do not match the classes")


def silhouette_reading(s: float) -> str:
    """Kaufman & Rousseeuw's (1990) reading of an average silhouette."""
    return ("strong structure" if s > 0.7 else "reasonable structure" if s > 0.5
            else "weak structure that could be artificial" if s > 0.25 else "no substantial structure")


def _mixing_paragraph(r: ClusteringResult) -> str:
    """Which classes lie outside their matched cluster, and which clusters are mixtures."""
    ls, cont = r.labels, r.contingency
    if r.values["ari"] < 0.05:
        return ("**Which classes mix.** All of them: with ARI near 0 the clusters are unrelated to the classes, and any "
                "class's share in its matched cluster is what chance gives (contingency below).")
    own_cluster = np.full(ls.n_classes, -1)
    own_cluster[r.matching[r.matching >= 0]] = np.flatnonzero(r.matching >= 0)
    size = np.maximum(cont.sum(1), 1)
    own = np.array([cont[i, j] / size[i] if j >= 0 else 0.0 for i, j in enumerate(own_cluster)])
    outside = [f"{escape(ls.classes[i])} ({own[i]:.0%})" for i in np.argsort(own) if own[i] < 0.5]
    col = np.maximum(cont.sum(0), 1)
    mixed = []
    for j in np.argsort(-cont.sum(0)):
        if cont[:, j].max() / col[j] < 0.5:
            top = np.argsort(-cont[:, j])[:3]
            mixed.append(f"c{j} ({int(cont[:, j].sum()):,} entities; largest classes "
                         + ", ".join(f"{escape(ls.classes[i])} {cont[i, j] / col[j]:.0%}" for i in top) + ")")
    if not outside and not mixed:
        return ("**Which classes mix.** With clusters matched one-to-one to classes, every class keeps at least half "
                "of its entities in its own cluster, and every cluster is at least half one class.")
    text = "**Which classes mix.** "
    if outside:
        text += (f"With clusters matched one-to-one to classes, {len(outside)} of {ls.n_classes} classes "
                 f"{'keep' if len(outside) > 1 else 'keeps'} less than half of {'their' if len(outside) > 1 else 'its'} "
                 f"entities in {'their' if len(outside) > 1 else 'its'} own cluster (share in it): {_names(outside, 6)}. ")
    if mixed:
        text += (f"{len(mixed)} cluster{'s are mixtures' if len(mixed) > 1 else ' is a mixture'} with no class at half "
                 f"of {'their' if len(mixed) > 1 else 'its'} entities: {_names(mixed, 3)}. ")
        if len(mixed) == 1 and cont[:, int(mixed[0][1:].split(' ')[0])].sum() > 0.3 * ls.n:
            text += ("One catch-all cluster holding many classes means a large part of the set is crowded into one "
                     "region, where the classes overlap.")
    return text.strip()


def clustering_narrative(r: ClusteringResult, *, probe_accuracy: float | None = None,
                         probe_majority: float | None = None, kind_agreement: dict | None = None,
                         kind_column: str | None = None, by_group: pd.DataFrame | None = None) -> str:
    """Markdown paragraphs that say what this set's clustering numbers mean."""
    v, m, ls = r.values, r.metrics, r.labels
    col = escape(ls.column)
    parts = [
        f"**The k-means clusters {alignment_reading(v['ari'])}.** k-means with k = {r.k} (the number of `{col}` "
        f"classes) on the L2-normalised vectors of {ls.n:,} entities gives ARI {m['ari'].text('.3f', 'seed range')}, "
        f"NMI {m['nmi'].text('.3f', 'seed range')} and AMI {m['ami'].text('.3f', 'seed range')}"
        + (f" (the 95 % range over {r.info['n_seed_runs']} k-means runs with other seeds)" if m["ari"].ci_low is not None
           else "") + ". A random partition has ARI 0 in expectation and a perfect one 1; NMI is not corrected for "
        f"chance (it is above 0 even for a random partition), AMI is. Matching each cluster to one class, "
        f"{v['cluster_accuracy']:.1%} of the entities sit in their class's cluster."]
    n_s = len(r.sample)
    where = f"all {ls.n:,} entities" if n_s == ls.n else f"a seeded sample of {n_s:,} entities"
    sil, lsil = v["silhouette"], v["label_silhouette"]
    text = (f"**Separation.** Computed over {where}, the mean cosine silhouette of the k-means clusters is "
            f"{m['silhouette'].text('.3f')}, *{silhouette_reading(sil)}* in Kaufman & Rousseeuw's reading; the "
            f"classes themselves, "
            f"taken as clusters, have silhouette {m['label_silhouette'].text('.3f')} (*{silhouette_reading(lsil)}*).")
    if sil - lsil > 0.15:
        text += (" The space has clearer groups than the classes: k-means finds structure, but it is organised by "
                 "something other than the label.")
    elif lsil >= 0.25:
        text += " The classes are themselves compact, well-separated groups."
    parts.append(text)
    parts.append(_mixing_paragraph(r))
    if kind_agreement is not None and kind_column and np.isfinite(kind_agreement.get("ari", np.nan)):
        ka = kind_agreement["ari"]
        parts.append(
            f"**Clusters and `{escape(kind_column)}`.** The same clusters agree with `{escape(kind_column)}` at ARI "
            f"{ka:.3f} (NMI {kind_agreement['nmi']:.3f})"
            + (f", more than with `{col}`: the strongest grouping in the space is the kind of entity, so clustering "
               "all entities together mostly separates kinds. The per-kind table below is the fairer test."
               if ka > v["ari"] else "; the kind of entity does not dominate the clusters."))
    if r.sweep is not None and len(r.sweep) > 1:
        sw = r.sweep
        k_ari = int(sw.loc[sw["ari"].idxmax(), "k"])
        k_sil = int(sw.loc[sw["silhouette"].idxmax(), "k"]) if sw["silhouette"].notna().any() else None
        best_ari = float(sw["ari"].max())
        text = (f"**Number of clusters.** Over k = {int(sw['k'].min())}…{int(sw['k'].max())} (the seed's range "
                f"around the {r.k} classes), ARI peaks at k = {k_ari} ({best_ari:.3f})")
        text += f" and the silhouette at k = {k_sil}" if k_sil is not None else ""
        if k_sil is not None and sw["silhouette"].max() <= 0.25:
            text += (". No k gives substantial structure (silhouette ≤ 0.25 throughout), so the space has no natural "
                     "cluster count to compare with the classes.")
        elif k_sil is not None and k_sil != r.k:
            text += (". By the silhouette, the space's own cluster count is not the number of classes: classes split "
                     "into sub-groups or share one region.")
        elif k_ari != r.k:
            text += (f". The silhouette prefers k = {r.k}; {'more' if k_ari > r.k else 'fewer'} clusters raise ARI only "
                     + ("slightly" if best_ari - v["ari"] < 0.05 else "somewhat") + f" (from {v['ari']:.3f}).")
        else:
            text += f": both agree with the {r.k} classes."
        parts.append(text)
    if probe_accuracy is not None:
        decodable = probe_majority is None or probe_accuracy - probe_majority > 0.5 * (1 - probe_majority)
        clustered = v["ari"] >= 0.5
        reading = ("the label is both linearly decodable and the main cluster structure." if decodable and clustered
                   else "the label is linearly decodable but is not what organises the space: a classifier trained "
                        "on labels will find it, nearest-neighbour or clustering-based uses will mix classes."
                   if decodable else
                   "the clusters follow the label although the probe struggles; unusual, check the label column."
                   if clustered else "the label is neither clearly decodable nor clustered.")
        parts.append(f"**Decodable versus clustered.** The node-classification probe reads the label with accuracy "
                     f"{probe_accuracy:.3f}" + (f" (majority class {probe_majority:.3f})" if probe_majority is not None
                                                else "") + f" while k-means recovers ARI {v['ari']:.3f}: " + reading)
    if by_group is not None and "ARI" in by_group and by_group["ARI"].notna().sum() >= 1:
        t = by_group[by_group["ARI"].notna()]
        gcol = by_group.columns[0]
        text = f"**By {escape(gcol)}** (k-means within each): " + "; ".join(
            f"{escape(x[gcol])} ARI {x['ARI']:.3f}, NMI {x['NMI']:.3f}, silhouette of the classes "
            f"{x['silhouette (labels)']:.3f}" for _, x in t.iterrows()) + "."
        hi, lo = t.loc[t["ARI"].idxmax()], t.loc[t["ARI"].idxmin()]
        if hi["ARI"] - lo["ARI"] > 0.2:
            text += (f" Among {escape(hi[gcol])} vectors the clusters {alignment_reading(hi['ARI'])}; among "
                     f"{escape(lo[gcol])} vectors they {alignment_reading(lo['ARI'])}.")
        parts.append(text)
    excl = ls.exclusion_text()
    if excl:
        parts.append(excl)
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _plain(s) -> str:
    """A user string safe for matplotlib text (no mathtext)."""
    return str(s).replace("$", r"\$")


def class_colors(n: int) -> list:
    """Colours for ``n`` classes (largest first): tab10 / tab20, grey beyond 20."""
    base = plt.get_cmap("tab10" if n <= 10 else "tab20").colors
    return [base[i] if i < min(n, 19 if n > 20 else 20) else (0.6, 0.6, 0.6) for i in range(n)]


def learning_curve_figure(r: ClassificationResult) -> plt.Figure:
    """Accuracy and macro-F1 against the training fraction (±1 sd over repeats), with the chance baselines
    and the cross-validated estimate (the seed's ``fig-classification-curve``)."""
    t = r.learning_summary
    v = r.values
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    cv_frac = (r.n_folds - 1) / r.n_folds
    for ax, key, title, marker in ((axes[0], "accuracy", "Accuracy", "o"), (axes[1], "macro_f1", "Macro-F1", "s")):
        if len(t):
            ax.errorbar(t["train_fraction"], t[f"{key}_mean"], yerr=t[f"{key}_std"], marker=marker, capsize=4, lw=2,
                        color=PALETTE["data"], label="probe, held-out rest (±1 sd)")
        lo, hi = v[f"{key}_ci_low"], v[f"{key}_ci_high"]
        ax.errorbar([cv_frac], [v[key]], yerr=[[v[key] - lo], [hi - v[key]]], fmt="D", color=PALETTE["accent"],
                    capsize=4, label=f"{r.n_folds}-fold CV (95 % CI)")
        ax.axhline(v[f"majority_{key}"], color=PALETTE["reference"], ls="--", lw=1.2, label="majority class")
        ax.axhline(v[f"stratified_{key}"], color=PALETTE["muted"], ls=":", lw=1.2, label="stratified random")
        ax.set(xlabel="Training fraction", ylabel=title, title=f"{title} vs label budget", ylim=(0, 1.05),
               xlim=(0, 1))
        ax.legend(loc="lower right", fontsize=8)
    return fig


def _share_heatmap(ax, counts: np.ndarray, rows, cols, *, annotate: bool, cmap: str = "Blues") -> None:
    share = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    im = ax.imshow(share, cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(cols)), [_plain(c) for c in cols], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [_plain(c) for c in rows], fontsize=8)
    ax.grid(False)
    if annotate:
        for i in range(share.shape[0]):
            for j in range(share.shape[1]):
                if counts[i, j]:
                    ax.text(j, i, f"{share[i, j]:.0%}", ha="center", va="center", fontsize=7,
                            color="white" if share[i, j] > 0.55 else "#222")
    return im


def confusion_figure(r: ClassificationResult) -> plt.Figure:
    """Row-normalised confusion matrix of the out-of-fold predictions (recall on the diagonal)."""
    C = r.labels.n_classes
    size = min(WIDTH * 0.75, 2.2 + 0.42 * C)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    im = _share_heatmap(ax, r.confusion, r.labels.classes, r.labels.classes, annotate=C <= MAX_CONFUSION_CLASSES)
    ax.set(xlabel="Predicted class", ylabel="True class", title="Share of each true class predicted as …")
    fig.colorbar(im, ax=ax, shrink=0.8, label="share of the true class")
    return fig


def contingency_figure(r: ClusteringResult) -> plt.Figure:
    """Classes x clusters, each row as shares of the class; clusters ordered by their matched class."""
    order = np.argsort(np.where(r.matching >= 0, r.matching, r.k + np.arange(r.k)), kind="stable")
    cols = [f"c{j} ({r.labels.classes[r.matching[j]]})" if r.matching[j] >= 0 else f"c{j}" for j in order]
    C = r.labels.n_classes
    size = min(WIDTH * 0.75, 2.2 + 0.42 * C)
    fig, ax = plt.subplots(figsize=(size + 1.6, size))
    im = _share_heatmap(ax, r.contingency[:, order], r.labels.classes, cols, annotate=C <= 20)
    ax.set(xlabel="k-means cluster (matched class)", ylabel="Class", title="Share of each class in each cluster")
    fig.colorbar(im, ax=ax, shrink=0.8, label="share of the class")
    return fig


def projection_figure(r: ClusteringResult, proj: Projection, groups=None) -> plt.Figure:
    """The same 2-D projection coloured by class (left) and by k-means cluster (right; each cluster in
    the colour of the class it is matched to, its number at its median position).

    ``groups`` (one value per row of the embedding set, e.g. the ``kind`` column) sets the marker
    shape when it has 2–4 values.
    """
    ls = r.labels
    colors = np.array(class_colors(ls.n_classes))
    pos, xy = proj.positions, proj.coords
    order = np.random.default_rng(0).permutation(len(pos))  # no class drawn systematically on top
    pos, xy = pos[order], xy[order]
    g = None
    if groups is not None:
        g = pd.Series(np.asarray(groups, dtype=object)[ls.rows[pos]]).fillna("(missing)").astype(str).to_numpy()
        if not 2 <= len(set(g)) <= len(_MARKERS):
            g = None
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 5.0), sharex=True, sharey=True, layout="constrained")
    kw = dict(s=7 if len(pos) > 2500 else 10, alpha=0.7, linewidths=0)
    matched = np.where(r.matching >= 0, r.matching, 0)
    cl = r.clusters[pos]
    for ax, c in ((a, colors[ls.codes[pos]]), (b, colors[matched[cl]])):
        for name, marker in (zip(sorted(set(g)), _MARKERS) if g is not None else [(None, "o")]):
            sel = np.ones(len(pos), bool) if name is None else g == name
            ax.scatter(xy[sel, 0], xy[sel, 1], c=c[sel], marker=marker, **kw)
    for j in range(r.k):
        sel = cl == j
        if sel.any():
            cx, cy = np.median(xy[sel], axis=0)
            b.text(cx, cy, f"c{j}", fontsize=8, fontweight="bold", ha="center", va="center",
                   bbox=dict(boxstyle="round,pad=0.15", fc="white", ec=colors[matched[j]], alpha=0.85))
    if proj.method == "pca":
        ex = proj.explained
        xl, yl = f"PC 1 ({ex[0]:.0%} of variance)", f"PC 2 ({ex[1]:.0%})"
    else:
        xl, yl = "t-SNE 1", "t-SNE 2"
    a.set(xlabel=xl, ylabel=yl, title=f"Coloured by {_plain(ls.column)}")
    b.set(xlabel=xl, title=f"Coloured by k-means cluster (k = {r.k})")
    shown = min(ls.n_classes, 19 if ls.n_classes > 20 else 20)
    handles = [plt.Line2D([], [], ls="", marker="o", ms=6, color=colors[i], label=_plain(ls.classes[i]))
               for i in range(shown)]
    if ls.n_classes > shown:
        handles.append(plt.Line2D([], [], ls="", marker="o", ms=6, color=(0.6, 0.6, 0.6),
                                  label=f"{ls.n_classes - shown} smaller classes"))
    if g is not None:
        handles += [plt.Line2D([], [], ls="", marker=mk, ms=6, color="#555", label=f"{_plain(name)}")
                    for name, mk in zip(sorted(set(g)), _MARKERS)]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 8), fontsize=8, frameon=False)
    return fig


_MARKERS = ("o", "^", "s", "D")


def sweep_figure(r: ClusteringResult) -> plt.Figure:
    """Silhouette, ARI and NMI against k, with the number of classes marked (the seed's
    ``fig-clustering-metrics``)."""
    sw = r.sweep
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH, 3.3))
    for ax, key, title in zip(axes, ("silhouette", "ari", "nmi"),
                              ("Silhouette (cosine)", "Adjusted Rand index", "Normalized mutual information")):
        ax.plot(sw["k"], sw[key], "o-", color=PALETTE["data"], lw=2)
        ax.axvline(r.k, color=PALETTE["reference"], ls="--", alpha=0.8, label=f"classes: k = {r.k}")
        if key == "ari":
            ax.axhline(0, color=PALETTE["muted"], ls=":", lw=1, label="chance (0)")
        ax.set(xlabel="Number of clusters k", title=title)
        ax.set_xticks(list(sw["k"]))
        ax.legend(fontsize=8)
    return fig
