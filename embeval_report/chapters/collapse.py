"""The Dimension collapse and intrinsic dimension chapter: seed 001's collapse rule, what the ranks and
the intrinsic dimension mean, the metric table, the variance and singular-value spectra, every
dimension estimate side by side, and the estimators' diagnostics (computed in
:mod:`embeval_report.metrics.collapse`)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..metrics import collapse as col
from ..metrics.collapse import DEAD_RULE, RANK_RULE, SEED_ABSOLUTE_THRESHOLD, CollapseResult
from ..metrics.spec import json_number
from ..present.display import callout, show_figure, show_markdown, show_table, with_mark_note
from ..present.display import show_metrics as show_metric_table
from ..present.format import interval, marked_value, metric_text, outside, percent
from ..present.plotting import PALETTE, WIDTH
from .declaration import INF, ChapterSpec, Option
from .findings import Effect

if TYPE_CHECKING:
    from .setup import ChapterContext

#: the spectral estimates of the dimension table, with what each counts
LINEAR = (("effective_rank", "linear: entropy of centred singular values"),
          ("rankme", "linear: entropy of raw singular values (mean included)"),
          ("stable_rank", "linear: total variance / top direction's variance"))


def precheck(es, side, settings) -> str | None:
    """Why the chapter cannot run on this valid input (fewer than two vectors), or ``None``."""
    if es.n < 2:
        return f"a spectrum needs at least 2 vectors; the set has {es.n}"
    return None


def compute(ctx: ChapterContext) -> CollapseResult:
    """Measure the spectra and the intrinsic dimension (on at most ``id_rows`` rows, fewer under a smaller
    ``--sample-size``) and record every number."""
    r = col.measure_collapse(ctx.es.vectors, sample_size=ctx.sample_size, id_rows=ctx.option("id_rows"),
                             level=ctx.level, seed=ctx.seed, device=ctx.device)
    ident = r.intrinsic
    ctx.rec.add(*r.metrics.values())
    ctx.rec.note(bootstrap_blocks=r.n_blocks, bootstrap_resamples=r.n_boot, resampling=r.plan.method,
                 collapse_detected=r.collapse_detected, rank=r.info["rank"],
                 dead_threshold=r.dead_threshold, dead_reference=r.dead_reference,
                 dead_variance_cut=r.dead_cut, dead_seed_absolute=r.info["dead_seed_absolute"],
                 dead_by_reference=r.info["dead_by_reference"],
                 stable_rank_seed001=r.info["stable_rank_seed001"],
                 participation_ratio=[json_number(x) for x in r.participation_ratio],
                 intrinsic_dimension=None if ident is None else dict(
                     k=ident.k, rows=ident.n_rows, sampled=ident.n_sampled, duplicates=ident.n_duplicates,
                     discard_fraction=ident.discard_fraction,
                     mle_by_k={k: json_number(v) for k, v in ident.mle_by_k.items()}),
                 **({"intrinsic_dimension_skipped": r.info["intrinsic_dimension_skipped"]} if ident is None else {}))
    return r


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def _estimates(r: CollapseResult) -> list[tuple]:
    """``(estimate, what it counts, value, ci_low, ci_high, reference)`` for every dimension estimate."""
    m = r.metrics
    rows = [("Nominal dimension d", "coordinates stored", float(r.d), None, None, ""),
            ("Participation ratio", "linear: equal-variance directions (centred)", *r.participation_ratio,
             "seed 000 §217.0.5.2.2")]
    k = r.intrinsic.k if r.intrinsic else "–"
    for name, what in (*LINEAR, ("intrinsic_dim_twonn", "nonlinear: local, from 2 nearest neighbours"),
                       ("intrinsic_dim_mle", f"nonlinear: local, from {k} nearest neighbours")):
        if name in m:
            rows.append((m[name].label, what, m[name].value, m[name].ci_low, m[name].ci_high, m[name].reference))
    return rows


def dimension_table(r: CollapseResult) -> pd.DataFrame:
    """Every dimension estimate side by side: value, CI, share of d, what it measures."""
    return pd.DataFrame([{"estimate": name, "value": marked_value(v, lo, hi, text=f"{v:.4g}") if outside(v, lo, hi)
                          else v, "95 % CI": interval(lo, hi, ".1f", sep=" – "),
                          "% of d": v / r.d * 100, "what it counts": what, "reference": ref}
                         for name, what, v, lo, hi, ref in _estimates(r)])


def dead_dimension_table(r: CollapseResult) -> pd.DataFrame:
    """Dead-coordinate counts under the three cuts (the chapter's, the median-relative, the seed's absolute)."""
    var_unbiased = r.variances * r.n / max(r.n - 1, 1)
    rows = []
    for label, ref, thr, v in ((f"< {r.dead_threshold:g} × mean variance (this chapter)", "mean", r.dead_threshold,
                                r.variances),
                               (f"< {r.dead_threshold:g} × median variance", "median", r.dead_threshold, r.variances),
                               (f"< {SEED_ABSOLUTE_THRESHOLD:g} absolute, unbiased variance (seed 001 code)",
                                "absolute", SEED_ABSOLUTE_THRESHOLD, var_unbiased)):
        count, cut = col.dead_dimensions(v, thr, ref)
        rows.append({"rule": label, "variance cut": cut, "dead dimensions": count, "% of d": count / r.d * 100})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def collapse_callout(r: CollapseResult) -> dict:
    """Arguments ``kind``, ``text``, ``title`` of :func:`embeval_report.present.display.callout` for the box
    that states seed 001's collapse rule for this set."""
    if r.no_variance:
        return dict(kind="danger", title="Complete collapse: every vector is the same",
                    text="The centred spectrum is zero, so the effective rank and the dead-dimension count are "
                         "undefined and seed 001's rule cannot be applied; the set cannot tell its items apart.")
    er, dead, d = r.values["effective_rank"], r.values["dead_dimensions"], r.d
    dead_cut, rank_cut = DEAD_RULE.healthy, RANK_RULE.healthy
    rule = (f"Seed 001's rule: collapse when more than {percent(dead_cut, 0)} of the dimensions are dead or the "
            f"effective rank is below {percent(rank_cut, 0)} of d ({rank_cut * d:.1f}); the paragraphs below give "
            "this set's numbers.")
    few = r.n <= d  # the effective-rank part assumes n > d
    if few:
        rule += (f" With n = {r.n:,} ≤ d = {d} vectors the centred spectrum has at most n − 1 = {r.n - 1:,} nonzero "
                 "singular values, so the effective-rank part is not estimable (it would reflect the sample size, "
                 "not the embedding): only the dead-dimension part is applied.")
    reasons = [dead / d > dead_cut, not few and er < rank_cut * d]
    if any(reasons):
        which = " and ".join(w for w, hit in zip(("dead dimensions", "effective rank"), reasons) if hit)
        return dict(kind="danger", title="Collapse detected (seed 001 §21.1.3 rule)", text=f"{rule} Here: {which}.")
    return dict(kind="success", title="No collapse by seed 001 §21.1.3's rule",
                text=f"{rule} The rule is coarse: read the spectrum and the intrinsic dimension below.")


def _spread_paragraph(r: CollapseResult) -> str:
    v, m, d = r.values, r.metrics, r.d
    er, sr, pr = v["effective_rank"], v["stable_rank"], r.participation_ratio[0]
    rank_cut = RANK_RULE.healthy
    side = "above" if er >= rank_cut * d else "below"
    return (
        f"**How much of d is used.** Over all {r.n:,} vectors the centred spectrum has effective rank "
        f"{metric_text(m['effective_rank'], '.1f')}, {er / d:.0%} of the nominal d = {d} "
        + (f"and {side} the seed's {percent(rank_cut, 0)} collapse line." if r.n > d else
           f"(the seed's {percent(rank_cut, 0)} collapse line is not estimable: with n = {r.n:,} ≤ d vectors the "
           f"rank is at most n − 1 = {r.n - 1:,}).")
        + f" The variance itself is {'concentrated' if pr < 0.5 * d else 'spread out'}: "
        f"the participation ratio is {pr:.1f} ({pr / d:.0%} of d) and the stable rank {metric_text(m['stable_rank'], '.1f')}, "
        f"so the top direction alone carries {1 / sr:.0%} of the variance. The three count directions differently: "
        "the effective rank weights each by its singular value σ (a standard deviation), the participation ratio by "
        "σ² (a variance), the stable rank by σ²/σ₁², so on a decaying spectrum stable rank ≤ PR and the effective "
        "rank is usually the largest. "
        + ("A large effective rank with a small PR means that almost every direction carries *some* spread "
           "while a few directions carry most of the variance: anisotropy rather than a collapse to a subspace."
           if er >= rank_cut * d and pr < 0.2 * d else
           "All three agree that the set uses few of its dimensions." if er < rank_cut * d and r.n > d else "")).rstrip()


def _rankme_paragraph(r: CollapseResult) -> str:
    d, rk, er = r.d, r.values["rankme"], r.values["effective_rank"]
    gap = rk - er
    return (f"RankMe, computed on the *uncentred* vectors as Garrido et al. define it, is {metric_text(r.metrics['rankme'], '.1f')}. "
            + (f"It is {abs(gap):.1f} below the centred effective rank: the mean vector ({r.info['mean_norm_share']:.0%} "
               "of the raw second moment) is one large extra singular value that concentrates the uncentred spectrum."
               if gap < -0.05 * d else
               "It is close to the centred effective rank, so the mean vector does not distort the spectrum much."
               if abs(gap) <= 0.05 * d else
               f"It exceeds the centred effective rank by {gap:.1f}: the mean direction adds a comparably sized "
               "singular value rather than dominating."))


def _dead_paragraph(r: CollapseResult) -> str:
    d, dead, seed_abs = r.d, r.values["dead_dimensions"], r.info["dead_seed_absolute"]
    dead_cut = DEAD_RULE.healthy
    text = (f"**Dead dimensions.** {dead} of {d} coordinates have variance below {r.dead_threshold:g} × the "
            f"{r.dead_reference} per-coordinate variance (cut {r.dead_cut:.3g})"
            if r.dead_reference != "absolute" else
            f"**Dead dimensions.** {dead} of {d} coordinates have variance below {r.dead_cut:g}")
    text += (": no coordinate is unused." if dead == 0 else
             f" ({dead / d:.0%}); " + (f"more than the seed's {percent(dead_cut, 0)} limit." if dead / d > dead_cut
                                       else f"within the seed's {percent(dead_cut, 0)} limit."))
    if seed_abs != dead:
        text += (f" The seed's absolute rule (unbiased variance < {SEED_ABSOLUTE_THRESHOLD:g}) would count "
                 f"{seed_abs}: it depends on the scale of the vectors (the median coordinate variance here is "
                 f"{np.median(r.variances):.3g}), which is why this chapter uses a relative cut.")
    return text


def _intrinsic_paragraph(r: CollapseResult) -> str:
    ident, m, pr = r.intrinsic, r.metrics, r.participation_ratio[0]
    if ident is None:
        return f"**Intrinsic dimension** was not estimated: {r.info['intrinsic_dimension_skipped']}."
    where = (f"on {ident.n_rows:,} " + ("sampled " if ident.n_sampled < r.n else "") + "distinct vectors"
             + (f" ({ident.n_duplicates:,} exact duplicate{'s' if ident.n_duplicates > 1 else ''} removed)"
                if ident.n_duplicates else ""))
    if not (_finite(ident.twonn) and _finite(ident.mle)):
        return ("**Intrinsic dimension.** " + "; ".join(
            f"{label} {metric_text(m[name], '.1f') if _finite(est) else 'is undefined (every neighbour at the same distance)'}"
            for label, name, est in (("TwoNN", "intrinsic_dim_twonn", ident.twonn),
                                     (f"the MLE (k = {ident.k})", "intrinsic_dim_mle", ident.mle)))
                + f", {where}. Equidistant neighbours (a regular grid or simplex) carry no scale information.")
    mean_id = (ident.twonn + ident.mle) / 2
    if _finite(pr) and mean_id < 0.5 * pr:
        reading = ("much lower than the linear participation ratio: locally the vectors lie on a curved "
                   f"(or clustered) manifold of about {mean_id:.0f} dimensions that bends through ≈ {pr:.0f} linear "
                   "directions. Linear tools (PCA truncation, linear probes) need many more dimensions than the "
                   "data's degrees of freedom; neighbourhood structure is what carries the information.")
    elif _finite(pr) and mean_id > 1.5 * pr:
        reading = ("higher than the linear participation ratio: the variance sits in a few directions, but "
                   "locally the points spread in many low-variance directions (small-scale noise or fine "
                   "structure). The PR understates how many directions nearest-neighbour search actually sees.")
    else:
        reading = ("comparable to the linear participation ratio: to first order the set fills a roughly flat "
                   "subspace, and the linear measures describe its dimension well.")
    agree = abs(ident.twonn - ident.mle) <= 0.25 * mean_id
    asked = r.info.get("intrinsic_k_requested", ident.k)
    lowered = f", lowered from {asked} to fit {ident.n_rows} distinct vectors" if ident.k < asked else ""
    return (f"**Intrinsic dimension.** TwoNN gives {metric_text(m['intrinsic_dim_twonn'], '.1f')} and the MLE "
            f"(k = {ident.k}{lowered}) "
            f"{metric_text(m['intrinsic_dim_mle'], '.1f')}, {where}. That is {mean_id / r.d:.0%} of d and {reading} "
            + ("The two estimators agree." if agree else
               "The two estimators disagree by more than 25 %: TwoNN looks at the smallest scale (two neighbours), "
               f"the MLE at {ident.k} neighbours, so the dimension changes with scale (see the MLE-versus-k curve).")
            + (" Both estimators are known to underestimate when the true dimension is above about 10–20 with a "
               "few thousand points, so treat the values as lower bounds." if mean_id > 8 else ""))


def narrative(r: CollapseResult) -> str:
    """Markdown paragraphs that say what this set's collapse and intrinsic-dimension numbers mean."""
    if r.no_variance:
        parts = [f"**Every one of the {r.n:,} vectors is the same.** The centred spectrum is zero, so nothing "
                 "varies: the effective rank, stable rank, participation ratio and dead-dimension count are "
                 f"undefined. RankMe of the uncentred vectors is {r.values['rankme']:.2f}: one direction, the "
                 "shared vector itself."]
    else:
        parts = [_spread_paragraph(r), _rankme_paragraph(r), _dead_paragraph(r)]
    parts.append(_intrinsic_paragraph(r))
    return "\n\n".join(parts)


def metrics_caption(r: CollapseResult) -> str:
    """Caption of the metrics table: verdict bands and how each interval was obtained."""
    ident = r.intrinsic
    spectral = r.plan.describe(r.info.get("level", 0.95), percentile_for="the count") or f"none ({r.plan.reason})"
    basic = ("; basic intervals correct the spectrum's finite-sample bias and need not contain the value"
             if r.plan.method == "bootstrap" else "")
    return (f"Collapse and intrinsic-dimension metrics. Verdicts: seed 001 §21.1.3's collapse rule ({RANK_RULE.text}; "
            f"{DEAD_RULE.text}); the other metrics have no threshold in the seeds. Spectral CIs: {spectral}{basic}. "
            "Intrinsic dimension CIs: " + ((ident.ci_method or "none") if ident else "not estimated") + ".")


def bias_note(r: CollapseResult) -> str | None:
    """One sentence naming the bias-corrected estimates of the intervals that exclude their value, or ``None``."""
    out = [f"{m.label} {m.bias_corrected:.2f}" for m in r.metrics.values()
           if m.has_ci and _finite(m.bias_corrected) and not m.ci_low <= m.value <= m.ci_high]
    return None if not out else (
        "Bias-corrected estimates (2 × value − mean of the resamples), the centre of the basic intervals that "
        f"exclude their plug-in value: {'; '.join(out)}.")


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def variance_spectrum_figure(r: CollapseResult) -> plt.Figure:
    """Sorted per-coordinate variances with the dead cut (left); normalised singular values (right)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.9))
    v = np.sort(r.variances)[::-1]
    rank = np.arange(1, len(v) + 1)
    dead = v < r.dead_cut
    floor = max(v[v > 0].min() if (v > 0).any() else 1e-12, 1e-12 * max(v.max(), 1e-300))
    a.semilogy(rank, np.clip(v, floor, None), color=PALETTE["data"], lw=1.6, label="per-coordinate variance")
    if dead.any():
        a.scatter(rank[dead], np.clip(v[dead], floor, None), s=14, color=PALETTE["problematic"], zorder=3,
                  label=f"dead ({dead.sum()})")
    a.axhline(r.dead_cut, color=PALETTE["problematic"], ls="--", lw=1.2,
              label=f"dead cut ({r.dead_threshold:g} × {r.dead_reference})" if r.dead_reference != "absolute"
              else f"dead cut ({r.dead_cut:g})")
    a.axhline(SEED_ABSOLUTE_THRESHOLD * (r.n - 1) / r.n, color=PALETTE["muted"], ls=":", lw=1.2,
              label=f"seed's absolute cut ({SEED_ABSOLUTE_THRESHOLD:g})")
    a.set(xlabel="Coordinate (sorted by variance)", ylabel="Variance (log scale)", title="Per-dimension variance")
    a.legend(loc="lower left", fontsize=8.5)
    sv, raw = r.singular_values, r.raw_singular_values
    k = np.arange(1, len(sv) + 1)
    p = sv / sv.sum()
    b.semilogy(k[p > 0], p[p > 0], color=PALETTE["data"], lw=1.8, label="centred (effective rank)")
    q = raw / raw.sum()
    kr = np.arange(1, len(q) + 1)
    b.semilogy(kr[q > 0], q[q > 0], color=PALETTE["accent"], lw=1.4, ls="-.", label="uncentred (RankMe)")
    b.axhline(1 / len(sv), color=PALETTE["reference"], ls="--", lw=1.2, label="all equal (1/d)")
    er = r.values["effective_rank"]
    b.axvline(er, color=PALETTE["muted"], ls=":", lw=1)
    b.annotate(f"effective rank {er:.1f}", (er, b.get_ylim()[0]), xytext=(4, 8), textcoords="offset points",
               fontsize=8.5, color="#333")
    b.set(xlabel="Singular value rank k", ylabel=r"$\sigma_k / \sum_j \sigma_j$ (log scale)",
          title="Singular value spectrum")
    b.legend(loc="upper right", fontsize=8.5)
    return fig


def dimension_comparison_figure(r: CollapseResult) -> plt.Figure:
    """Every dimension estimate with its CI on one axis from 0 to d."""
    rows = _estimates(r)
    fig, ax = plt.subplots(figsize=(WIDTH, 0.42 * len(rows) + 1.2))
    y = np.arange(len(rows))[::-1]
    for yi, (name, what, v, lo, hi, _) in zip(y, rows, strict=True):
        kind = what.split(":")[0]
        color = (PALETTE["muted"] if name.startswith("Nominal") else
                 PALETTE["accent"] if kind == "nonlinear" else PALETTE["data"])
        if _finite(lo) and _finite(hi):
            ax.plot([lo, hi], [yi, yi], color=color, lw=3, alpha=0.45, solid_capstyle="round")
        if _finite(v):
            ax.plot(v, yi, "o", color=color, ms=7)
            ax.annotate(f"{v:.1f}", (v, yi), xytext=(7, 5), textcoords="offset points", fontsize=8.5)
    ax.set_yticks(y, [row[0] for row in rows])
    ax.axvline(r.d, color=PALETTE["muted"], ls=":", lw=1)
    ax.axvline(RANK_RULE.healthy * r.d, color=PALETTE["problematic"], ls="--", lw=1,
               label=f"{percent(RANK_RULE.healthy, 0)} of d (seed 001 effective-rank rule)")
    ax.set(xlim=(0, r.d * 1.08), xlabel="Dimensions", title="Linear (blue) and nonlinear (green) dimension estimates")
    ax.legend(loc="lower right", fontsize=8.5)
    return fig


def estimator_diagnostics_figure(r: CollapseResult) -> plt.Figure:
    """TwoNN fit of −ln(1 − F) on ln μ (left) and the MLE estimate against k (right)."""
    ident = r.intrinsic
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.7))
    x = ident.log_mu
    N = len(x)
    keep = int(N * (1 - ident.discard_fraction))
    y = -np.log(1 - np.arange(1, N + 1) / (N + 1e-9))
    step = max(1, N // 3000)
    a.scatter(x[keep::step], y[keep::step], s=5, color=PALETTE["muted"], alpha=0.5,
              label=f"discarded (largest {ident.discard_fraction:.0%})")
    a.scatter(x[:keep:step], y[:keep:step], s=5, color=PALETTE["data"], alpha=0.6, label="fitted")
    grid = np.linspace(0, x[keep - 1], 50)
    a.plot(grid, ident.twonn * grid, color=PALETTE["reference"], lw=1.6, label=f"slope = {ident.twonn:.1f}")
    a.set(xlabel=r"$\ln(r_2 / r_1)$", ylabel=r"$-\ln(1 - F)$", title="TwoNN fit (straight line = good fit)",
          xlim=(0, x[keep - 1] * 1.5), ylim=(0, y[keep - 1] * 1.5))
    a.legend(loc="upper left", fontsize=8.5)
    ks = sorted(ident.mle_by_k)
    b.plot(ks, [ident.mle_by_k[k] for k in ks], "o-", color=PALETTE["accent"], label="MLE")
    if ident.mle_ci[0] is not None:
        b.errorbar([ident.k], [ident.mle], yerr=[[ident.mle - ident.mle_ci[0]], [ident.mle_ci[1] - ident.mle]],
                   color=PALETTE["accent"], capsize=4, lw=1.5)
    b.axhline(ident.twonn, color=PALETTE["reference"], ls="--", lw=1.2, label="TwoNN")
    if _finite(r.participation_ratio[0]):
        b.axhline(r.participation_ratio[0], color=PALETTE["data"], ls=":", lw=1.2, label="participation ratio")
    b.set(xlabel="Neighbours k", ylabel="Intrinsic dimension", title="MLE against neighbourhood size", ylim=(0, None))
    b.legend(loc="best", fontsize=8.5)
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(r: CollapseResult) -> None:
    callout(**collapse_callout(r))
    show_markdown(narrative(r))


def show_metrics(r: CollapseResult) -> None:
    show_metric_table(
        r.metrics, caption=metrics_caption(r), label="tbl-collapse-metrics",
        definitions="**Definitions.** $\\sigma_1 \\ge \\dots \\ge \\sigma_d$ are the singular values of the "
                    "mean-centred matrix $\\tilde E$ ($\\sigma_k = \\sqrt{n \\lambda_k}$ with $\\lambda_k$ the "
                    "covariance eigenvalues); $\\sigma(E)$ those of the raw, uncentred matrix; $r_1(i), r_2(i)$ and "
                    "$T_j(x_i)$ are Euclidean distances from vector $i$ to its nearest neighbours.")
    note = bias_note(r)
    if note:
        show_markdown(note)


def show_spectrum(r: CollapseResult) -> None:
    if r.no_variance:
        callout("note", "Every vector is the same: there is no variance or singular value spectrum to plot.",
                title="No spectrum")
    else:
        show_figure(variance_spectrum_figure(r),
                    caption="Left: per-coordinate variances, sorted, on a log axis; dashed: the dead cut "
                            f"({r.dead_threshold:g} × the {r.dead_reference} variance = {r.dead_cut:.3g}); "
                            "dotted: the seed's absolute cut. Right: normalised singular values of the centred "
                            "matrix (effective rank) and of the raw matrix (RankMe), against a flat spectrum.",
                    label="fig-collapse-variance")
    show_table(dead_dimension_table(r),
               caption="Dead coordinates under three cuts: the chapter's (recorded), relative to the median, and "
                       "seed 001's absolute rule.", label="tbl-collapse-dead")


def show_dimensions(r: CollapseResult) -> None:
    table = dimension_table(r)
    show_table(table, caption=with_mark_note(table, "Every dimension estimate for this set, with its share of the "
                                                    "nominal d."),
               label="tbl-collapse-dimensions")
    show_figure(dimension_comparison_figure(r),
                caption="Dimension estimates with 95 % intervals (bars), from the nominal d down; dashed: "
                        f"seed 001's effective-rank line ({RANK_RULE.text}).",
                label="fig-collapse-dimensions")


def show_diagnostics(r: CollapseResult) -> None:
    ident = r.intrinsic
    if ident is None:
        callout("note", f"Intrinsic dimension not estimated: {r.info['intrinsic_dimension_skipped']}.",
                title="Not estimated")
    elif not (_finite(ident.twonn) and _finite(ident.mle)):
        callout("note", "An intrinsic-dimension estimate is undefined for this set (every neighbour at the same "
                        "distance), so there is no fit to show.", title="No diagnostics")
    else:
        show_figure(estimator_diagnostics_figure(r),
                    caption=f"Left: TwoNN fit on {ident.n_rows:,} vectors (grey: the largest "
                            f"{ident.discard_fraction:.0%} of ratios, left out as in the paper). Right: MLE "
                            f"intrinsic dimension for k = {min(ident.mle_by_k)}–{max(ident.mle_by_k)} "
                            f"neighbours (bar: 95 % interval at the reported k = {ident.k}).",
                    label="fig-collapse-diagnostics")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

ID_ROWS = Option("id_rows", col.ID_SAMPLE_SIZE, "collapse: rows (a seeded sample) the intrinsic-dimension k-NN is "
                 "estimated on; --sample-size caps it too", bounds=(2, INF))


CHAPTER = ChapterSpec(
    name="collapse", title="Dimension collapse and intrinsic dimension", order=30,
    description="How much of d is used? Effective rank, stable rank, RankMe, dead dimensions, TwoNN and MLE intrinsic dimension (seed 001 §21.1.3).",
    requires=("vectors",),
    options=(ID_ROWS,), precheck=precheck,
    effects=(Effect("collapse", ("effective_rank", "dead_dimensions"), "Part of the dimensions carry no information "
                    "(dimensional collapse)", "Consider a smaller dimension or a decorrelating loss:"),),
    kind="diagnostic", remedies=("whitening",),
)
