r"""Node classification: is the label linearly decodable from the vectors?

Implements seed 000 §218.3 (``evaluate_node_classification``) with the standard protocol. Labels
come from a metadata column (``label``); see :func:`~embeval_report.metrics.labels.prepare_labels`
for what is excluded.

* Probe: ``StandardScaler`` + multinomial ``LogisticRegression`` (L2, C = 1, lbfgs, max_iter =
  1000), both fitted on the training folds only. Scores from scikit-learn: accuracy
  :math:`\frac1n\sum_i[\hat y_i = y_i]`, micro-F1 (equal to accuracy for single-label data) and
  macro-F1 :math:`\frac1C\sum_c 2P_cR_c/(P_c+R_c)` (every class counts equally).
* Protocol: stratified k-fold cross-validation (k = 5, shuffled with the run's seed). Reported:
  the mean over folds, the standard deviation (ddof 1) and a Student-t interval
  :math:`\bar s \pm t_{k-1}\,\mathrm{sd}/\sqrt k` over the folds (:func:`~embeval_report.stats.t_interval`).
  The folds share training data, so this interval is approximate and tends to be too narrow
  (Bengio & Grandvalet 2004).
* Chance: ``DummyClassifier`` ``most_frequent`` (majority class) and ``stratified`` (random guesses
  at the class frequencies; expected accuracy :math:`\sum_c p_c^2`) on the same folds.
* Learning curve over the label budget (the seed's training fractions 0.1, 0.3, …, 0.9), with
  seeded *stratified* shuffle splits, 5 repeats per fraction. Above :data:`MAX_CURVE_ENTITIES` evaluated
  entities each split is a stratified sample of that many (the fraction of it trained on, the rest of it scored):
  the curve's shape costs the same at any size (at 10,000 x 384 with 24 classes its 25 fits took 14 of the
  chapter's 20 CPU-s), while the headline numbers stay the cross-validation's over every evaluated entity.

The seed's ``evaluate_node_classification`` uses random (non-stratified) splits, 10 trials per
fraction, no feature scaling, no baseline, and ``multi_class="multinomial"``, which scikit-learn
≥ 1.7 rejects (multinomial is the default for lbfgs; seed catalog Part B, Appendix C).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import sparse
from sklearn.dummy import DummyClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import confusion_matrix, precision_recall_fscore_support
from sklearn.model_selection import StratifiedKFold, StratifiedShuffleSplit
from sklearn.pipeline import make_pipeline

from ..kernels import as_numpy
from ..stats import t_interval
from .labels import (N_FOLDS, LabelSet, OnLabels, Standardiser, as_labelset, map_fits, per_group,  # noqa: F401
                     prepare_labels, small_problem, stratified_subsample, threads)
from .scoring import PreparedBoot
from .spec import MIN_INTERVAL_N, MetricSpec, specs

TRAIN_FRACTIONS = (0.1, 0.3, 0.5, 0.7, 0.9)
N_REPEATS = 5
PROBE_C = 1.0
PROBE_MAX_ITER = 1000
#: the probe runs on a stratified sample of at most this many labelled entities
MAX_PROBE_ENTITIES = 20_000
#: each learning-curve split is a stratified sample of at most this many of the evaluated entities
MAX_CURVE_ENTITIES = 5_000
#: confusion-matrix figure only up to this many classes
MAX_CONFUSION_CLASSES = 15

SEED_NC = "seed 000 §218.3"
#: why centring every vector cannot change the probe's predictions (the remedy checks pair its units with themselves)
CENTRING_INVARIANT = ("the probe standardises every feature on its training folds, which subtracts any common shift "
                      "of the vectors: centring leaves its predictions as recorded")

SPECS = specs(
    MetricSpec("accuracy", "Probe accuracy", "higher", r"\mathrm{acc} = \tfrac1n \sum_i [\hat y_i = y_i]",
               f"{SEED_NC}; scikit-learn accuracy_score", range=(0.0, 1.0)),
    MetricSpec("micro_f1", "Probe micro-F1", "higher",
               r"F_1^{\mu} = \frac{2\sum_c TP_c}{2\sum_c TP_c + \sum_c FP_c + \sum_c FN_c}"
               r" \;(= \mathrm{acc}\text{ for one label per entity})",
               f"{SEED_NC}; scikit-learn f1_score", range=(0.0, 1.0)),
    MetricSpec("macro_f1", "Probe macro-F1", "higher", r"F_1^{M} = \tfrac1C \sum_c \frac{2 P_c R_c}{P_c + R_c}",
               f"{SEED_NC}; scikit-learn f1_score", range=(0.0, 1.0)),
)
MODEL_NAMES = {"probe": "logistic-regression probe", "majority": "majority class (DummyClassifier most_frequent)",
               "stratified": "stratified random (DummyClassifier stratified)"}


def make_probe(C: float = PROBE_C, max_iter: int = PROBE_MAX_ITER, seed: int = 0):
    """The probe: standardisation (scikit-learn's ``StandardScaler``, fitted as :class:`~.labels.Standardiser` fits it:
    the same numbers) then multinomial L2 logistic regression (lbfgs)."""
    return make_pipeline(Standardiser(), LogisticRegression(C=C, max_iter=max_iter, random_state=seed))


def fold_scores(y_true, y_pred, n_classes: int) -> dict[str, float]:
    r"""Accuracy, micro-F1 and macro-F1 over all ``n_classes`` classes (absent predictions score 0), from the class
    counts as scikit-learn's ``accuracy_score`` and ``f1_score(labels=range(n_classes), zero_division=0)`` compute
    them: :math:`F_1 = 2\,TP / (n^{\mathrm{true}} + n^{\mathrm{pred}})` per class (0 when both are 0), the macro
    mean over the classes, the micro value from the summed counts (the same numbers bit for bit, tested, without
    scikit-learn's validation on each of the curve's and folds' 40 calls)."""
    y_true, y_pred = np.asarray(y_true, np.int64), np.asarray(y_pred, np.int64)
    hit = y_true == y_pred
    tp = np.bincount(y_true[hit], minlength=n_classes).astype(np.float64)
    total = (np.bincount(y_true, minlength=n_classes) + np.bincount(y_pred, minlength=n_classes)).astype(np.float64)
    f1 = np.divide(2.0 * tp, total, out=np.zeros(n_classes), where=total > 0)
    micro = 2.0 * tp.sum() / total.sum() if total.sum() > 0 else 0.0
    return {"accuracy": float(hit.mean()), "micro_f1": float(micro), "macro_f1": float(f1.mean())}


@dataclass(frozen=True)
class ClassificationResult(OnLabels):
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


@dataclass(frozen=True)
class ProbePlan:
    """The probe's protocol, fixed before any vector is read: the evaluated entities (a stratified sample of at
    most ``max_entities``), their ids and the stratified fold of each, from the labels and the seed only."""

    labels: LabelSet       # the evaluated entities and their classes
    ids: np.ndarray        # their unit ids (str)
    folds: np.ndarray      # fold 0..n_folds-1 of each evaluated entity
    n_folds: int
    seed: int
    C: float = PROBE_C
    max_iter: int = PROBE_MAX_ITER


def probe_plan(labels: LabelSet, ids=None, *, n_folds: int = N_FOLDS,
               max_entities: int | None = MAX_PROBE_ENTITIES, seed: int = 0, C: float = PROBE_C,
               max_iter: int = PROBE_MAX_ITER) -> ProbePlan:
    """The stratified sample and folds of the probe (StratifiedKFold, shuffled with ``seed``). ``ids``: the set's
    ids (row numbers as text when ``None``)."""
    if n_folds < 2:
        raise ValueError("n_folds must be at least 2")
    ls = stratified_subsample(labels, max_entities, seed=seed)
    folds = np.empty(ls.n, dtype=np.int64)
    cv = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    for f, (_, te) in enumerate(cv.split(np.zeros((ls.n, 1)), ls.codes)):
        folds[te] = f
    unit_ids = (np.asarray(ids, dtype=object)[ls.rows] if ids is not None else ls.rows).astype(str)
    return ProbePlan(ls, unit_ids, folds, n_folds, seed, C, max_iter)


def fold_splits(folds: np.ndarray, n_folds: int):
    """(train, test) positions of each fold, in fold order, as StratifiedKFold yields them (both sorted)."""
    for f in range(n_folds):
        test = folds == f
        yield np.flatnonzero(~test), np.flatnonzero(test)


def probe_units(X, plan: ProbePlan) -> pd.DataFrame:
    """The probe's out-of-fold prediction of every evaluated entity: columns ``entity``, ``fold``, ``label`` and
    ``predicted`` (class names), ``y`` and ``y_pred`` (their codes, largest class first, as the plan's label set
    codes them) and ``correct`` (1/0). ``attrs["not_converged"]``: the fits that hit ``max_iter``."""
    return probe_fits(X, plan)[0]


def probe_fits(X, plan: ProbePlan, *, folds: bool = True, train_fractions=(), n_repeats: int = N_REPEATS,
               curve_entities: int | None = MAX_CURVE_ENTITIES) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """:func:`probe_units` (``None`` without ``folds``) and the learning curve of :func:`evaluate_node_classification` (``train_fractions``; empty:
    none) from one pool of fits: every fit of a small problem (:func:`~.labels.map_fits`) side by side, the longest
    (most training entities) first, so that no core waits for the last fold while curve fits remain; the same fits,
    hence the same numbers bit for bit, as the folds then the curve. ``attrs["not_converged"]``: the fits that hit
    ``max_iter``, the curve's counted with the folds' (on ``units``) when they shared the pool (a warning raised in a
    pool's thread does not say which fit raised it); their sum is what the chapter reports."""
    X = as_numpy(X)
    ls = plan.labels
    Xl, y = np.asarray(X[ls.rows], dtype=np.float64), ls.codes
    splits = list(fold_splits(plan.folds, plan.n_folds)) if folds else []
    runs, sample = _curve_runs(y, train_fractions, n_repeats, plan.seed, curve_entities)

    def fit(split):
        tr, te = split
        return make_probe(plan.C, plan.max_iter, plan.seed).fit(Xl[tr], y[tr]).predict(Xl[te])

    curve_size = (len(y) if sample is None else sample, Xl.shape[1])
    curve = [(tr, te) for *_, tr, te in runs]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        if small_problem(*Xl.shape) == small_problem(*curve_size):  # one pool (or one after the other) for every fit
            with threads(*Xl.shape):
                preds = _longest_first(fit, splits + curve, *Xl.shape)
            fold_preds, curve_preds = preds[:len(splits)], preds[len(splits):]
            curve_warned = 0 if folds else _not_converged(caught)
        else:  # the folds on threaded BLAS, then the curve's sampled (small) fits side by side
            with threads(*Xl.shape):
                fold_preds = map_fits(fit, splits, *Xl.shape)
            before = len(caught)
            with threads(*curve_size):
                curve_preds = _longest_first(fit, curve, *curve_size)
            curve_warned = _not_converged(caught[before:])
        pool_warned = _not_converged(caught) - curve_warned
    learning = _curve_table(runs, curve_preds, y)
    learning.attrs["not_converged"] = curve_warned
    if not folds:
        return None, learning
    oof = np.empty(ls.n, dtype=np.int64)
    for (_, te), pred in zip(splits, fold_preds):
        oof[te] = pred
    names = np.asarray(ls.classes, dtype=object)
    units = pd.DataFrame({"entity": plan.ids, "fold": plan.folds, "label": names[y], "predicted": names[oof],
                          "y": y, "y_pred": oof, "correct": (oof == y).astype(np.int64)})
    units.attrs["not_converged"] = pool_warned
    return units, learning


def fold_accuracy(units: pd.DataFrame) -> float:
    """Accuracy per fold, averaged over the folds (what the chapter reports): the mean of ``correct`` in each fold,
    then over folds."""
    f = units["fold"].to_numpy()
    per_fold = np.bincount(f, weights=units["correct"].to_numpy(float)) / np.maximum(np.bincount(f), 1)
    return float(per_fold[np.bincount(f) > 0].mean())


def fold_macro_f1(units: pd.DataFrame) -> float:
    r"""Macro-F1 per fold over every class of the table, averaged over the folds:
    :math:`F_1^c = 2\,TP_c / (n^{\mathrm{true}}_c + n^{\mathrm{pred}}_c)` (0 when both are 0), as scikit-learn's
    ``f1_score(average="macro", zero_division=0)`` computes it."""
    f, y, p = (units[c].to_numpy(np.int64) for c in ("fold", "y", "y_pred"))
    classes = np.unique(y)
    C, F = int(max(y.max(), p.max())) + 1, int(f.max()) + 1
    tp = np.bincount(f * C + y, weights=(y == p).astype(float), minlength=F * C).reshape(F, C)
    true = np.bincount(f * C + y, minlength=F * C).reshape(F, C).astype(float)
    pred = np.bincount(f * C + p, minlength=F * C).reshape(F, C).astype(float)
    denom = true + pred
    f1 = np.divide(2.0 * tp, denom, out=np.zeros_like(tp), where=denom > 0)[:, classes]
    present = np.bincount(f, minlength=F) > 0
    return float(np.mean([row.mean() for row in f1[present]]))


def _onehots(n: int, *codings) -> tuple:
    """What :func:`_counted` reads: the one-hots of ``codings`` (each ``(codes, size)`` or ``(codes, size, weights)``
    over ``n`` units) transposed and stacked as one sparse matrix (codes × units), and their sizes."""
    blocks = [sparse.csr_matrix((np.ones(n) if len(c) < 3 else np.asarray(c[2], float), (np.arange(n), c[0])),
                                shape=(n, c[1])).T for c in codings]
    return sparse.vstack(blocks, format="csr"), [c[1] for c in codings]


def _counted(onehots: tuple, W: np.ndarray) -> list[np.ndarray]:
    """Per bootstrap draw (rows of the unit counts ``W``) the weighted count of each code of each coding:
    ``W @ one-hot`` (draws × size), all codings by one sparse product (a dense one-hot is units × size, and its
    product the bulk of a paired bootstrap); integer-valued, so exact as the bincount of the drawn rows."""
    stacked, sizes = onehots
    counts = stacked @ np.ascontiguousarray(np.asarray(W, float).T)
    edges = np.cumsum([0, *sizes])
    return [np.ascontiguousarray(counts[lo:hi].T) for lo, hi in zip(edges[:-1], edges[1:])]


def masked_row_means(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row ``r`` of ``values`` (rows × m) ``values[r][mask[r]].mean()``, bit for bit, without a loop over the
    rows: the rows sharing a mask are averaged together (a C-ordered block's row means sum each row pairwise as a
    one-row array's mean does); NaN for a row whose mask is empty."""
    out = np.empty(len(values))
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for rows, cols in _mask_groups(mask):
            out[rows] = np.ascontiguousarray(values[np.ix_(rows, cols)]).mean(axis=1)
    return out


def _mask_groups(mask: np.ndarray):
    """The rows of a boolean ``mask`` (rows × m) grouped by their pattern: ``(rows, columns set)`` per pattern."""
    patterns, inverse = np.unique(mask, axis=0, return_inverse=True)
    inverse = np.ravel(inverse)
    for j, pattern in enumerate(patterns):
        yield np.flatnonzero(inverse == j), np.flatnonzero(pattern)


def _accuracy_terms(units: pd.DataFrame) -> tuple:
    f = units["fold"].to_numpy()
    F = int(f.max()) + 1
    return _onehots(len(units), (f, F), (f, F, units["correct"].to_numpy(float)))


def _accuracy_weighted(onehots: tuple, W: np.ndarray) -> np.ndarray:
    counts, correct = _counted(onehots, W)
    return masked_row_means(correct / np.maximum(counts, 1), counts > 0)


#: :func:`fold_accuracy` of many bootstrap draws at once from their unit counts ``W`` (draws × units): the same value
#: as on the drawn rows, bit for bit (a :class:`~.scoring.PreparedBoot`: the fold one-hots made once per table)
fold_accuracy_weighted = PreparedBoot(_accuracy_terms, _accuracy_weighted)


def _macro_f1_terms(units: pd.DataFrame) -> tuple:
    f, y, p = (units[c].to_numpy(np.int64) for c in ("fold", "y", "y_pred"))
    C, F = int(max(y.max(), p.max())) + 1, int(f.max()) + 1
    return C, F, _onehots(len(units), (f * C + y, F * C, (y == p).astype(float)), (f * C + y, F * C),
                          (f * C + p, F * C), (f, F), (y, C))


def _macro_f1_weighted(terms: tuple, W: np.ndarray) -> np.ndarray:
    C, F, onehots = terms
    k = len(W)
    tp, true, pred, folds, of_class = _counted(onehots, W)
    tp, denom = tp.reshape(k, F, C), (true + pred).reshape(k, F, C)
    present = folds > 0
    classes = of_class > 0  # the drawn table's classes
    f1 = np.divide(2.0 * tp, denom, out=np.zeros((k, F, C)), where=denom > 0)
    out = np.empty(k)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a draw without classes or folds: NaN, as the loop gave
        for rows, drawn in _mask_groups(classes):
            out[rows] = masked_row_means(np.ascontiguousarray(f1[rows][:, :, drawn]).mean(axis=2), present[rows])
    return out


#: :func:`fold_macro_f1` of many bootstrap draws at once (``W``: draws × units), bit for bit, without a loop over the
#: draws (a :class:`~.scoring.PreparedBoot`: the one-hots made once per table; the draws sharing their classes and
#: folds averaged together, :func:`masked_row_means`)
fold_macro_f1_weighted = PreparedBoot(_macro_f1_terms, _macro_f1_weighted)


def evaluate_node_classification(X, labels, *, n_folds: int = N_FOLDS, train_fractions=TRAIN_FRACTIONS,
                                 n_repeats: int = N_REPEATS, C: float = PROBE_C, max_iter: int = PROBE_MAX_ITER,
                                 max_entities: int | None = MAX_PROBE_ENTITIES,
                                 curve_entities: int | None = MAX_CURVE_ENTITIES, level: float = 0.95, seed: int = 0,
                                 column: str = "label", plan: ProbePlan | None = None,
                                 units: pd.DataFrame | None = None,
                                 learning: pd.DataFrame | None = None) -> ClassificationResult:
    r"""Linear-probe node classification with stratified k-fold CV, chance baselines and a learning curve.

    Parameters
    ----------
    X : array (n, d) or torch tensor
    labels : one label per row (missing allowed) or a :class:`LabelSet`
    n_folds : folds of the stratified CV (shuffled with ``seed``); classes smaller than this are dropped
    train_fractions, n_repeats : learning curve (empty ``train_fractions`` skips it)
    curve_entities : above this many evaluated entities, each learning-curve split is a stratified sample of this
        many, trained on ``train_fraction`` of it and scored on the rest of it (``None``: every entity)
    C, max_iter : the logistic regression's inverse L2 strength and iteration cap
    max_entities : stratified subsample above this many labelled entities (``None``: all)
    plan, units : the probe's plan (:func:`probe_plan`; made from the other arguments when ``None``) and its
        out-of-fold predictions (:func:`probe_units`; computed when ``None``)
    learning : the learning curve when already fitted (:func:`probe_fits` with these ``train_fractions``,
        ``n_repeats`` and ``curve_entities``); ``None``: fitted here

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
    if plan is None:
        plan = probe_plan(as_labelset(labels, len(X), n_folds, column), n_folds=n_folds, max_entities=max_entities,
                          seed=seed, C=C, max_iter=max_iter)
    n_folds, seed, C, max_iter = plan.n_folds, plan.seed, plan.C, plan.max_iter
    if units is None or learning is None:
        fitted, fitted_curve = probe_fits(X, plan, folds=units is None,
                                          train_fractions=train_fractions if learning is None else (),
                                          n_repeats=n_repeats, curve_entities=curve_entities)
        units = fitted if units is None else units
        learning = fitted_curve if learning is None else learning
    ls = plan.labels
    y, n_cls, oof = ls.codes, ls.n_classes, units["y_pred"].to_numpy(np.int64)
    Xl = np.asarray(X[ls.rows], dtype=np.float64)
    rows = []
    with threads(*Xl.shape), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        for f, (tr, te) in enumerate(fold_splits(plan.folds, n_folds)):
            rows.append(dict(fold=f + 1, model="probe", n_test=len(te), **fold_scores(y[te], oof[te], n_cls)))
            for name, model in (("majority", DummyClassifier(strategy="most_frequent")),
                                ("stratified", DummyClassifier(strategy="stratified", random_state=seed + f))):
                pred = model.fit(Xl[tr], y[tr]).predict(Xl[te])
                rows.append(dict(fold=f + 1, model=name, n_test=len(te), **fold_scores(y[te], pred, n_cls)))
        not_converged = (units.attrs.get("not_converged", 0) + learning.attrs.get("not_converged", 0)
                         + _not_converged(caught))
    folds = pd.DataFrame(rows)
    values = {}
    ci_method = (f"{level:.0%} Student-t interval over the {n_folds} stratified CV folds (mean ± t·sd/√k; "
                 "approximate: the folds share training data)")
    for model in MODEL_NAMES:
        t = folds[folds.model == model]
        for name in SPECS:
            key = name if model == "probe" else f"{model}_{name}"
            values[key] = float(t[name].mean())
            values[key + "_std"] = float(t[name].std(ddof=1))
            values[key + "_ci_low"], values[key + "_ci_high"] = (t_interval(t[name], level) if len(t) >= MIN_INTERVAL_N
                                                                 else (math.nan, math.nan))
    p = ls.counts / ls.n
    values["chance_accuracy_expected"] = float((p ** 2).sum())
    few = "" if n_folds >= MIN_INTERVAL_N else f"{n_folds} folds: an interval needs at least {MIN_INTERVAL_N}"
    metrics = {s.name: s.record(values[s.name], (values[s.name + "_ci_low"], values[s.name + "_ci_high"]),
                                ci_method=ci_method, note=few) for s in SPECS.values()}
    conf = confusion_matrix(y, oof, labels=np.arange(n_cls))
    return ClassificationResult(
        labels=ls, values=values, metrics=metrics, folds=folds, predictions=oof, confusion=conf,
        per_class=_per_class_table(ls, oof, conf), learning=learning, n_folds=n_folds, level=level,
        info=dict(n_entities=ls.n, n_classes=n_cls, n_folds=n_folds, n_missing=ls.n_missing,
                  dropped_classes=ls.dropped, sampled_from=ls.sampled_from, C=C, max_iter=max_iter,
                  probe="StandardScaler + LogisticRegression(lbfgs, L2)", not_converged_fits=int(not_converged),
                  train_fractions=list(train_fractions), repeats=n_repeats, ci_method=ci_method,
                  curve_sample=curve_sample(ls.n, curve_entities)))


def curve_sample(n: int, curve_entities: int | None) -> int | None:
    """The entities of each learning-curve split when it is a sample (``None``: all ``n``)."""
    return None if curve_entities is None or n <= curve_entities else int(curve_entities)


def _curve_runs(y, fractions, n_repeats: int, seed: int, curve_entities: int | None = None):
    """The learning curve's splits ``(fraction, repeat, train, test)`` and its sample size (``None``: every entity):
    a stratified fraction trained on and the held-out rest scored (seeded repeats); above ``curve_entities`` entities
    each split is a stratified sample of that many (trained on the fraction of it, scored on the rest of it).

    A fraction whose training or test part cannot hold one entity of every class is skipped.
    """
    sample = curve_sample(len(y), curve_entities)
    runs = []
    for frac in fractions:
        size = (dict(train_size=float(frac)) if sample is None else
                dict(train_size=int(round(frac * sample)), test_size=sample - int(round(frac * sample))))
        splitter = StratifiedShuffleSplit(n_splits=n_repeats, random_state=seed, **size)
        try:
            splits = list(splitter.split(np.zeros((len(y), 1)), y))
        except ValueError:  # too few entities for this fraction
            continue
        runs += [(float(frac), r, tr, te) for r, (tr, te) in enumerate(splits)]
    return runs, sample


def _curve_table(runs, preds, y) -> pd.DataFrame:
    """One row per learning-curve split: its probe's accuracy and macro-F1 on the held-out part, and the majority
    class's accuracy there."""
    n_cls = int(y.max()) + 1
    rows = []
    for (frac, r, tr, te), pred in zip(runs, preds):
        majority = np.bincount(y[tr], minlength=n_cls).argmax()
        s = fold_scores(y[te], pred, n_cls)
        rows.append(dict(train_fraction=frac, n_train=len(tr), repeat=r + 1, accuracy=s["accuracy"],
                         macro_f1=s["macro_f1"], majority_accuracy=float((y[te] == majority).mean())))
    return pd.DataFrame(rows, columns=["train_fraction", "n_train", "repeat", "accuracy", "macro_f1",
                                       "majority_accuracy"])


def _not_converged(caught) -> int:
    return sum(issubclass(w.category, ConvergenceWarning) for w in caught)


def _longest_first(fit, splits, n: int, d: int) -> list:
    """:func:`~.labels.map_fits` of the ``(train, test)`` splits, started longest training part first (the pool's
    last fits are its shortest), returned in the order given."""
    order = sorted(range(len(splits)), key=lambda i: -len(splits[i][0]))
    preds = map_fits(fit, [splits[i] for i in order], n, d)
    out = [None] * len(splits)
    for i, pred in zip(order, preds):
        out[i] = pred
    return out


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


def node_classification_by_group(X, labels, groups, *, column: str = "kind", n_folds: int = N_FOLDS,
                                  max_entities: int | None = MAX_PROBE_ENTITIES, level: float = 0.95, seed: int = 0,
                                  label_column: str = "label") -> pd.DataFrame:
    """The probe within each group of entities (users, items, …): its own CV, no learning curve.

    A group whose labels cannot be evaluated (one class, too few members) gets a row that says so.
    The accuracy interval is in the columns ``accuracy ci_low`` / ``accuracy ci_high``.
    """
    def evaluate(Xg, yg):
        return evaluate_node_classification(Xg, yg, n_folds=n_folds, train_fractions=(), max_entities=max_entities,
                                            level=level, seed=seed, column=label_column)

    def summarise(r):
        v = r.values
        return {"evaluated": r.n, "classes": r.labels.n_classes, "accuracy": v["accuracy"],
                "accuracy ci_low": v["accuracy_ci_low"], "accuracy ci_high": v["accuracy_ci_high"],
                "macro-F1": v["macro_f1"], "majority baseline": v["majority_accuracy"],
                "lift (points)": 100 * (v["accuracy"] - v["majority_accuracy"])}
    return per_group(X, labels, groups, column, evaluate, summarise)
