r"""Agreement between human raters, annotator quality and consensus labels (seed 001 §21.3).

**Data.** Ratings form a reliability matrix: items (units) × raters, with missing cells where a rater
did not rate an item. :class:`RatingData` codes the labels as categories :math:`c = 1..K` (numbers
sorted by value, text alphabetically) and keeps the per-item counts :math:`n_{uc}` (ratings of item
:math:`u` in category :math:`c`), :math:`m_u = \sum_c n_{uc}`. Every agreement coefficient below is a
function of per-item sufficient statistics, so its interval comes from resampling **items** (the
nonparametric bootstrap through multinomial item weights, :func:`~embeval_report.stats.weighted_bootstrap`,
percentile interval).

**Coefficients** (higher is better; 1 perfect agreement, 0 chance):

* ``krippendorff_alpha`` — :math:`\alpha = 1 - (n-1)\frac{\sum_{c,k} o_{ck}\,\delta^2_{ck}}{\sum_{c,k} n_c n_k
  \delta^2_{ck}}` with the coincidences :math:`o_{ck} = \sum_u \frac{n_{uc} n_{uk} - [c=k]\,n_{uc}}{m_u - 1}`
  over items with :math:`m_u \ge 2` (missing ratings simply absent), :math:`n_c = \sum_k o_{ck}`,
  :math:`n = \sum_c n_c`, and the metric of the level of measurement: nominal :math:`\delta^2 = [c \ne k]`,
  ordinal :math:`\delta^2_{ck} = (\sum_{g=c}^{k} n_g - \frac{n_c + n_k}{2})^2`, interval
  :math:`\delta^2_{ck} = (v_c - v_k)^2` (Krippendorff 2011, "Computing Krippendorff's alpha-reliability";
  the ``krippendorff`` package agrees).
* ``fleiss_kappa`` — only when every item has the same number :math:`m` of ratings:
  :math:`\kappa = \frac{\bar P - P_e}{1 - P_e}`, :math:`P_u = \frac{\sum_c n_{uc}^2 - m}{m(m-1)}`,
  :math:`P_e = \sum_c p_c^2`, :math:`p_c = \frac{\sum_u n_{uc}}{N m}` (Fleiss 1971; statsmodels ``fleiss_kappa``).
* ``cohen_kappa`` — the mean over rater pairs with at least :data:`MIN_PAIR_ITEMS` common items of
  Cohen's kappa :math:`\kappa_w = 1 - \frac{\sum w_{ck} O_{ck}}{\sum w_{ck} E_{ck}}` (Light 1971's mean
  pairwise kappa); unweighted (:math:`w = [c \ne k]`) for nominal labels, quadratic weights for graded
  ones (ordinal: :math:`w_{ck} = (c-k)^2`, the category ranks as scikit-learn's ``cohen_kappa_score``;
  interval: :math:`(v_c - v_k)^2`; Cohen 1968).
* ``gwet_ac1`` — :math:`\mathrm{AC1} = \frac{p_a - p_e}{1 - p_e}`, :math:`p_a` the percent agreement below,
  :math:`p_e = \frac{1}{K-1}\sum_c \pi_c(1-\pi_c)`, :math:`\pi_c = \frac1{N}\sum_u n_{uc}/m_u` (Gwet 2008;
  2014 for missing ratings; exact-match agreement at every level). Unlike kappa it does not collapse
  when one label dominates (the kappa paradox, Feinstein & Cicchetti 1990).
* ``percent_agreement`` — :math:`p_a = \frac1{N'}\sum_{u: m_u \ge 2} \sum_c \frac{n_{uc}(n_{uc}-1)}{m_u(m_u-1)}`,
  the share of agreeing rater pairs within an item, averaged over items (no chance correction).

**Annotator quality** (:func:`rater_quality`, seed 001 §21.3.2): gold accuracy (exact match with the gold
label, the seed's ``check_annotation``), agreement with the consensus of the *other* raters of each item
(nominal: the rater's label is among the others' most frequent labels; graded: within a quarter of the
scale's span of the others' median — the seed's "±1" on its 0–4 scale), median seconds per rating, and
fatigue drift (agreement in the last third of the rater's session minus the first third, with a one-sided
Mann–Whitney test that disagreements come later in the session). A rater is flagged with the reason when
gold accuracy or consensus agreement is below :data:`MIN_ACCURACY` over at least :data:`MIN_TASKS` items
(the seed's ``get_reliable_annotators`` defaults), when the median time is below :data:`MIN_SECONDS` (the
seed's "minimum time per task"), or when the fatigue test is significant after Holm's correction across
raters.

**Consensus** (:func:`majority_labels`, :func:`dawid_skene`): majority vote (ties to the lower label, the
seed's "if unsure between two ratings, choose the lower one") and the Dawid–Skene (1979) EM estimate of
the true labels and of each rater's confusion matrix.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..stats import DEFAULT_LEVEL, adjust_pvalues, bootstrap_ci, percentile_interval, weighted_bootstrap, wilson_ci
from .consensus import DS_MAX_CATEGORIES, DawidSkene, dawid_skene, majority_labels  # noqa: F401 (re-exported)
from .spec import MetricSpec, specs
from .thresholds import Bands

#: bootstrap resamples of items for every agreement interval
N_BOOT = 1000
#: rater pairs need this many common items to enter the mean pairwise kappa
MIN_PAIR_ITEMS = 5
#: seed 001 §21.3.2: get_reliable_annotators(min_accuracy=0.7, min_tasks=10)
MIN_ACCURACY = 0.7
MIN_TASKS = 10
#: seed 001 §21.3.2 box "Common Annotation Pitfalls": "Require minimum time per task (e.g., 10 seconds)"
MIN_SECONDS = 10.0
#: ratings in a rater's session needed for the fatigue test (a third of them at each end)
MIN_SESSION = 15
#: family-wise error rate of the per-rater fatigue tests (Holm)
ALPHA = 0.05

KRIPPENDORFF_BANDS = Bands("higher", 0.8, 0.667, "Krippendorff (2004), Content Analysis §12.3",
                           "reliable ≥ 0.800, tentative conclusions 0.667–0.800, discard < 0.667")
LANDIS_KOCH = Bands("higher", 0.6, 0.4, "Landis & Koch (1977)",
                    "substantial or better > 0.60, moderate 0.41–0.60, fair or worse ≤ 0.40")

_AGREE = "seed 001 §21.3.1 (agreement); "
SPECS = specs(
    MetricSpec("krippendorff_alpha", "Krippendorff's α", "higher",
               r"1 - (n-1)\frac{\sum_{c,k} o_{ck}\,\delta^2_{ck}}{\sum_{c,k} n_c n_k\,\delta^2_{ck}}",
               _AGREE + "Krippendorff 2011; verdict: Krippendorff 2004 §12.3", range=(-1, 1), bands=KRIPPENDORFF_BANDS,
               chance=0.0),
    MetricSpec("fleiss_kappa", "Fleiss' κ", "higher", r"\frac{\bar P - P_e}{1 - P_e},\ P_e = \sum_c p_c^2",
               _AGREE + "Fleiss 1971; verdict: Landis & Koch 1977", range=(-1, 1), bands=LANDIS_KOCH, chance=0.0),
    MetricSpec("cohen_kappa", "Mean pairwise Cohen's κ", "higher",
               r"\frac{2}{R(R-1)}\sum_{a<b} \Big(1 - \frac{\sum w_{ck} O^{ab}_{ck}}{\sum w_{ck} E^{ab}_{ck}}\Big)",
               _AGREE + "Cohen 1960, 1968; Light 1971; verdict: Landis & Koch 1977", range=(-1, 1), bands=LANDIS_KOCH,
               chance=0.0),
    MetricSpec("gwet_ac1", "Gwet's AC1", "higher",
               r"\frac{p_a - p_e}{1 - p_e},\ p_e = \frac{1}{K-1}\sum_c \pi_c(1 - \pi_c)",
               _AGREE + "Gwet 2008, 2014; verdict: Landis & Koch 1977", range=(-1, 1), bands=LANDIS_KOCH, chance=0.0),
    MetricSpec("percent_agreement", "Percent agreement", "higher",
               r"\frac{1}{N'}\sum_{u} \sum_c \frac{n_{uc}(n_{uc}-1)}{m_u(m_u-1)}",
               "seed 001 §21.3.1 (pairwise_agreement_rate, averaged per item)", range=(0, 1)),
    MetricSpec("gold_accuracy", "Gold accuracy (all raters)", "higher",
               r"\frac{|\{\text{ratings of gold items} = \text{gold}\}|}{|\{\text{ratings of gold items}\}|}",
               "seed 001 §21.3.2 (AnnotationQualityMonitor.check_annotation)", range=(0, 1)),
    MetricSpec("embedding_human_spearman", "Spearman ρ: embedding similarity vs human grade", "higher",
               r"\rho_S\big(\cos(x_a, x_b),\ \bar y_{ab}\big)", "seed 001 §21.3 (human judgements as ground truth); "
               "Spearman 1904", range=(-1, 1), chance=0.0),
)
AGREEMENT = ("krippendorff_alpha", "fleiss_kappa", "cohen_kappa", "gwet_ac1", "percent_agreement")


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RatingData:
    """Ratings coded for the coefficients: ``item`` / ``rater`` / ``cat`` indices per rating, the
    ``items``, ``raters`` and ``categories`` (labels, sorted), their numeric ``values`` (category
    ranks for text), and the per-item ``counts`` (items × K)."""

    item: np.ndarray
    rater: np.ndarray
    cat: np.ndarray
    items: np.ndarray
    raters: np.ndarray
    categories: np.ndarray
    values: np.ndarray
    counts: np.ndarray
    level: str

    @classmethod
    def of(cls, ratings: pd.DataFrame, level: str) -> "RatingData":
        """From a table with columns ``item``, ``rater``, ``label`` (one row per rating)."""
        if level not in ("nominal", "ordinal", "interval"):
            raise ValueError(f"level must be nominal, ordinal or interval, not {level!r}")
        item, items = pd.factorize(ratings["item"].to_numpy(dtype=object), sort=False)
        rater, raters = pd.factorize(ratings["rater"].to_numpy(dtype=object), sort=True)
        labels = ratings["label"].to_numpy()
        numeric = labels.dtype.kind in "iuf"
        categories = np.unique(labels.astype(float) if numeric else labels.astype(str))
        cat = np.searchsorted(categories, labels.astype(float) if numeric else labels.astype(str))
        values = categories.astype(float) if numeric else np.arange(len(categories), dtype=float)
        if level != "nominal" and not numeric:
            raise ValueError(f"level {level} needs numeric labels")
        counts = np.zeros((len(items), len(categories)))
        np.add.at(counts, (item, cat), 1.0)
        return cls(item, rater, cat, np.asarray(items, dtype=object), np.asarray(raters, dtype=object),
                   categories, values, counts, level)

    @property
    def K(self) -> int:
        return len(self.categories)

    @property
    def m(self) -> np.ndarray:
        """Ratings per item."""
        return self.counts.sum(1)

    def matrix(self) -> np.ndarray:
        """The items × raters matrix of category indices (-1 where missing)."""
        out = np.full((len(self.items), len(self.raters)), -1, np.int64)
        out[self.item, self.rater] = self.cat
        return out


def _delta2(level: str, values: np.ndarray, n_c: np.ndarray) -> np.ndarray:
    """Krippendorff's squared difference function for the categories (``n_c`` the pairable values)."""
    K = len(values)
    if level == "nominal":
        return 1.0 - np.eye(K)
    if level == "interval":
        return (values[:, None] - values[None, :]) ** 2
    cum = np.cumsum(n_c)
    lo, hi = np.minimum.outer(np.arange(K), np.arange(K)), np.maximum.outer(np.arange(K), np.arange(K))
    between = cum[hi] - cum[lo] + n_c[lo]  # sum_{g=lo}^{hi} n_g
    return (between - (n_c[:, None] + n_c[None, :]) / 2.0) ** 2


def coincidences(counts: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Krippendorff's coincidence matrix :math:`o_{ck}` (items weighted by ``w``; items rated once add nothing)."""
    m = counts.sum(1)
    c = np.where(m >= 2, 1.0 / np.maximum(m - 1, 1), 0.0) * (1.0 if w is None else w)
    cw = counts * c[:, None]
    return counts.T @ cw - np.diag(cw.sum(0))


def krippendorff_alpha(data: RatingData, level: str | None = None, w: np.ndarray | None = None) -> float:
    """Krippendorff's α at ``level`` (default: the data's); NaN when there is no expected disagreement."""
    level = level or data.level
    o = coincidences(data.counts, w)
    n_c = o.sum(1)
    n = n_c.sum()
    d2 = _delta2(level, data.values, n_c)
    de = float(n_c @ d2 @ n_c)
    if n <= 1 or de <= 0:
        return float("nan")
    return 1.0 - (n - 1) * float((o * d2).sum()) / de


def fleiss_applicable(data: RatingData) -> str | None:
    """Why Fleiss' kappa does not apply, or ``None``: it needs the same number of ratings for every item."""
    m = data.m
    if m.min() != m.max():
        return (f"omitted: the items have {int(m.min())} to {int(m.max())} ratings each, and Fleiss' κ needs the "
                "same number on every item (Krippendorff's α handles the missing ratings)")
    if m[0] < 2:
        return "omitted: every item has a single rating"
    return None


def fleiss_kappa(data: RatingData, w: np.ndarray | None = None) -> float:
    """Fleiss' (1971) kappa (every item rated ``m`` times; see :func:`fleiss_applicable`)."""
    counts = data.counts
    m = float(counts.sum(1)[0])
    w = np.ones(len(counts)) if w is None else w
    P = ((counts ** 2).sum(1) - m) / (m * (m - 1))
    tot = w.sum()
    Pbar = float(w @ P) / tot
    p = (w @ counts) / (tot * m)
    Pe = float((p ** 2).sum())
    return (Pbar - Pe) / (1 - Pe) if Pe < 1 else float("nan")


def _pair_agreement(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item: the share of agreeing rater pairs, and whether the item has at least two ratings."""
    m = counts.sum(1)
    ok = m >= 2
    P = np.where(ok, (counts * (counts - 1)).sum(1) / np.maximum(m * (m - 1), 1), 0.0)
    return P, ok


def percent_agreement(data: RatingData, w: np.ndarray | None = None) -> float:
    """Mean over items rated at least twice of the share of agreeing rater pairs."""
    P, ok = _pair_agreement(data.counts)
    w = np.ones(len(P)) if w is None else w
    den = float(w @ ok)
    return float(w @ P) / den if den > 0 else float("nan")


def gwet_ac1(data: RatingData, w: np.ndarray | None = None) -> float:
    """Gwet's AC1 (multiple raters, missing ratings allowed; Gwet 2014 §2.5)."""
    counts = data.counts
    K = counts.shape[1]
    if K < 2:
        return float("nan")
    w = np.ones(len(counts)) if w is None else w
    pa = percent_agreement(data, w)
    m = counts.sum(1)
    rated = m >= 1
    pi = (w[rated] @ (counts[rated] / m[rated, None])) / float(w[rated].sum())
    pe = float((pi * (1 - pi)).sum()) / (K - 1)
    return (pa - pe) / (1 - pe) if pe < 1 else float("nan")


def kappa_weights(data: RatingData) -> np.ndarray:
    """Disagreement weights of Cohen's kappa: unweighted for nominal, quadratic for graded labels."""
    K = data.K
    if data.level == "nominal":
        return 1.0 - np.eye(K)
    x = np.arange(K, dtype=float) if data.level == "ordinal" else data.values
    return (x[:, None] - x[None, :]) ** 2


@dataclass(frozen=True)
class PairTables:
    """For each rater pair with at least :data:`MIN_PAIR_ITEMS` common items: the pair, the common
    items and the flat confusion cell (``c * K + k``) of each."""

    pairs: list            # (a, b) rater indices
    items: list            # arrays of common item indices
    cells: list            # arrays of confusion cells
    n_pairs_total: int


def pair_tables(data: RatingData, min_items: int = MIN_PAIR_ITEMS) -> PairTables:
    M = data.matrix()
    R, K = M.shape[1], data.K
    pairs, items, cells = [], [], []
    for a in range(R):
        for b in range(a + 1, R):
            common = np.flatnonzero((M[:, a] >= 0) & (M[:, b] >= 0))
            if len(common) >= min_items:
                pairs.append((a, b))
                items.append(common)
                cells.append(M[common, a] * K + M[common, b])
    return PairTables(pairs, items, cells, R * (R - 1) // 2)


def _kappa_from_tables(O: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Weighted kappa of confusion tables ``O`` (..., K, K); NaN where the expected disagreement is 0."""
    tot = O.sum((-2, -1), keepdims=True)
    P = O / np.where(tot > 0, tot, 1)
    E = P.sum(-1, keepdims=True) * P.sum(-2, keepdims=True)
    do, de = (P * W).sum((-2, -1)), (E * W).sum((-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(de > 0, 1.0 - do / np.where(de > 0, de, 1), np.nan)


def pairwise_kappas(data: RatingData, tables: PairTables | None = None, w: np.ndarray | None = None) -> np.ndarray:
    """Cohen's kappa of every rater pair of ``tables`` (items weighted by ``w``)."""
    tables = tables or pair_tables(data)
    K = data.K
    W = kappa_weights(data)
    out = np.empty(len(tables.pairs))
    for p, (it, cell) in enumerate(zip(tables.items, tables.cells)):
        O = np.bincount(cell, weights=None if w is None else w[it], minlength=K * K).reshape(K, K)
        out[p] = _kappa_from_tables(O, W)
    return out


def cohen_kappa(data: RatingData, tables: PairTables | None = None, w: np.ndarray | None = None) -> float:
    """Mean pairwise Cohen's kappa (NaN pairs, with no expected disagreement, left out)."""
    k = pairwise_kappas(data, tables, w)
    k = k[np.isfinite(k)]
    return float(k.mean()) if len(k) else float("nan")


def _kappa_replicates(data: RatingData, tables: PairTables, weights: np.ndarray) -> np.ndarray:
    """Mean pairwise kappa for each row of ``weights`` (B × items), one matrix product per pair."""
    K = data.K
    W = kappa_weights(data)
    B = len(weights)
    total, count = np.zeros(B), np.zeros(B)
    for it, cell in zip(tables.items, tables.cells):
        onehot = np.zeros((len(it), K * K))
        onehot[np.arange(len(it)), cell] = 1.0
        O = (weights[:, it] @ onehot).reshape(B, K, K)
        k = _kappa_from_tables(O, W)
        ok = np.isfinite(k)
        total += np.where(ok, k, 0.0)
        count += ok
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


# ---------------------------------------------------------------------------------------------
# All coefficients with intervals
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AgreementResult:
    """The agreement coefficients (``values``), their bootstrap intervals (``intervals``), why one is
    missing (``notes``), the per-pair kappas (``pairs``: rater a, rater b, items, kappa), α at every
    level the labels allow (``alpha_by_level``) and the counts."""

    values: dict
    intervals: dict
    notes: dict
    level: str
    pairs: pd.DataFrame
    alpha_by_level: dict
    n_items: int
    n_items_multi: int
    n_raters: int
    n_ratings: int
    n_boot: int
    ci_method: str


def agreement(data: RatingData, *, n_boot: int = N_BOOT, level: float = DEFAULT_LEVEL, seed: int = 0
              ) -> AgreementResult:
    """Every agreement coefficient of the module docstring with its percentile bootstrap interval over items."""
    n = len(data.items)
    tables = pair_tables(data)
    fleiss_reason = fleiss_applicable(data)
    fns = {"krippendorff_alpha": lambda w: krippendorff_alpha(data, None, w),
           "fleiss_kappa": (lambda w: fleiss_kappa(data, w)) if fleiss_reason is None else None,
           "gwet_ac1": lambda w: gwet_ac1(data, w),
           "percent_agreement": lambda w: percent_agreement(data, w)}
    values, intervals, notes = {}, {}, {}
    for name, fn in fns.items():
        if fn is None:
            values[name], intervals[name], notes[name] = None, (None, None), fleiss_reason
            continue
        values[name] = fn(None)
        reps = weighted_bootstrap(fn, n, n_boot=n_boot, seed=seed)
        intervals[name] = percentile_interval(reps, level)
    kap = pairwise_kappas(data, tables)
    if len(tables.pairs) == 0 or not np.isfinite(kap).any():
        values["cohen_kappa"], intervals["cohen_kappa"] = None, (None, None)
        notes["cohen_kappa"] = (f"omitted: no pair of raters shares {MIN_PAIR_ITEMS} or more items with any "
                                "disagreement expected by chance")
    else:
        values["cohen_kappa"] = float(np.nanmean(kap))
        rng = np.random.default_rng(seed)
        weights = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(float)
        intervals["cohen_kappa"] = percentile_interval(_kappa_replicates(data, tables, weights), level)
        notes["cohen_kappa"] = (f"mean over {int(np.isfinite(kap).sum())} of {tables.n_pairs_total} rater pairs "
                                f"(pairs sharing at least {MIN_PAIR_ITEMS} items); "
                                + ("unweighted" if data.level == "nominal" else "quadratic weights"))
    for name, v in values.items():
        if v is not None and not math.isfinite(v):
            values[name], intervals[name] = None, (None, None)
            notes[name] = "undefined: the ratings show no variation for chance agreement to be estimated from"
    pairs = pd.DataFrame({"rater a": [data.raters[a] for a, _ in tables.pairs],
                          "rater b": [data.raters[b] for _, b in tables.pairs],
                          "common items": [len(i) for i in tables.items], "kappa": kap})
    by_level = {lv: krippendorff_alpha(data, lv) for lv in
                (("nominal", "ordinal", "interval") if data.level != "nominal" else ("nominal",))}
    ci_method = f"{level:.0%} percentile bootstrap over the {n:,} items ({n_boot} resamples)"
    return AgreementResult(values, intervals, notes, data.level, pairs, by_level, n,
                           int((data.m >= 2).sum()), len(data.raters), len(data.item), n_boot, ci_method)


def record_agreement(res: AgreementResult) -> dict:
    """The recorded :class:`~embeval_report.metrics.spec.Metric` of each agreement coefficient."""
    out = {}
    for name in AGREEMENT:
        spec = SPECS[name]
        label = spec.label
        if name == "krippendorff_alpha":
            label = f"{label} ({res.level})"
        if name == "cohen_kappa" and res.values.get(name) is not None:
            label = f"{label} ({'unweighted' if res.level == 'nominal' else 'quadratic weights'})"
        note = res.notes.get(name, "") if res.values.get(name) is None else ""
        out[name] = spec.record(res.values.get(name), res.intervals.get(name), ci_method=res.ci_method, label=label,
                                note=note)
    return out


# ---------------------------------------------------------------------------------------------
# Annotator quality
# ---------------------------------------------------------------------------------------------

def scale_tolerance(data: RatingData) -> float:
    """Agreement tolerance of graded labels: a quarter of the scale's span (seed 001 §21.3.2's ±1 on 0–4);
    0 (exact match) for nominal labels."""
    if data.level == "nominal":
        return 0.0
    return float(data.values.max() - data.values.min()) / 4.0


def agrees_with_others(data: RatingData) -> np.ndarray:
    """Per rating: 1.0 if it agrees with the consensus of the item's other ratings, 0.0 if not, NaN when the
    item has no other rating (nominal: among the others' most frequent labels; graded: within
    :func:`scale_tolerance` of the others' median)."""
    others = data.counts[data.item].copy()
    others[np.arange(len(data.item)), data.cat] -= 1
    t = others.sum(1)
    out = np.full(len(data.item), np.nan)
    has = t >= 1
    if data.level == "nominal":
        own = others[np.arange(len(data.item)), data.cat]
        out[has] = (own[has] >= others[has].max(1)).astype(float)
        return out
    cum = others.cumsum(1)
    lo = np.argmax(cum >= np.ceil(t / 2)[:, None], axis=1)
    hi = np.argmax(cum >= (np.floor(t / 2) + 1)[:, None], axis=1)
    median = (data.values[lo] + data.values[hi]) / 2
    diff = np.abs(data.values[data.cat] - median)
    out[has] = (diff[has] <= scale_tolerance(data) + 1e-12).astype(float)
    return out


@dataclass(frozen=True)
class RaterQuality:
    """One row per rater (``table``), the flagged raters with their reasons (``flagged``: rater ->
    list of reasons), the per-rating agreement with the others (``ratings``: rater, position,
    seconds, agrees, gold_correct) and the fatigue and speed tests (``tests``: list of dicts)."""

    table: pd.DataFrame
    flagged: dict
    ratings: pd.DataFrame
    tests: list = field(default_factory=list)
    speed_accuracy: dict | None = None


def rater_quality(data: RatingData, ratings: pd.DataFrame, *, ds: DawidSkene | None = None,
                  level: float = DEFAULT_LEVEL, min_accuracy: float = MIN_ACCURACY, min_tasks: int = MIN_TASKS,
                  min_seconds: float = MIN_SECONDS) -> RaterQuality:
    """Per-rater gold accuracy, agreement with the others' consensus, speed and fatigue drift (module docstring).

    ``ratings`` the tidy table (columns ``seconds``, ``gold``, ``position``; same row order as ``data``).
    """
    agrees = agrees_with_others(data)
    gold = ratings["gold"].to_numpy(dtype=object)
    has_gold = pd.notna(gold)
    label = ratings["label"].to_numpy()
    correct = np.full(len(label), np.nan)
    if has_gold.any():
        g = gold[has_gold]
        lab = label[has_gold]
        correct[has_gold] = np.array([float(a == b) if isinstance(b, str) else float(float(a) == float(b))
                                      for a, b in zip(lab, g)])
    seconds = ratings["seconds"].to_numpy(float)
    position = ratings["position"].to_numpy(float)
    per = pd.DataFrame({"rater": data.raters[data.rater], "position": position, "seconds": seconds,
                        "agrees": agrees, "gold_correct": correct})
    rows, flagged, tests = [], {}, []
    for r, name in enumerate(data.raters):
        sel = data.rater == r
        row = {"rater": name, "ratings": int(sel.sum())}
        reasons = []
        gc = correct[sel]
        gc = gc[np.isfinite(gc)]
        row["gold items"] = len(gc)
        row["gold accuracy"] = float(gc.mean()) if len(gc) else np.nan
        lo, hi = wilson_ci(int(gc.sum()), len(gc), level) if len(gc) else (None, None)
        row["gold ci"] = (lo, hi)
        if len(gc) >= min_tasks and gc.mean() < min_accuracy:
            reasons.append(f"gold accuracy {gc.mean():.1%} < {min_accuracy:.0%} over {len(gc)} gold items")
        ag = agrees[sel]
        ag = ag[np.isfinite(ag)]
        row["shared items"] = len(ag)
        row["consensus agreement"] = float(ag.mean()) if len(ag) else np.nan
        row["consensus ci"] = wilson_ci(int(ag.sum()), len(ag), level) if len(ag) else (None, None)
        if len(ag) >= min_tasks and ag.mean() < min_accuracy:
            reasons.append(f"agrees with the other raters on {ag.mean():.1%} < {min_accuracy:.0%} of {len(ag)} items")
        s = seconds[sel]
        s = s[np.isfinite(s)]
        row["median seconds"] = float(np.median(s)) if len(s) else np.nan
        if len(s) and np.median(s) < min_seconds:
            reasons.append(f"median {np.median(s):.1f} s per rating < the {min_seconds:g} s minimum")
        row["dawid-skene accuracy"] = float(ds.accuracy[r]) if ds is not None else np.nan
        # fatigue: agreement late vs early in the session
        p, a = position[sel], agrees[sel]
        ok = np.isfinite(p) & np.isfinite(a)
        row["drift"], row["drift p"] = np.nan, np.nan
        if ok.sum() >= MIN_SESSION:
            p, a = p[ok], a[ok]
            order = np.argsort(p, kind="stable")
            third = len(order) // 3
            early, late = a[order[:third]], a[order[-third:]]
            row["drift"] = float(late.mean() - early.mean())
            row["early"], row["late"] = float(early.mean()), float(late.mean())
            if 0 < a.sum() < len(a):
                u = sps.mannwhitneyu(p[a == 0], p[a == 1], alternative="greater")
                row["drift p"] = float(u.pvalue)
                tests.append(dict(rater=str(name), statistic=float(u.statistic), p_value=float(u.pvalue),
                                  n=f"{int((a == 0).sum())} disagreeing + {int((a == 1).sum())} agreeing ratings"))
        rows.append(row)
        flagged[str(name)] = reasons
    table = pd.DataFrame(rows)
    # Holm across the raters' fatigue tests
    if tests:
        _, adj = adjust_pvalues([t["p_value"] for t in tests], "holm")
        for t, pa in zip(tests, adj):
            t["p_holm"] = float(pa)
            i = int(np.flatnonzero(table["rater"].astype(str).to_numpy() == t["rater"])[0])
            if pa < ALPHA and table.loc[i, "drift"] < 0:
                flagged[t["rater"]].append(f"fatigue: agreement with the others falls from {table.loc[i, 'early']:.0%} "
                                           f"in the first third of the session to {table.loc[i, 'late']:.0%} in the "
                                           f"last (Holm p = {pa:.2g})")
    table["drift p (Holm)"] = table["rater"].astype(str).map({t["rater"]: t["p_holm"] for t in tests})
    table["flags"] = [flagged[str(r)] for r in table["rater"]]
    # speed vs accuracy across raters
    speed = None
    both = table[["median seconds", "consensus agreement"]].dropna()
    if len(both) >= 4 and both["median seconds"].nunique() > 1 and both["consensus agreement"].nunique() > 1:
        rho = sps.spearmanr(both["median seconds"], both["consensus agreement"])
        speed = dict(rho=float(rho.statistic), p_value=float(rho.pvalue), n=len(both))
    return RaterQuality(table, {k: v for k, v in flagged.items() if v}, per, tests, speed)


# ---------------------------------------------------------------------------------------------
# Embedding similarity against the human grades
# ---------------------------------------------------------------------------------------------

def _spearman(x, y, axis=-1):
    """Spearman's ρ along ``axis`` (vectorised for :func:`~embeval_report.stats.bootstrap_ci`)."""
    rx, ry = sps.rankdata(x, axis=axis), sps.rankdata(y, axis=axis)
    rx = rx - rx.mean(axis=axis, keepdims=True)
    ry = ry - ry.mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(axis) / np.sqrt((rx * rx).sum(axis) * (ry * ry).sum(axis))


@dataclass(frozen=True)
class EmbeddingAgreement:
    """Spearman's ρ between the embedding's similarity and the mean human grade of each pair
    (``rho``, ``ci``, ``p_value``), the pairs (``pairs``: item, id1, id2, similarity, human, ratings,
    disagreement) and the raters' own ρ with the mean of the others (``raters``: the human ceiling)."""

    rho: float
    ci: tuple
    p_value: float
    n: int
    pairs: pd.DataFrame
    raters: pd.DataFrame
    ci_method: str


def embedding_agreement(similarity, human, *, data: RatingData | None = None, level: float = DEFAULT_LEVEL,
                        seed: int = 0, n_boot: int = N_BOOT) -> EmbeddingAgreement:
    """Spearman's ρ between ``similarity`` and ``human`` (per item, aligned), a BCa bootstrap interval over
    items, SciPy's p-value (null: no monotone association); per rater (``data`` given, graded labels) the
    ρ of the rater's grades with the mean of the other raters, on the items both cover."""
    x, y = np.asarray(similarity, float), np.asarray(human, float)
    res = sps.spearmanr(x, y)
    rho = float(res.statistic)
    ci = bootstrap_ci(_spearman, x, y, paired=True, level=level, n_boot=n_boot, seed=seed)
    n = len(x)
    # rank disagreement: |percentile of the similarity - percentile of the human grade|
    px, py = sps.rankdata(x) / n, sps.rankdata(y) / n
    pairs = pd.DataFrame({"similarity": x, "human": y, "disagreement": np.abs(px - py),
                          "direction": np.where(px > py, "embedding closer than humans say",
                                                "humans closer than the embedding says")})
    raters = pd.DataFrame(columns=["rater", "items", "rho"])
    if data is not None and data.level != "nominal":
        M = data.matrix()
        V = np.where(M >= 0, data.values[np.maximum(M, 0)], np.nan)
        rows = []
        for r, name in enumerate(data.raters):
            mine = V[:, r]
            others = np.delete(V, r, axis=1)
            cnt = np.isfinite(others).sum(1)
            mean_o = np.where(cnt > 0, np.nansum(np.nan_to_num(others, nan=0.0), 1) / np.maximum(cnt, 1), np.nan)
            ok = np.isfinite(mine) & np.isfinite(mean_o)
            if ok.sum() >= MIN_TASKS and np.ptp(mine[ok]) > 0 and np.ptp(mean_o[ok]) > 0:
                rows.append({"rater": name, "items": int(ok.sum()),
                             "rho": float(sps.spearmanr(mine[ok], mean_o[ok]).statistic)})
        if rows:
            raters = pd.DataFrame(rows)
    return EmbeddingAgreement(rho, ci, float(res.pvalue), n, pairs, raters,
                              f"{level:.0%} BCa bootstrap over the {n:,} pairs ({n_boot} resamples)")


def alpha_without(ratings: pd.DataFrame, level_of_measurement: str, raters: list, *, level: float = DEFAULT_LEVEL,
                  seed: int = 0) -> tuple | None:
    """Krippendorff's α once the ratings of ``raters`` are removed, with its item-bootstrap percentile interval:
    ``(alpha, low, high, raters kept)``; ``None`` without raters to remove or when fewer than two raters, or no
    item rated twice, remain."""
    if not raters:
        return None
    kept = ratings[~ratings["rater"].astype(str).isin([str(r) for r in raters])]
    if kept["rater"].nunique() < 2 or not kept["item"].duplicated().any():
        return None
    d = RatingData.of(kept, level_of_measurement)
    reps = weighted_bootstrap(lambda w: krippendorff_alpha(d, None, w), len(d.items), n_boot=N_BOOT, seed=seed)
    lo, hi = percentile_interval(reps, level)
    return float(krippendorff_alpha(d)), lo, hi, int(kept["rater"].nunique())
