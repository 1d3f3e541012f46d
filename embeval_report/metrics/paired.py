r"""Paired comparison of two models on the same units (queries, test edges, entities, users).

For per-unit values :math:`a_i, b_i` of one metric and their differences :math:`d_i = b_i - a_i`
(i = 1..n units both models were evaluated on):

* the mean difference :math:`\bar d` with a marginal paired bootstrap interval (units resampled, BCa up to
  :data:`embeval_report.stats.BCA_MAX` units, the normal interval beyond; :func:`embeval_report.stats.mean_ci`);
* the paired t-test (:func:`scipy.stats.ttest_1samp` on :math:`d`), the Wilcoxon signed-rank test
  (:func:`scipy.stats.wilcoxon`, zero differences dropped, Wilcoxon 1945) and the paired randomisation
  test (:func:`scipy.stats.permutation_test` flipping the sign of each difference; Fisher 1935,
  recommended for IR evaluation by Smucker, Allan & Carterette 2007), all two-sided;
* the effect size :math:`d_z = \bar d / s_d` (Cohen 1988; Lakens 2013), wins / ties / losses over units
  (a win: B better on that unit, in the metric's direction).

:func:`compare_table` then treats every row of a comparison as one family of :math:`m` tests:

* the randomisation p-values are adjusted together (Holm 1979 by default; ``--correction bh|none``);
* the **simultaneous interval** of each mean difference is the paired t interval at level
  :math:`1 - \alpha/m` (Bonferroni; Dunn 1961), :math:`\bar d \pm t_{1-\alpha/(2m),\,n-1}\, s_d/\sqrt n`
  (statsmodels ``DescrStatsW.tconfint_mean``); with ``--correction none`` it is the marginal
  :math:`1-\alpha` t interval;
* **equivalence** within the effect that matters :math:`E` (:mod:`.effects`, ``--mde``) is shown when that
  interval lies inside :math:`(-E, E)`: the two one-sided tests (TOST; Schuirmann 1987, Westlake 1976;
  statsmodels ``DescrStatsW.ttost_mean``) reject at :math:`\alpha/(2m)` each. Claiming "no difference larger
  than E" when the true difference is at least E then happens with probability at most :math:`\alpha/(2m)`
  per metric (at most :math:`\alpha/2` over the family), conservative against TOST at :math:`\alpha/m`;
* the **minimum detectable effect** at the same per-test level, :math:`\mathrm{MDE} = d_{\alpha/m,\,0.8}(n)\,s_d`
  (:func:`embeval_report.stats.minimum_detectable_effect`: a two-sided paired t-test at :math:`\alpha/m` with
  power 0.8).

The verdict, in order: "B better" / "A better" when the adjusted randomisation test rejects at α (the sign and
the metric's direction say which); otherwise "no difference larger than E" when the simultaneous interval lies
inside ±E; otherwise "underpowered" when the MDE exceeds E (not significant after correction, and these units
could not detect E); otherwise "inconclusive" (powered for E, yet the interval still reaches past ±E).
Holm can reject where the Bonferroni interval just touches zero: the verdict follows the test.

With more than two models, :func:`rank_intervals` bootstraps the units jointly and reports each model's
rank interval (as in the MTEB leaderboard-stability analysis: most adjacent pairs are not separable).
"""
from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import UndefinedMetricWarning
from ..stats import DEFAULT_LEVEL, adjust_pvalues, mean_ci, minimum_detectable_effect

#: sign flips of the paired randomisation test
RANDOMISATION_RESAMPLES = 4999
#: values per batch of sign flips (bounds the memory of the randomisation test on many units)
BATCH_VALUES = 500_000
#: unit counts per call of an exact ``boot`` (:func:`resampled_values`, ``boot_exact``): 16 MiB of float64, 200
#: draws of 10,000 units; the draws do not depend on it, and an exact boot's values do not either
BOOT_BATCH_VALUES = 2_000_000
#: fewest units for which a sampled p-value at its floor is replaced by the sign-flip null's normal limit
ASYMPTOTIC_UNITS = 30
#: bootstrap resamples of the rank intervals
RANK_RESAMPLES = 1000
#: bootstrap resamples of a paired comparison of a whole-table metric (:func:`paired_aggregate`)
AGGREGATE_RESAMPLES = 1000
VERDICTS = ("B better", "A better", "no difference larger than E", "underpowered", "inconclusive")
#: what each verdict means, in words (tables, narrative, docs)
VERDICT_MEANING = {
    "B better": "the adjusted test rejects and B is better in the metric's direction",
    "A better": "the adjusted test rejects and A is better in the metric's direction",
    "no difference larger than E": "the simultaneous interval lies inside ±E (equivalence shown, TOST)",
    "underpowered": "not significant after correction, and these units could not detect E (MDE > E)",
    "inconclusive": "not significant after correction and powered for E, but the interval reaches past ±E",
}
CORRECTIONS = ("holm", "bh", "none")
#: |difference| below this counts as a tie on a unit
TIE = 1e-12


@dataclass(frozen=True)
class PairedComparison:
    """One metric compared on ``n`` shared units; ``diff`` = mean of B − A."""

    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    ci_method: str
    sd_diff: float
    d_z: float
    wins: int
    ties: int
    losses: int
    p_t: float
    p_wilcoxon: float
    p_randomisation: float
    mde: float


def paired_differences(a, b) -> np.ndarray:
    """``b - a`` over the units where both values are finite (the differences every statistic here uses)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same units: {a.shape} vs {b.shape}")
    ok = np.isfinite(a) & np.isfinite(b)
    return b[ok] - a[ok]


def paired_comparison(a, b, *, direction: str = "higher", level: float = DEFAULT_LEVEL, seed: int = 0,
                      n_resamples: int = RANDOMISATION_RESAMPLES, units: str = "units",
                      unit_tests: bool = True) -> PairedComparison:
    """Compare per-unit values ``a`` (model A) and ``b`` (model B) of the same units (see the module docstring).

    ``direction``: which way the metric is better (``"higher"``/``"lower"``), for wins and losses.
    Units where either value is missing are dropped. ``unit_tests=False``: no t-test and no Wilcoxon test (``p_t``
    and ``p_wilcoxon`` NaN; a caller that shows neither, the remedy checks), every other field the same.
    """
    if direction not in ("higher", "lower"):
        raise ValueError(f"direction must be 'higher' or 'lower', not {direction!r}")
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = paired_differences(a, b)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    n = len(d)
    sign = 1.0 if direction == "higher" else -1.0
    wins, losses = int((sign * d > TIE).sum()), int((sign * d < -TIE).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        lo, hi, how = mean_ci(d, level, seed=seed, units=f"{units} (paired)") if n >= 2 else (math.nan, math.nan, "")
    sd = float(d.std(ddof=1)) if n >= 2 else math.nan
    if n < 2 or not np.isfinite(sd):
        p_t = p_w = p_r = math.nan
    elif sd == 0:  # every unit moved by the same amount (or none did): no spread to test against
        p_t = p_w = p_r = 1.0 if abs(d[0]) <= TIE else 0.0
    else:
        p_t = p_w = math.nan
        if unit_tests:
            p_t = float(sps.ttest_1samp(d, 0.0).pvalue)
            nonzero = d[np.abs(d) > TIE]
            p_w = float(sps.wilcoxon(nonzero).pvalue) if len(nonzero) else 1.0
        p_r = randomisation_pvalue(d, n_resamples=n_resamples, seed=seed)
    mde = _mde(sd, n)
    return PairedComparison(n=n, mean_a=float(a.mean()) if n else math.nan, mean_b=float(b.mean()) if n else math.nan,
                            diff=float(d.mean()) if n else math.nan, ci_low=lo, ci_high=hi, ci_method=how, sd_diff=sd,
                            d_z=float(d.mean() / sd) if n >= 2 and sd > 0 else math.nan, wins=wins,
                            ties=n - wins - losses, losses=losses, p_t=p_t, p_wilcoxon=p_w, p_randomisation=p_r,
                            mde=mde)


def paired_aggregate(fn, a: pd.DataFrame, b: pd.DataFrame, *, direction: str = "higher",
                     level: float = DEFAULT_LEVEL, seed: int = 0, n_resamples: int = AGGREGATE_RESAMPLES,
                     units: str = "units", unit_column: str | None = None,
                     boot=None, boot_exact: bool = False) -> tuple[PairedComparison, np.ndarray]:
    r"""Compare a whole-table metric ``fn`` (macro-F1, ARI, Spearman's ρ, ROC-AUC: not a mean over units) of
    model A's and model B's unit tables ``a`` and ``b`` (the same units, row for row) by the paired bootstrap:
    the units are resampled with replacement, the same draw for both models, and
    :math:`\delta^* = \mathrm{fn}(b^*) - \mathrm{fn}(a^*)` recomputed (Efron & Tibshirani 1993, ch. 16).

    Returns the comparison and the replicates :math:`\delta^*` (finite ones). The interval is the percentile
    interval of :math:`\delta^*`; the p-value tests :math:`\delta = 0` with the centred replicates,
    :math:`p = (1 + \#\{|\delta^* - \hat\delta| \ge |\hat\delta|\}) / (R + 1)`, and where that is within
    twice its floor, the normal (Wald) form :math:`2\bar\Phi(|\hat\delta| / \mathrm{se}^*)`.
    ``sd_diff`` is :math:`\mathrm{se}^*\sqrt n`, the per-unit spread a paired mean over ``n`` units would need for
    that standard error, so the minimum detectable effect reads the same for both kinds of rows.
    ``unit_column``: a per-unit column whose paired differences give the wins, ties and losses. ``boot(table,
    W)``: ``fn`` of ``table`` under the unit weights of each row of ``W`` (the counts of each draw), for many
    draws at once (:class:`~embeval_report.metrics.scoring.Aggregate`); the same draws as without it.
    ``boot_exact``: ``boot``'s value for a draw is the same whichever draws share its call (see
    :func:`resampled_values`).
    """
    if direction not in ("higher", "lower"):
        raise ValueError(f"direction must be 'higher' or 'lower', not {direction!r}")
    if len(a) != len(b):
        raise ValueError(f"paired tables need the same units: {len(a)} vs {len(b)} rows")
    n = len(a)
    va, vb = float(fn(a)), float(fn(b))
    diff = vb - va
    if n >= 2:
        def replicates(t):
            return resampled_values([t], fn, boot=boot, boot_exact=boot_exact, n_resamples=n_resamples,
                                    rng=np.random.default_rng([seed, 41]))[:, 0]

        key = ("paired_aggregate", fn, boot, boot_exact, n_resamples, seed)
        reps = _held(key, b, replicates) - _held(key, a, replicates)
    else:
        reps = np.full(n_resamples, math.nan)
    reps = reps[np.isfinite(reps)]
    if len(reps) >= 2 and np.isfinite(diff):
        q = (1 - level) / 2
        lo, hi = (float(x) for x in np.quantile(reps, [q, 1 - q]))
        se = float(reps.std(ddof=1))
        p = (1 + int(np.sum(np.abs(reps - diff) >= abs(diff) - TIE))) / (len(reps) + 1)
        if p <= 4.0 / (len(reps) + 1):
            p = float(2.0 * sps.norm.sf(abs(diff) / se)) if se > 0 else (0.0 if abs(diff) > TIE else 1.0)
    else:
        lo = hi = se = p = math.nan
    wins = ties = losses = 0
    if unit_column is not None:
        d = paired_differences(a[unit_column], b[unit_column])
        sign = 1.0 if direction == "higher" else -1.0
        wins, losses = int((sign * d > TIE).sum()), int((sign * d < -TIE).sum())
        ties = len(d) - wins - losses
    sd = se * math.sqrt(n) if np.isfinite(se) else math.nan
    mde = _mde(sd, n) if n >= 2 else math.nan
    how = (f"{level:.0%} paired percentile bootstrap over the {n:,} shared {units} ({len(reps)} resamples)"
           if np.isfinite(lo) else "")
    return PairedComparison(n=n, mean_a=va, mean_b=vb, diff=diff, ci_low=lo, ci_high=hi, ci_method=how, sd_diff=sd,
                            d_z=diff / sd if np.isfinite(sd) and sd > 0 else math.nan, wins=wins, ties=ties,
                            losses=losses, p_t=math.nan, p_wilcoxon=math.nan, p_randomisation=p, mde=mde), reps


def resampled_values(tables: list[pd.DataFrame], fn, *, boot=None, boot_exact: bool = False, n_resamples: int,
                     rng) -> np.ndarray:
    """``fn`` of each table (the same units, row for row) on ``n_resamples`` bootstrap draws of the units, the same
    draw for every table: an array (resamples × tables). ``boot(table, W)`` computes ``fn`` for many draws at once
    from their unit counts ``W``; the draws are the same with it or without. ``boot_exact``: ``boot``'s value for a
    draw does not depend on which draws share its call (integer counts, row-wise arithmetic), so it is called on
    :data:`BOOT_BATCH_VALUES` unit counts at a time rather than a few draws (a product ``W @ x`` of floats rounds
    by the shape of ``W``: such a boot keeps the few draws its values were first computed with).

    The draws of a batch come from one ``rng.integers`` call (the same values as one call per draw) and their counts
    from one ``bincount``; ``boot`` is bound to each table once (:func:`bound_boot`: its table read once); the
    counts of every draw are kept for the next call from the same generator state with the same units and resamples
    (:func:`_draw_counts`), and ``rng`` is left where drawing them would leave it."""
    n = len(tables[0])
    out = np.full((n_resamples, len(tables)), math.nan)
    step = max(1, min(n_resamples, BOOT_BATCH_VALUES // n if boot is not None and boot_exact else
                      BATCH_VALUES // (8 * n)))
    counts = _draw_counts(rng, n, n_resamples) if boot is not None and n else None
    boots = [bound_boot(boot, t) for t in tables] if boot is not None else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in range(0, n_resamples, step):
            k = min(step, n_resamples - s)
            if counts is not None:
                W = counts[s:s + k].astype(float)
            elif boot is not None:
                W = _counts(rng.integers(0, n, (k, n)), n).astype(float)
            else:
                draws = rng.integers(0, n, (k, n))
                out[s:s + k] = [[float(fn(t.iloc[idx])) for t in tables] for idx in draws]
                continue
            out[s:s + k] = np.column_stack([np.asarray(b(W), float) for b in boots])
    return out


def bound_boot(boot, table: pd.DataFrame):
    """``W -> boot(table, W)``: a boot with a ``bind`` (:class:`~embeval_report.metrics.scoring.PreparedBoot`, or a
    ``functools.partial`` of one with keywords only) bound to ``table`` once, its table read once for every batch of
    draws; any other ``boot`` called as it is."""
    if isinstance(boot, partial) and hasattr(boot.func, "bind") and not boot.args:
        return boot.func.bind(table, **boot.keywords)
    if hasattr(boot, "bind"):
        return boot.bind(table)
    return lambda W: boot(table, W)


def _counts(draws: np.ndarray, n: int) -> np.ndarray:
    """Each row's unit counts (rows × ``n``) of drawn unit indices (rows × draws), by one ``bincount``."""
    rows = len(draws)
    flat = (np.arange(rows, dtype=np.int64)[:, None] * n + draws).ravel()
    return np.bincount(flat, minlength=rows * n).reshape(rows, n)


#: the unit counts of bootstrap draws kept for the next :func:`resampled_values` call from the same generator state
#: with the same units and resamples, as small integers, up to this many bytes in all (every whole-table metric of a
#: task, and every remedy re-scoring it, resample its units with the same seed: 1,000 draws of 10,000 units 10 MB)
DRAW_CACHE_BYTES = 48 * 2**20
_DRAWS: dict = {}


def _draw_counts(rng, n: int, n_resamples: int) -> np.ndarray | None:
    """The unit counts (resamples × ``n``) of ``n_resamples`` draws of ``n`` units from ``rng``, kept (see
    :data:`DRAW_CACHE_BYTES`) and read again by the next call from the same generator state; ``rng`` is left where
    drawing them leaves it. None (nothing drawn) when they would take more than the budget."""
    if n_resamples * n > DRAW_CACHE_BYTES:
        return None
    bits = rng.bit_generator
    key = (type(bits).__name__, repr(bits.state), n, n_resamples)
    if key in _DRAWS:
        counts, end = _DRAWS.pop(key)
        _DRAWS[key] = counts, end  # the latest used last
        bits.state = end
        return counts
    step = max(1, BOOT_BATCH_VALUES // n)
    counts = np.empty((n_resamples, n), np.uint8)
    for s in range(0, n_resamples, step):
        c = _counts(rng.integers(0, n, (min(step, n_resamples - s), n)), n)
        if c.max(initial=0) > 255:  # a unit drawn 256 times: too many to keep as bytes
            counts = counts.astype(np.int64)
        counts[s:s + len(c)] = c
    if counts.nbytes <= DRAW_CACHE_BYTES:
        _keep_within(_DRAWS, key, (counts, bits.state), lambda kept: kept[0].nbytes, DRAW_CACHE_BYTES)
    return counts


def _keep_within(cache: dict, key, value, size, budget: int) -> None:
    """``cache[key] = value``, the entries kept longest dropped first so that the ``size`` of all stays within
    ``budget`` (a cache that moves an entry it reads to the end drops the least recently used)."""
    while cache and sum(map(size, cache.values())) + size(value) > budget:
        cache.pop(next(iter(cache)))
    cache[key] = value


#: tables' replicates kept for the next comparison with the same table (the remedy checks compare one task's
#: recorded units with each remedy's: their draws are the same, so the recorded table's replicates are too; a
#: remedy the task's protocol undoes leaves its table as recorded). A table's replicates take 8 kB (1,000
#: resamples): every whole-table metric of every task of a report is kept
_HELD: dict = {}
HELD_TABLES = 256


def _held(key: tuple, table: pd.DataFrame, compute):
    """``compute(table)``, kept under ``key`` and the table's contents for the next call with both (the latest
    :data:`HELD_TABLES` kept). ``key`` holds the functions themselves, so a key's objects cannot be replaced by
    others at the same address while it is kept."""
    try:
        rows = pd.util.hash_pandas_object(table, index=False).to_numpy()
    except TypeError:  # a column of unhashable values (lists): not kept
        return compute(table)
    full = key + (tuple(map(str, table.columns)), tuple(map(str, table.dtypes)), len(table),
                  hashlib.blake2b(rows.tobytes(), digest_size=32).digest())
    if full not in _HELD:
        _keep_within(_HELD, full, compute(table), lambda _: 1, HELD_TABLES)
    return _HELD[full]


def randomisation_pvalue(d, *, n_resamples: int = RANDOMISATION_RESAMPLES, seed: int = 0) -> float:
    r"""Two-sided paired randomisation test of mean(d) = 0: each difference's sign flipped at random
    (:func:`scipy.stats.permutation_test`, ``permutation_type="samples"``; exact when 2^n ≤ ``n_resamples``).

    A Monte-Carlo p-value cannot fall below 2/(R + 1), which after a correction over many metrics would make
    every difference "not significant". When the sampled p-value is within twice that floor (and there are at
    least :data:`ASYMPTOTIC_UNITS` units), the sign-flip null's normal limit is used instead:
    :math:`p = 2\,\bar\Phi\left(|\sum_i d_i| / \sqrt{\sum_i d_i^2}\right)` (the exact variance of
    :math:`\sum_i \pm d_i`; Fisher 1935, Pitman 1937).
    """
    d = np.asarray(d, float)
    exact = len(d) <= math.log2(n_resamples)
    p = _permutation_p(d, n_resamples, seed) if exact else _sign_flip_p(d, n_resamples, seed)
    if not exact and len(d) >= ASYMPTOTIC_UNITS and p <= 4.0 / (n_resamples + 1):
        ss = float(np.sum(d * d))
        p = float(2.0 * sps.norm.sf(abs(float(d.sum())) / np.sqrt(ss))) if ss > 0 else 1.0
    return p


def _permutation_p(d: np.ndarray, n_resamples: int, seed: int) -> float:
    """scipy's paired permutation test of mean(d) = 0 (two-sided; every sign pattern when 2^n <= n_resamples)."""
    res = sps.permutation_test((d, np.zeros_like(d)), lambda x, y, axis: np.mean(x - y, axis=axis),
                               permutation_type="samples", alternative="two-sided", n_resamples=n_resamples,
                               vectorized=True, batch=_sign_flip_batch(len(d)), random_state=np.random.default_rng(seed))
    return float(res.pvalue)


def _sign_flip_batch(n: int) -> int:
    return max(1, int(BATCH_VALUES // max(n, 1)))


def _sign_flip_p(d: np.ndarray, n_resamples: int, seed: int) -> float:
    """:func:`_permutation_p` sampled, the same p-value from the same random draws without scipy's per-unit loop:
    scipy permutes each pair (d_i, 0) by one 32-bit draw whose low bit 0 swaps it (``Generator.permuted`` of a
    (batch, n, 2) tile, a full batch drawn each time); the p-value counts the null means within scipy's relative
    tolerance of the observed one, plus one, over R + 1 (Phipson & Smyth 2010). The null means come from one
    matrix-vector product per batch, those within its rounding bound of a threshold from scipy's own sum, so each
    lands on the same side as scipy's. tests/test_paired.py checks it equals scipy's."""
    eps, n = np.finfo(float).eps, len(d)
    observed = float(np.mean(d))
    gamma = abs(eps * 100 * observed)
    # each null mean as a sum of products, Σd − 2 Σ_flipped d, whose rounding and that of the mean of the flipped values
    # are each within n·eps·Σ|d|/n: a null farther than twice that from a threshold is on the side it would be;
    # the few nearer ones (exact ties) are computed as scipy's mean of the flipped values
    total, margin = float(d.sum()), 16 * eps * (float(np.abs(d).sum()) + abs(observed))
    below = above = 0
    for flip in _sign_flips(seed, n, n_resamples):
        null = (total - 2.0 * np.einsum("ij,j->i", flip, d)) / n  # not BLAS: a threaded gemv this size spins
        near = (np.abs(null - (observed + gamma)) <= margin) | (np.abs(null - (observed - gamma)) <= margin)
        if near.any():
            null[near] = np.where(flip[near], -d, d).mean(axis=1)
        below += int(np.count_nonzero(null <= observed + gamma))
        above += int(np.count_nonzero(null >= observed - gamma))
    return float(min(1.0, 2 * min(below + 1, above + 1) / (n_resamples + 1)))


#: the sign flips of the latest (seed, units, resamples) drawn, kept packed up to this many bytes in all: the metrics
#: of one comparison share their units and seed, so their tests draw the same flips (5 link-prediction metrics over
#: 15,764 test edges: 9.9 MB, drawn once instead of five times), and the remedy checks return to each task's units
FLIP_CACHE_BYTES = 32 * 2**20
_FLIP_CACHE: dict = {}


def _sign_flips(seed: int, n: int, n_resamples: int):
    """The sign flips of :func:`_sign_flip_p`, a batch (resamples × units, True: the sign flips) at a time: the low
    bit of scipy's 32-bit draws, a full batch drawn each time; the latest sets drawn are kept (packed bits, within
    :data:`FLIP_CACHE_BYTES`) and read again by the next test with the same seed, units and resamples."""
    key = (seed, n, n_resamples)
    packed = _FLIP_CACHE.pop(key, None)
    if packed is not None:
        _FLIP_CACHE[key] = packed  # the latest used last
        for bits in packed:
            yield np.unpackbits(bits, axis=1, count=n).view(bool)
        return
    rng = np.random.default_rng(seed)
    batch = min(_sign_flip_batch(n), n_resamples)
    size = n_resamples * -(-n // 8)
    keep = [] if size <= FLIP_CACHE_BYTES else None
    for start in range(0, n_resamples, batch):
        flip = (rng.integers(0, 2 ** 32, size=(batch, n), dtype=np.uint32)[:min(batch, n_resamples - start)] & 1) == 0
        if keep is not None:
            keep.append(np.packbits(flip, axis=1))
        yield flip
    if keep is not None:
        _keep_within(_FLIP_CACHE, key, keep, lambda packed: sum(b.nbytes for b in packed), FLIP_CACHE_BYTES)


def verdict(direction: str, diff: float, p_adjusted: float, *, inside: bool, mde: float, effect: float,
            alpha: float = 0.05) -> str:
    """One of :data:`VERDICTS` (see the module docstring): ``inside`` is whether the simultaneous interval lies
    inside ±``effect``; ``mde`` is the minimum detectable effect at the per-test level of the correction."""
    if np.isfinite(p_adjusted) and p_adjusted <= alpha and diff != 0:
        better_b = diff > 0 if direction == "higher" else diff < 0
        return "B better" if better_b else "A better"
    if inside:
        return "no difference larger than E"
    if not (np.isfinite(mde) and mde <= effect):
        return "underpowered"
    return "inconclusive"


def _mde(sd: float, n: int) -> float:
    """:func:`~embeval_report.stats.minimum_detectable_effect` of ``n`` paired units with sd ``sd`` at α = 0.05
    (NaN for a sd that is not finite): its effect size solved once per ``n`` (:func:`_unit_mde`), times ``sd``."""
    if not np.isfinite(sd):
        return math.nan
    return 0.0 if sd == 0 else _unit_mde(n, 0.05) * sd


@lru_cache(maxsize=256)
def _unit_mde(n: int, alpha: float) -> float:
    """The minimum detectable effect of ``n`` paired units with sd 1 at ``alpha`` (MDE = this × sd)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return minimum_detectable_effect(1.0, n, alpha=alpha)


def per_test_alpha(correction: str, m: int, alpha: float = 0.05) -> float:
    """The level each comparison's interval, equivalence test and MDE use: α/m (Bonferroni) when the family of
    ``m`` comparisons is corrected (holm, bh), α with ``none``."""
    return alpha if correction == "none" or m <= 1 else alpha / m


def equivalence(d, effect: float, alpha: float) -> tuple[float, float, float]:
    """``(low, high, p_tost)``: the paired t interval of mean(``d``) at level 1 − ``alpha`` and the TOST p-value of
    |mean| ≥ ``effect`` (statsmodels ``DescrStatsW.tconfint_mean`` and ``ttost_mean``); the interval lies inside
    (−effect, effect) exactly when ``p_tost`` ≤ ``alpha``/2. Constant differences: the interval is the point."""
    from statsmodels.stats.weightstats import DescrStatsW

    d = np.asarray(d, float)
    if len(d) < 2 or not np.isfinite(effect):
        return math.nan, math.nan, math.nan
    m = float(d.mean())
    if np.ptp(d) == 0:
        return m, m, 0.0 if abs(m) < effect else 1.0
    w = DescrStatsW(d)
    lo, hi = w.tconfint_mean(alpha=alpha)
    return float(lo), float(hi), float(w.ttost_mean(-effect, effect)[0])


def equivalence_normal(diff: float, se: float, effect: float, alpha: float) -> tuple[float, float, float]:
    r""":func:`equivalence` for a difference known by its estimate and bootstrap standard error ``se`` (a
    whole-table metric, :func:`paired_aggregate`): the normal interval at level 1 − ``alpha`` and the TOST p-value
    :math:`\max(\Phi((\hat\delta - E)/\mathrm{se}),\ \bar\Phi((\hat\delta + E)/\mathrm{se}))`; the interval lies
    inside (−E, E) exactly when that p-value is at most ``alpha``/2."""
    if not (np.isfinite(diff) and np.isfinite(se) and np.isfinite(effect)):
        return math.nan, math.nan, math.nan
    if se == 0:
        return diff, diff, 0.0 if abs(diff) < effect else 1.0
    z = float(sps.norm.ppf(1 - alpha / 2))
    p = max(float(sps.norm.cdf((diff - effect) / se)), float(sps.norm.sf((diff + effect) / se)))
    return diff - z * se, diff + z * se, p


def compare_table(rows: list[dict], *, correction: str = "holm", effects=None, alpha: float = 0.05
                  ) -> pd.DataFrame:
    """The comparison table: ``rows`` (one per model pair × metric: ``a``, ``b``, ``chapter``, ``metric``,
    ``label``, ``direction``, a :class:`PairedComparison` under ``"result"`` and its per-unit differences under
    ``"differences"``, or ``None`` there for a whole-table metric compared by :func:`paired_aggregate`, whose
    equivalence interval is then the normal one of its bootstrap standard error, :func:`equivalence_normal`) with every field, and per row: ``p_adjusted`` (the randomisation p adjusted over all rows;
    ``correction``: holm, bh or none), ``effect`` and ``effect_rule`` (``effects``: an
    :class:`~.effects.Effects`, its text, or one absolute number; the base of a relative effect is A's mean),
    ``alpha_test``, ``sim_level``, ``sim_low``/``sim_high`` (the simultaneous interval), ``interval``
    ("simultaneous" or "marginal"), ``p_equivalence`` (TOST), ``inside`` (interval inside ±E), ``mde`` (at
    ``alpha_test``) and the ``verdict`` (see the module docstring)."""
    from .effects import Effects

    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, not {correction!r}")
    effects = effects if isinstance(effects, Effects) else Effects.parse(effects)
    table = pd.DataFrame([{k: v for k, v in r.items() if k not in ("result", "differences")} | r["result"].__dict__
                          for r in rows])
    if not len(table):
        return table
    p = table["p_randomisation"].to_numpy(float)
    p_adjusted = p if correction == "none" else adjust_pvalues(p, correction, alpha)[1]
    m = int(np.isfinite(p).sum())
    a_test = per_test_alpha(correction, m, alpha)
    eff = [effects.for_metric(r["chapter"], r["metric"], r["result"].mean_a) for r in rows]
    eq = [equivalence(r["differences"], e, a_test) if r.get("differences") is not None else
          equivalence_normal(r["result"].diff, r["result"].sd_diff / math.sqrt(max(r["result"].n, 1)), e, a_test)
          for r, (e, _) in zip(rows, eff)]
    mde = [_unit_mde(int(n), a_test) * sd if np.isfinite(sd) else math.nan
           for sd, n in zip(table["sd_diff"], table["n"])]
    cols = dict(p_adjusted=p_adjusted, effect=[e for e, _ in eff], effect_rule=[how for _, how in eff],
                alpha_test=a_test, sim_level=1 - a_test, interval="marginal" if a_test == alpha else "simultaneous",
                sim_low=[x[0] for x in eq], sim_high=[x[1] for x in eq], p_equivalence=[x[2] for x in eq],
                inside=[bool(np.isfinite(x[2]) and x[2] <= a_test / 2) for x in eq], mde=mde)
    table = pd.concat([table.drop(columns="mde"), pd.DataFrame(cols, index=table.index)], axis=1)
    table["verdict"] = [verdict(r.direction, r.diff, r.p_adjusted, inside=r.inside, mde=r.mde, effect=r.effect,
                                alpha=alpha) for r in table.itertuples()]
    return table


def rank_intervals_of(tables: dict[str, pd.DataFrame], fn, *, boot=None, direction: str = "higher",
                      level: float = DEFAULT_LEVEL, n_boot: int = RANK_RESAMPLES, seed: int = 0) -> pd.DataFrame:
    """:func:`rank_intervals` for a whole-table metric ``fn`` (macro-F1, ARI, ...) of each model's unit table
    (``tables[model]``, the same units row for row): the units resampled jointly, ``fn`` of every model on each
    draw (:func:`resampled_values`), each model's rank per draw."""
    names = list(tables)
    frames = [tables[m] for m in names]
    sign = -1.0 if direction == "higher" else 1.0
    point = np.array([float(fn(t)) for t in frames])
    reps = resampled_values(frames, fn, boot=boot, n_resamples=n_boot, rng=np.random.default_rng(seed))
    reps = reps[np.isfinite(reps).all(1)]
    return _rank_table(names, point, sps.rankdata(sign * reps, method="min", axis=-1), len(frames[0]), level,
                       sign)


def _rank_table(names, point, rank_reps, units: int, level: float, sign: float) -> pd.DataFrame:
    q = (1 - level) / 2
    return pd.DataFrame({"model": names, "mean": point,
                         "rank": sps.rankdata(sign * point, method="min").astype(int),
                         "rank_low": np.quantile(rank_reps, q, axis=0, method="lower").astype(int),
                         "rank_high": np.quantile(rank_reps, 1 - q, axis=0, method="higher").astype(int),
                         "units": units}).sort_values("rank", kind="stable").reset_index(drop=True)


def rank_intervals(values: dict[str, np.ndarray], *, direction: str = "higher", level: float = DEFAULT_LEVEL,
                   n_boot: int = RANK_RESAMPLES, seed: int = 0) -> pd.DataFrame:
    """Each model's rank (1 = best) by the mean over units, and its bootstrap interval: units resampled
    jointly for every model (``values[model]`` per-unit values over the same units, aligned)."""
    names = list(values)
    M = np.column_stack([np.asarray(values[m], float) for m in names])
    M = M[np.isfinite(M).all(1)]
    sign = -1.0 if direction == "higher" else 1.0
    rng = np.random.default_rng(seed)
    n = len(M)

    def ranks(means):
        return sps.rankdata(sign * means, method="min", axis=-1)

    reps = np.empty((n_boot, len(names)))
    for i in range(n_boot):
        reps[i] = ranks(M[rng.integers(0, n, n)].mean(0))
    return _rank_table(names, M.mean(0), reps, n, level, sign)


def rollup(table: pd.DataFrame) -> pd.DataFrame:
    """Per model pair × chapter: how many metrics each verdict has (columns :data:`VERDICTS`, in that order)."""
    if not len(table):
        return pd.DataFrame(columns=["a", "b", "chapter", *VERDICTS])
    counts = (table.groupby(["a", "b", "chapter"], sort=False)["verdict"].value_counts().unstack(fill_value=0)
              .reindex(columns=list(VERDICTS), fill_value=0))
    return counts.reset_index()
