r"""Fairness and bias (seed 000 §222): is the embedding as good for every group of entities, and does it
associate groups with concepts?

**Groups.** A protected attribute is a metadata column (``fairness: {attributes: [...]}``); entities
without a value are left out of that attribute and counted. A group with fewer than ``min_group_size``
members (default 30) is reported as *too small* and takes no part in any comparison. The
intersection of two attributes is compared the same way (its cells are groups).

**Per-group quality** (each a mean over the group's entities, :math:`\bar v_g = \frac1{n_g}\sum_{i\in g} v_i`):

* ``probe_accuracy`` (extrinsic, higher is better) — :math:`v_i = [\hat y_i = y_i]`, the held-out
  prediction of the node-classification probe (:func:`~.classification.evaluate_node_classification`:
  standardised multinomial logistic regression, stratified 5-fold CV over *all* labelled entities);
  every prediction comes from a model that did not see the entity (the seed's
  ``downstream_fairness`` scores the training data instead).
* ``label_agreement`` (intrinsic, higher) — the share of an entity's k cosine nearest neighbours
  (over the whole set) with its label; neighbours without a label are skipped.
* ``k_occurrence`` (intrinsic) — :math:`N_k(i)/k`, how often the entity is among the others' k nearest
  neighbours relative to the average (1; Radovanović et al. 2010): a group below 1 is less often
  retrieved, a group above 1 crowds the neighbour lists (hubs).
* ``apcs`` (intrinsic, lower is better) — the group's mean pairwise cosine
  :math:`(\lVert s_g\rVert^2 - n_g)/(n_g(n_g-1))`, :math:`s_g = \sum_{i\in g} u_i`
  (:func:`~.isotropy.cosine_moments`); a group squeezed into a narrow cone is represented with less
  resolution (the same number :func:`~.isotropy.measure_isotropy` reports for the group's rows).

**Gaps** (fairlearn's ``MetricFrame.difference()`` / ``ratio()``, ``method="between_groups"``):
:math:`\Delta = \max_g \bar v_g - \min_g \bar v_g` (lower is better) and
:math:`\rho = \min_g \bar v_g / \max_g \bar v_g` (higher is better; not for ``apcs``, which can be negative).
``probe_accuracy_difference`` gets the seed's verdict: its demo warns above a 10-point gap and its
Figure 222.1 marks gaps of 5 points or more.

**Intervals.** One nonparametric bootstrap over the entities of the compared groups
(:func:`~embeval_report.stats.weighted_bootstrap`; multinomial weights), percentile intervals for every
group mean, difference and ratio. The probe's predictions and the k-NN graph are held fixed (the
intervals cover which entities the set holds, not refitting). The max − min of noisy means is biased
upward, most for small groups; the interval says how far, and the bootstrap bias-corrected estimate
:math:`2\hat\theta - \bar\theta^*` is recorded beside the value. A Pearson chi-squared test of independence
(group x correct/wrong) asks whether the probe's accuracy differs between groups at all.

**WEAT** (Caliskan, Bryson & Narayanan 2017). For target sets X, Y and attribute sets A, B of entities,
:math:`s(w, A, B) = \operatorname{mean}_{a\in A}\cos(w,a) - \operatorname{mean}_{b\in B}\cos(w,b)`; the statistic
:math:`S = \sum_{x\in X}s(x) - \sum_{y\in Y}s(y)`; the effect size
:math:`d = (\operatorname{mean}_X s - \operatorname{mean}_Y s)/\sigma`, with two conventions for :math:`\sigma`:
the standard deviation of :math:`s` over all target words :math:`X\cup Y` (Caliskan et al.; sample sd,
ddof 1 — WEFE uses ddof 0, a factor :math:`\sqrt{(n-1)/n}`), and the pooled within-set sd (Cohen's d).
The one-sided p-value is the share of equal-size re-partitions :math:`(X_i, Y_i)` of :math:`X\cup Y` with
:math:`S_i \ge S`: exact over every partition when there are at most ``exact_limit`` of them, otherwise
from ``n_perm`` random partitions, :math:`(1 + \#\{S_i \ge S\})/(1 + n_{perm})` (Phipson & Smyth 2010),
with its Monte-Carlo standard error :math:`\sqrt{p(1-p)/n_{perm}}`. (WEFE 1.0.1 samples its
"permutations" with replacement, so its p-value is not a permutation p-value.) Effect-size intervals:
BCa bootstrap over the target words of each set.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import UndefinedMetricWarning
from ..kernels import as_numpy, resolve_device
from ..stats import (DEFAULT_LEVEL, HypothesisTest, bias_corrected, bootstrap_ci, percentile_interval,
                     weighted_bootstrap)
from . import fairness_units as fu
from .fairness_units import MIN_GROUP_SIZE, Groups, intersect, make_groups, neighbour_label_agreement  # noqa: F401
from .isotropy import cosine_moments
from .spec import MetricSpec, specs
from .thresholds import Bands

#: bootstrap resamples of the group comparisons (fewer for very large sets, see :func:`boot_count`)
N_BOOT = 300
#: a WEAT p-value is exact when the target words have at most this many equal-size partitions
EXACT_LIMIT = 100_000
N_PERM = 10_000
SEED = "seed 000 §222"
FAIRLEARN = "fairlearn MetricFrame between_groups"
TOO_SMALL = "too small"

#: measure -> (label, direction of the per-group value, has a ratio)
MEASURES = {
    "probe_accuracy": ("held-out probe accuracy", "higher", True),
    "label_agreement": ("neighbourhood label agreement", "higher", True),
    "k_occurrence": ("relative k-occurrence N_k / k", "higher", True),
    "apcs": ("within-group mean pairwise cosine", "lower", False),
}
ACCURACY_GAP_BANDS = Bands("lower", 0.05, 0.10, f"{SEED} (demo warning above a 10 % gap; Figure 222.1 marks ≥ 5 %)",
                           "healthy < 5 points, concerning 5–10 points, problematic > 10 points")


def _gap_specs():
    out = []
    formulas = {"probe_accuracy": r"[\hat y_i = y_i]", "label_agreement": r"\tfrac1k|\{j \in N_k(i): y_j = y_i\}|",
                "k_occurrence": r"N_k(i)/k", "apcs": r"\mathrm{APCS}_g"}
    for m, (label, _, has_ratio) in MEASURES.items():
        v = r"\bar v_g" if m != "apcs" else r"\mathrm{APCS}_g"
        where = rf",\ v_i = {formulas[m]}" if m != "apcs" else ""
        out.append(MetricSpec(f"{m}_difference", f"{label}: gap between groups (max − min)", "lower",
                              rf"\max_g {v} - \min_g {v}{where}", f"{SEED}; {FAIRLEARN} difference()",
                              range=(0.0, math.inf), bands=ACCURACY_GAP_BANDS if m == "probe_accuracy" else None))
        if has_ratio:
            out.append(MetricSpec(f"{m}_ratio", f"{label}: ratio between groups (min / max)", "higher",
                                  rf"\min_g {v} / \max_g {v}", f"{SEED}; {FAIRLEARN} ratio()", range=(0.0, 1.0)))
    return out


WEAT_REF = "Caliskan, Bryson & Narayanan 2017 (WEAT); WEFE WEAT"
SPECS = specs(
    *_gap_specs(),
    MetricSpec("weat_effect_size", "WEAT effect size (sd over all target words)", "lower",
               r"\frac{\mathrm{mean}_{x\in X} s(x,A,B) - \mathrm{mean}_{y\in Y} s(y,A,B)}{\mathrm{sd}_{w\in X\cup Y}\, s(w,A,B)}",
               f"{WEAT_REF}; |d| near 0 = no association"),
    MetricSpec("weat_effect_size_pooled", "WEAT effect size (pooled within-set sd)", "lower",
               r"\frac{\mathrm{mean}_X s - \mathrm{mean}_Y s}{\sqrt{((|X|-1)\,s_X^2 + (|Y|-1)\,s_Y^2)/(|X|+|Y|-2)}}",
               "Cohen's d on the WEAT association scores; |d| near 0 = no association"),
)


def slug(name: str) -> str:
    """A metric-name-safe form of an attribute or test name."""
    return re.sub(r"[^0-9a-zA-Z]+", "_", str(name)).strip("_").lower() or "x"


def boot_count(n: int, d: int, n_boot: int = N_BOOT) -> int:
    """Bootstrap resamples for ``n`` rows of ``d`` dimensions: ``n_boot``, fewer (not below 100) for huge sets."""
    return int(max(min(n_boot, 100), min(n_boot, 2e9 // max(n * d, 1))))


# ---------------------------------------------------------------------------------------------
# The group comparison
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GroupComparison:
    """One attribute's groups compared: the per-group table, the gap values and their intervals."""

    groups: Groups
    table: pd.DataFrame        # one row per group (too-small groups last, with a note)
    values: dict               # "<measure>_difference" / "_ratio" -> value
    cis: dict                  # same keys -> (low, high)
    extremes: dict             # measure -> (best group, worst group)
    test: HypothesisTest | None
    n_boot: int
    bias_corrected: dict = field(default_factory=dict)  # same keys: 2 x estimate - mean of the replicates


def grouped_rows(X, groups: Groups, rows: dict[str, np.ndarray]) -> tuple:
    """The compared entities grouped: ``(sel, codes, starts, U, vals)`` — the rows in a group (stably sorted by
    group), their group codes, each group's first position, their unit rows (float64; a zero row stays zero) and
    each measure's values on them."""
    sel = np.flatnonzero(groups.codes >= 0)
    codes = groups.codes[sel]
    order = np.argsort(codes, kind="stable")
    sel, codes = sel[order], codes[order]
    starts = np.searchsorted(codes, np.arange(len(groups.names)))
    U = np.asarray(X[sel], np.float64)
    nrm = np.linalg.norm(U, axis=1, keepdims=True)
    U = np.divide(U, nrm, out=np.zeros_like(U), where=nrm > 0)
    return sel, codes, starts, U, {m: np.asarray(v, float)[sel] for m, v in rows.items()}


def compare_groups(X, groups: Groups, rows: dict[str, np.ndarray], *, n_boot: int = N_BOOT, level: float = DEFAULT_LEVEL,
                   seed: int = 0) -> GroupComparison:
    """Compare the groups on every per-row measure in ``rows`` (name -> per-row values, NaN = not evaluated)
    and on the within-group APCS, with one bootstrap over the compared entities (module docstring)."""
    X = as_numpy(X)
    G = len(groups.names)
    sel, codes, starts, U, vals = grouped_rows(X, groups, rows)
    names = [*rows, "apcs"]

    ends = np.r_[starts[1:], len(sel)]

    def sums(V):  # per group, the values of its rows added in row order (as np.bincount adds them), per row of V
        return np.column_stack([np.cumsum(V[:, a:b], axis=1)[:, -1] if b > a else np.zeros(len(V))
                                for a, b in zip(starts, ends)] or [np.zeros((len(V), 0))]) + 0.0

    def statistic(W):  # every row of unit weights W at once: the measures' means as one row at a time would give
        out = np.full((len(W), len(names), G), np.nan)
        for j, m in enumerate(rows):
            ok = np.isfinite(vals[m])
            num, den = sums(W * np.where(ok, vals[m], 0.0)), sums(W * ok)
            out[:, j] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        if G:  # cosine_moments' mean, vectorised over groups: (|s_g|^2 - sum w^2) / ((sum w)^2 - sum w^2); the
            # weighted sums s_g as one product per group (rounded in another order than a row at a time: ~1e-16)
            s = np.stack([W[:, a:b] @ U[a:b] for a, b in zip(starts, ends)], axis=1)
            n_w, same = sums(W), sums(W * W)
            den = n_w * n_w - same
            out[:, -1] = np.where(den > 0, (np.einsum("rgd,rgd->rg", s, s) - same) / np.where(den > 0, den, 1), np.nan)
        return out

    est = statistic(np.ones((1, len(sel))))[0]
    for g in range(G):  # the point estimate through isotropy's own formula
        rows_g = U[starts[g]:ends[g]]
        if len(rows_g) >= 2:
            est[-1, g] = cosine_moments(rows_g.sum(0), np.zeros((1, 1)), float(len(rows_g)))[0]
    B = boot_count(len(sel), X.shape[1], n_boot) if G >= 1 and len(sel) >= 2 else 0
    reps = weighted_bootstrap(statistic, len(sel), n_boot=B, seed=seed, batch=max(1, 2**22 // max(len(U), 1))) \
        if B else np.empty((0, len(names), G))
    values, cis, extremes, corrected = {}, {}, {}, {}
    for j, m in enumerate(names):
        est_g = est[j]
        ok = np.isfinite(est_g)
        if ok.sum() < 2:
            continue
        better_high = MEASURES[m][1] == "higher"
        best = int(np.nanargmax(est_g) if better_high else np.nanargmin(est_g))
        worst = int(np.nanargmin(est_g) if better_high else np.nanargmax(est_g))
        extremes[m] = (groups.names[best], groups.names[worst])
        r = reps[:, j, :][:, ok]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            values[f"{m}_difference"] = float(np.max(est_g[ok]) - np.min(est_g[ok]))
            d_reps = np.nanmax(r, 1) - np.nanmin(r, 1) if B else None
            cis[f"{m}_difference"] = percentile_interval(d_reps, level) if B else None
            corrected[f"{m}_difference"] = bias_corrected(values[f"{m}_difference"], d_reps, (0, np.inf)) if B else None
            if MEASURES[m][2]:
                hi = float(np.max(est_g[ok]))
                values[f"{m}_ratio"] = float(np.min(est_g[ok]) / hi) if hi > 0 else float("nan")
                r_reps = np.nanmin(r, 1) / np.nanmax(r, 1) if B else None
                cis[f"{m}_ratio"] = percentile_interval(r_reps, level) if B else None
                corrected[f"{m}_ratio"] = bias_corrected(values[f"{m}_ratio"], r_reps, (0, 1)) if B else None
    table = _group_table(groups, vals, codes, est, reps, names, level)
    return GroupComparison(groups, table, values, cis, extremes, _accuracy_test(groups, rows.get("probe_accuracy")), B,
                           corrected)


def _group_table(groups, vals, codes, est, reps, names, level) -> pd.DataFrame:
    rows = []
    for g, name in enumerate(groups.names):
        row = {"group": name, "n": groups.sizes[name]}
        for j, m in enumerate(names):
            if m in vals:
                row[f"{m} n"] = int(np.isfinite(vals[m][codes == g]).sum())
            row[m] = est[j, g]
            lo, hi = percentile_interval(reps[:, j, g], level) if len(reps) else (np.nan, np.nan)
            row[f"{m} ci_low"], row[f"{m} ci_high"] = lo, hi
        row["note"] = ""
        rows.append(row)
    for name in groups.too_small:
        rows.append({"group": name, "n": groups.sizes[name],
                     "note": f"{TOO_SMALL} (fewer than {groups.min_size} members): not compared"})
    return pd.DataFrame(rows)


def _accuracy_test(groups: Groups, correct) -> HypothesisTest | None:
    """Pearson chi-squared test of independence of group and probe correctness (None when it cannot run)."""
    if correct is None or len(groups.names) < 2:
        return None
    c = np.asarray(correct, float)
    ok = (groups.codes >= 0) & np.isfinite(c)
    G = len(groups.names)
    right = np.bincount(groups.codes[ok], c[ok], minlength=G)
    total = np.bincount(groups.codes[ok], minlength=G)
    keep = total > 0
    table = np.stack([right[keep], total[keep] - right[keep]])
    if keep.sum() < 2 or (table.sum(1) == 0).any():
        return None
    res = sps.chi2_contingency(table, correction=False)
    return HypothesisTest(name=f"probe accuracy by {groups.attribute}", test="Pearson chi-squared test of independence",
                          p_value=float(res.pvalue), statistic=float(res.statistic),
                          n=f"{int(total.sum()):,} entities in {int(keep.sum())} groups",
                          null=f"the held-out probe accuracy is the same in every {groups.attribute} group",
                          family="fairness: probe accuracy by group")


# ---------------------------------------------------------------------------------------------
# WEAT
# ---------------------------------------------------------------------------------------------

def association_scores(W, A, B) -> np.ndarray:
    r""":math:`s(w, A, B) = \mathrm{mean}_{a}\cos(w, a) - \mathrm{mean}_{b}\cos(w, b)` for every row ``w`` of ``W``."""
    def unit(M):
        M = np.asarray(M, np.float64)
        n = np.linalg.norm(M, axis=1, keepdims=True)
        return np.divide(M, n, out=np.zeros_like(M), where=n > 0)
    Wu = unit(W)
    return Wu @ unit(A).mean(0) - Wu @ unit(B).mean(0)


def _effect(x, y, axis=-1, ddof=1):
    allv = np.concatenate([x, y], axis=axis)
    return (np.mean(x, axis=axis) - np.mean(y, axis=axis)) / np.std(allv, axis=axis, ddof=ddof)


def _pooled(x, y, axis=-1):
    nx, ny = x.shape[axis], y.shape[axis]
    sp = np.sqrt(((nx - 1) * np.var(x, axis=axis, ddof=1) + (ny - 1) * np.var(y, axis=axis, ddof=1)) / (nx + ny - 2))
    return (np.mean(x, axis=axis) - np.mean(y, axis=axis)) / sp


def weat_effect_sizes(sx, sy) -> dict[str, float]:
    """Effect sizes from the association scores of the two target sets: ``effect_size`` (sd over all target
    words, ddof 1), ``effect_size_wefe`` (ddof 0, as WEFE) and ``effect_size_pooled`` (pooled within-set sd)."""
    sx, sy = np.asarray(sx, float), np.asarray(sy, float)
    with np.errstate(all="ignore"):
        return {"effect_size": float(_effect(sx, sy)), "effect_size_wefe": float(_effect(sx, sy, ddof=0)),
                "effect_size_pooled": float(_pooled(sx, sy))}


def weat_p_value(sx, sy, *, n_perm: int = N_PERM, exact_limit: int = EXACT_LIMIT, seed: int = 0) -> dict:
    """One-sided permutation p-value of :math:`S = \\sum_X s - \\sum_Y s` over equal-size partitions of X ∪ Y
    (module docstring): ``p_value``, ``method`` ("exact" | "sampled"), ``n_partitions``, ``n_used``, ``mc_error``."""
    pool = np.concatenate([np.asarray(sx, float), np.asarray(sy, float)])
    nx, N = len(sx), len(pool)
    total = math.comb(N, nx)
    observed = float(np.sum(sx))
    tol = 1e-12 * max(1.0, float(np.abs(pool).sum()))  # the observed partition summed in another order
    if total <= exact_limit:
        count, done = 0, 0
        it = combinations(range(N), nx)
        while True:
            block = np.fromiter((i for c in _take(it, 50_000) for i in c), dtype=np.int64)
            if not block.size:
                break
            sums = pool[block.reshape(-1, nx)].sum(1)
            count += int((sums >= observed - tol).sum())
            done += len(sums)
        return dict(p_value=count / total, method="exact", n_partitions=total, n_used=total, mc_error=0.0)
    rng = np.random.default_rng(seed)
    count, left = 0, int(n_perm)
    while left:
        b = min(left, 2000)
        idx = np.argsort(rng.random((b, N)), axis=1)[:, :nx]
        count += int((pool[idx].sum(1) >= observed - tol).sum())
        left -= b
    p = (1 + count) / (1 + n_perm)
    return dict(p_value=p, method="sampled", n_partitions=total, n_used=int(n_perm),
                mc_error=math.sqrt(p * (1 - p) / n_perm))


def attribute_contrast(X, Y, A, B) -> tuple[np.ndarray, np.ndarray]:
    r"""Per attribute word :math:`a`, :math:`t(a) = \sum_{x\in X}\cos(x, a) - \sum_{y\in Y}\cos(y, a)`, of A's words
    and of B's: the WEAT statistic is :math:`S = \mathrm{mean}_A t - \mathrm{mean}_B t`, so re-partitioning
    :math:`A \cup B` (:func:`weat_p_value` on these) asks whether the attribute sets, drawn as they were, could give
    S by chance: the attribute side of the test, which the target permutation test holds fixed."""
    def unit(M):
        M = np.asarray(M, np.float64)
        n = np.linalg.norm(M, axis=1, keepdims=True)
        return np.divide(M, n, out=np.zeros_like(M), where=n > 0)
    contrast = unit(X).sum(0) - unit(Y).sum(0)
    return unit(A) @ contrast, unit(B) @ contrast


def _take(it, n):
    for _, c in zip(range(n), it):
        yield c


@dataclass(frozen=True)
class WeatResult:
    """One WEAT test: sizes (in the vocabulary), out-of-vocabulary words, statistic, effect sizes with
    intervals, and the permutation p-value; ``reason`` says why it did not run (then the numbers are NaN)."""

    name: str
    set_names: tuple          # X, Y, A, B
    sizes: tuple              # words in the vocabulary per set
    oov: tuple                # out-of-vocabulary words per set
    statistic: float = float("nan")
    mean_x: float = float("nan")
    mean_y: float = float("nan")
    effect: dict = field(default_factory=dict)
    cis: dict = field(default_factory=dict)
    p: dict = field(default_factory=dict)
    p_attributes: dict = field(default_factory=dict)   # the attribute-side permutation test (attribute_contrast)
    reason: str = ""
    scores_x: np.ndarray = field(default_factory=lambda: np.empty(0))  # s(x, A, B) of each target word of X
    scores_y: np.ndarray = field(default_factory=lambda: np.empty(0))

    @property
    def p_value(self) -> float:
        return float(self.p.get("p_value", float("nan")))


def weat(X, Y, A, B, *, name: str = "WEAT", set_names=("X", "Y", "A", "B"), oov=((), (), (), ()), n_perm: int = N_PERM,
         exact_limit: int = EXACT_LIMIT, level: float = DEFAULT_LEVEL, seed: int = 0, n_boot: int = 2000,
         min_words: int = 2) -> WeatResult:
    """The WEAT of target vectors ``X``, ``Y`` against attribute vectors ``A``, ``B`` (module docstring)."""
    sizes = tuple(len(M) for M in (X, Y, A, B))
    base = dict(name=name, set_names=tuple(set_names), sizes=sizes, oov=tuple(tuple(o) for o in oov))
    short = [f"{set_names[i]!r} has {sizes[i]}" for i in range(4) if sizes[i] < (min_words if i < 2 else 1)]
    if short:
        lost = sum(len(o) for o in oov)
        return WeatResult(**base, reason=f"each target set needs at least {min_words} words in the vocabulary and "
                                         "each attribute set one; "
                                         f"{', '.join(short)}" + (f" ({lost} word(s) out of the vocabulary)" if lost else ""))
    sx, sy = association_scores(X, A, B), association_scores(Y, A, B)
    effect = weat_effect_sizes(sx, sy)
    cis = {}
    for key, fn in (("effect_size", _effect), ("effect_size_pooled", _pooled)):
        if np.isfinite(effect[key]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UndefinedMetricWarning)
                ci = bootstrap_ci(lambda x, y, axis=-1, f=fn: f(x, y, axis=axis), sx, sy, level=level, n_boot=n_boot,
                                  seed=seed)
            if np.isfinite(ci).all():
                cis[key] = ci
            else:
                warnings.warn(f"WEAT {name}: no interval for the effect size: resampling {len(sx)} + {len(sy)} target "
                              "words gives sets without spread", UndefinedMetricWarning, stacklevel=2)
    if not np.isfinite(effect["effect_size"]):
        warnings.warn(f"WEAT {name}: every target word has the same association score, so the effect size is "
                      "undefined (0/0)", UndefinedMetricWarning, stacklevel=2)
    p = weat_p_value(sx, sy, n_perm=n_perm, exact_limit=exact_limit, seed=seed)
    p_attributes = weat_p_value(*attribute_contrast(X, Y, A, B), n_perm=n_perm, exact_limit=exact_limit, seed=seed + 1)
    return WeatResult(**base, statistic=float(sx.sum() - sy.sum()), mean_x=float(sx.mean()), mean_y=float(sy.mean()),
                      effect=effect, cis=cis, p=p, p_attributes=p_attributes, scores_x=sx, scores_y=sy)


def weat_test_record(r: WeatResult) -> HypothesisTest:
    """The :class:`~embeval_report.stats.HypothesisTest` of a WEAT result."""
    x, y, a, b = r.set_names
    how = (f"exact over all {r.p['n_partitions']:,} partitions" if r.p.get("method") == "exact"
           else f"{r.p.get('n_used', 0):,} random partitions of {r.p.get('n_partitions', 0):,}")
    return HypothesisTest(name=f"WEAT: {r.name}", test=f"WEAT permutation test, one-sided ({how})",
                          p_value=r.p_value, statistic=r.statistic, n=" + ".join(str(s) for s in r.sizes) + " words",
                          null=f"{x} and {y} are equally associated with {a} relative to {b}",
                          family="fairness: WEAT association tests")


def weat_attribute_record(r: WeatResult) -> HypothesisTest:
    """The attribute-side test of a WEAT result: the attribute words re-partitioned, the targets held fixed."""
    x, y, a, b = r.set_names
    q = r.p_attributes
    how = (f"exact over all {q['n_partitions']:,} partitions" if q.get("method") == "exact"
           else f"{q.get('n_used', 0):,} random partitions of {q.get('n_partitions', 0):,}")
    return HypothesisTest(name=f"WEAT attributes: {r.name}", test=f"WEAT attribute permutation test, one-sided ({how})",
                          p_value=float(q.get("p_value", float("nan"))), statistic=r.statistic,
                          n=" + ".join(str(s) for s in r.sizes) + " words",
                          null=f"{a} and {b} are exchangeable samples of one attribute population (for {x} vs {y})",
                          family="fairness: WEAT association tests")


def run_association_tests(X, ids, tests, *, n_perm: int = N_PERM, exact_limit: int = EXACT_LIMIT,
                          level: float = DEFAULT_LEVEL, seed: int = 0) -> list[WeatResult]:
    """Every test of an ``association_tests`` file over the vectors ``X`` with ids ``ids``."""
    from ..io.association_tests import vocabulary_rows

    X = as_numpy(X)
    out = []
    for t in tests:
        found = vocabulary_rows(t, ids)
        mats = [np.asarray(X[r], np.float64) for r, _ in found]
        out.append(weat(*mats, name=t.name, set_names=tuple(s.name for s in t.sets), oov=[o for _, o in found],
                        n_perm=n_perm, exact_limit=exact_limit, level=level, seed=seed))
    return out


# ---------------------------------------------------------------------------------------------
# The chapter's evaluation
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FairnessResult:
    """Everything the fairness chapter shows: per attribute (and intersection) its group comparison,
    the WEAT results, the recorded metrics and hypothesis tests."""

    comparisons: dict          # attribute (or "a × b") -> GroupComparison
    weat: list                 # WeatResult per association test
    metrics: dict              # name -> Metric
    tests: list                # HypothesisTest
    probe: object | None       # the probe's ProbePlan: its sample and folds (None without labels)
    info: dict


def evaluate_fairness(X, metadata: pd.DataFrame | None, attributes=(), *, ids=None, label_column: str = "label",
                      association_tests=(), k: int = 10, min_group_size: int = MIN_GROUP_SIZE, n_boot: int = N_BOOT,
                      n_perm: int = N_PERM, exact_limit: int = EXACT_LIMIT, level: float = DEFAULT_LEVEL,
                      seed: int = 0, device="auto", max_probe_entities: int | None = None,
                      plan=None, measures: dict | None = None) -> FairnessResult:
    """Compare the groups of every attribute and of every pair of the first three attributes, and run the
    association tests. Raises :class:`~embeval_report.errors.InputError` when an attribute column is missing.

    ``plan``, ``measures``: the scorer's plan (:func:`~.fairness_units.fairness_plan`; made from the arguments
    when ``None``) and the per-row measures of its units (:func:`~.fairness_units.row_measures`; computed when
    ``None``)."""
    X = as_numpy(X)
    n = len(X)
    dev = resolve_device(device)
    info: dict = dict(k=k, min_group_size=min_group_size, level=level, label_column=label_column, notes=[])
    rows: dict[str, np.ndarray] = {}
    probe = None
    if attributes:
        inputs = fu.entity_inputs(metadata, attributes, ids=ids, label_column=label_column, device=dev)
        if plan is None:
            plan = fu.fairness_plan(inputs, min_group_size=min_group_size, k=k,
                                    max_probe_entities=max_probe_entities, seed=seed)
        rows = fu.entity_measures(X, inputs, plan) if measures is None else measures
        probe = plan.probe
        if inputs.problem is not None:
            info["notes"].append(f"probe accuracy and label agreement are not computed: {inputs.problem}")
        if plan.k >= 1:
            info["k"] = plan.k
    comparisons = {}
    groupings = list(plan.groups) if attributes else []
    firsts = list(attributes)[:3]
    groupings += [intersect(metadata[a], metadata[b], a, b, min_group_size)
                  for i, a in enumerate(firsts) for b in firsts[i + 1:]]
    for gr in groupings:
        comparisons[gr.attribute] = compare_groups(X, gr, rows, n_boot=n_boot, level=level, seed=seed)
    weat_results = (run_association_tests(X, ids if ids is not None else np.arange(n).astype(str), association_tests,
                                          n_perm=n_perm, exact_limit=exact_limit, level=level, seed=seed)
                    if association_tests else [])
    metrics = _metrics(comparisons, attributes, weat_results, level)
    tests = [c.test for c in comparisons.values() if c.test is not None]
    tests += [t for r in weat_results if not r.reason for t in (weat_test_record(r), weat_attribute_record(r))]
    info.update(device=str(dev), n_boot=max((c.n_boot for c in comparisons.values()), default=0), n_perm=n_perm,
                exact_limit=exact_limit)
    return FairnessResult(comparisons, weat_results, metrics, tests, probe, info)


def _metrics(comparisons: dict, attributes, weat_results, level: float) -> dict:
    method = f"{level:.0%} percentile bootstrap over the compared entities (probe predictions and k-NN graph fixed)"
    metrics = {}
    for attr, c in comparisons.items():
        for key, v in c.values.items():
            spec = SPECS[key]
            metrics[f"{key}__{slug(attr)}"] = spec.record(v, c.cis.get(key), ci_method=method, name=f"{key}__{slug(attr)}",
                                                          label=f"{spec.label} [{attr}]",
                                                          bias_corrected=c.bias_corrected.get(key))
    for key in [s.name for s in SPECS.values() if not s.name.startswith("weat")]:  # worst single attribute
        cands = [(comparisons[a].values[key], a) for a in attributes if key in comparisons[a].values
                 and np.isfinite(comparisons[a].values[key])]
        if cands:
            v, a = (max if SPECS[key].direction == "lower" else min)(cands)
            metrics[key] = SPECS[key].record(v, comparisons[a].cis.get(key), ci_method=method,
                                             label=f"{SPECS[key].label} (worst attribute: {a})",
                                             bias_corrected=comparisons[a].bias_corrected.get(key))
    for r in weat_results:
        if r.reason:
            continue
        for key, spec_name in (("effect_size", "weat_effect_size"), ("effect_size_pooled", "weat_effect_size_pooled")):
            spec = SPECS[spec_name]
            metrics[f"{spec_name}__{slug(r.name)}"] = spec.record(
                r.effect[key], r.cis.get(key), name=f"{spec_name}__{slug(r.name)}", label=f"{spec.label} [{r.name}]",
                ci_method=f"{level:.0%} BCa bootstrap over the target words of each set")
    return metrics
