"""The Isotropy chapter: what the isotropy numbers mean, the metric table, the breakdown by group,
the spectrum and cosine figures, and all-but-the-top before/after (computed in
:mod:`embeval_report.metrics.isotropy`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..io import group_column
from ..metrics import isotropy as iso
from ..metrics.thresholds import condition_number_reading
from ..metrics.spec import NOT_ESTIMABLE
from ..present.display import callout, escape, show_figure, show_markdown, show_table
from ..present.display import show_metrics as show_metric_table
from ..present.format import interval, metric_text
from ..present.plotting import PALETTE, WIDTH
from .declaration import ChapterSpec
from .findings import Effect

if TYPE_CHECKING:
    from .setup import ChapterContext


@dataclass(frozen=True)
class IsotropyReport:
    """Everything the chapter shows."""

    result: iso.IsotropyResult
    abtt: pd.DataFrame         # one row per setting: the original, then each number of removed components
    abtt_samples: dict         # setting (-1 = original, else D) -> sampled pair cosines
    group_column: str | None
    groups: pd.DataFrame | None  # isotropy per value of ``group_column``


def compute(ctx: ChapterContext) -> IsotropyReport:
    """Measure the set, all-but-the-top and the per-group breakdown, and record every number."""
    X, meta = ctx.es.vectors, ctx.es.metadata
    result = iso.measure_isotropy(X, sample_size=ctx.sample_size, level=ctx.level, seed=ctx.seed, device=ctx.device)
    abtt, samples = iso.all_but_the_top_effect(X, base=result, pcs=result.directions(), seed=ctx.seed, device=ctx.device,
                                               spread="exact" if ctx.sample_size is None else "sampled")
    col = group_column(meta)
    groups = iso.isotropy_by_group(X, meta[col], seed=ctx.seed, device=ctx.device) if col else None
    ctx.rec.add(*result.metrics.values())
    ctx.rec.note(resampling=result.plan.method, resampling_units=result.plan.units,
                 bootstrap_resamples=result.plan.n_boot, pair_sample=result.info["pair_sample"],
                 rank=result.info["rank"], mean_norm_share=result.mean_norm_share,
                 all_but_the_top=abtt.drop(columns=["removed"]).to_dict(orient="records"),
                 by_group=None if groups is None else {"column": col, "rows": groups.to_dict(orient="records")})
    return IsotropyReport(result, abtt, samples, col, groups)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def group_table(groups: pd.DataFrame) -> pd.DataFrame:
    """The per-group table as shown: the APCS interval as one column."""
    t = groups.copy()
    t.insert(3, "APCS 95 % CI", [interval(lo, hi, ".3f", sep=" – ") for lo, hi in zip(t["APCS ci_low"], t["APCS ci_high"])])
    return t.drop(columns=["APCS ci_low", "APCS ci_high"])


_ABTT_NAMES = {"apcs": "APCS", "apcs_std": "cosine sd", "participation_ratio_fraction": "PR / d",
               "condition_number": "κ", "dims_for_90pct_variance": "dims for 90 %", "top10_variance_ratio": "top-10 share"}


def abtt_table(abtt: pd.DataFrame) -> pd.DataFrame:
    return abtt.drop(columns=["removed"]).rename(columns=_ABTT_NAMES)


def _bands_caption() -> str:
    tables = dict.fromkeys(s.bands.table for s in iso.SPECS.values() if s.bands)
    return "Verdict bands: " + " and ".join(tables) + "."


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _apcs_reading(apcs: float) -> str:
    if apcs < 0.1:
        return "random pairs are nearly orthogonal, as in an isotropic space"
    if apcs <= 0.3:
        return "pairs share a common direction, which compresses the useful range of cosine similarity"
    if apcs <= 0.7:
        return ("vectors sit in a narrow cone: every pair looks similar and cosine similarity loses most of its "
                "discriminative power")
    return "vectors are nearly collinear; the seed calls this severe, embeddings nearly useless for similarity"


def narrative(r: iso.IsotropyResult, abtt: pd.DataFrame | None = None) -> str:
    """Markdown paragraphs that say what this set's isotropy numbers mean."""
    v, m = r.values, r.metrics
    worst = [k for k, x in m.items() if x.verdict == "problematic"]
    concerning = [k for k, x in m.items() if x.verdict == "concerning"]
    if worst:
        overall = ("**The space is strongly anisotropic.** " +
                   f"{len(worst)} of the Table 217.2 checks are in the problematic band "
                   f"({', '.join(m[k].label for k in worst)}).")
    elif concerning:
        overall = ("**The space is moderately anisotropic.** " +
                   f"Checks in the concerning band: {', '.join(m[k].label for k in concerning)}.")
    else:
        overall = "**The space is close to isotropic:** every Table 217.2 check is in the healthy band."
    unest = [x.label for x in m.values() if x.note.startswith(NOT_ESTIMABLE)]
    if unest:
        overall = overall.replace("every Table 217.2 check", "every Table 217.2 check that applies")
        overall += (f" With n = {r.n:,} ≤ d = {r.d} vectors, {', '.join(unest)} carry no verdict (not estimable: "
                    f"a sample covariance of n points has rank at most n − 1 = {r.n - 1:,}, so κ is infinite and "
                    "shares of d are capped whatever the model); their values are shown, but they describe the "
                    "sample size, not the embedding.")
    parts = [overall + f" These are exact values over all {r.n:,} vectors of dimension {r.d}."]
    parts.append(
        f"The mean cosine over all {r.n * (r.n - 1):,} ordered pairs is APCS = {metric_text(m['apcs'], '.4f')}: "
        f"{_apcs_reading(v['apcs'])}. Its spread is {v['apcs_std']:.4f}, against ≈ {1 / math.sqrt(r.d):.4f} "
        f"(= 1/√d) for directions drawn uniformly on the sphere. The mean vector carries {r.mean_norm_share:.1%} of "
        "the raw second moment; a large share is the 'common direction' that all-but-the-top removes.")
    if not math.isfinite(v["participation_ratio"]):
        parts.append("The covariance is zero (every vector is the same), so the spectral metrics are undefined.")
        return "\n\n".join(parts)
    kappa = v["condition_number"]
    kappa_txt = ("infinite: the covariance is singular (rank "
                 f"{r.info['rank']} < d = {r.d}), so some directions carry no variance at all"
                 + (" (with n ≤ d this follows from the sample size)" if r.n <= r.d else "")
                 if not math.isfinite(kappa) else
                 f"{metric_text(m['condition_number'], '.1f')}, which Table 217.1 reads as "
                 f"*{condition_number_reading(kappa)}*")
    parts.append(
        f"The variance is spread over PR = {v['participation_ratio']:.1f} effective dimensions "
        f"({metric_text(m['participation_ratio_fraction'], '.1%')} of d); "
        f"90 % of it lies in the top {v['dims_for_90pct_variance']} of {r.d} principal components "
        f"({v['dims_for_90pct_variance'] / r.d:.0%}), and the top 10 components hold "
        f"{v['top10_variance_ratio']:.1%}. The entropy effective dimension is "
        f"{v['effective_dim_entropy']:.1f}. The condition number is {kappa_txt}.")
    D = iso.best_removal(abtt) if abtt is not None and len(abtt) > 1 else None
    if D is not None:
        o, best = abtt.iloc[0], abtt[abtt.removed == D].iloc[0]
        parts.append(
            f"Removing the mean and the top principal components (all-but-the-top) moves APCS from "
            f"{o['apcs']:.3f} to {best['apcs']:.3f} ({best['setting']}) and PR/d from "
            f"{o['participation_ratio_fraction']:.1%} to {best['participation_ratio_fraction']:.1%}. "
            + ("A large change means the anisotropy is a few dominant directions that post-processing can "
               "remove before similarity search; check downstream metrics before adopting it, since the "
               "removed directions may also carry signal (for example popularity)."
               if abs(o['apcs']) - abs(best['apcs']) > 0.05 else
               "The change is small: there is no dominant common direction to remove."))
    return "\n\n".join(parts)


def group_narrative(table: pd.DataFrame, column: str) -> str:
    """One paragraph comparing the groups of :func:`group_table`."""
    if len(table) < 2:
        return ""
    hi, lo = table.loc[table["APCS"].idxmax()], table.loc[table["APCS"].idxmin()]
    text = (f"Broken down by {escape(column)}, APCS ranges from {lo['APCS']:.3f} ({escape(lo['group'])}, "
            f"PR/d {lo['PR / d']:.1%}) to {hi['APCS']:.3f} ({escape(hi['group'])}, PR/d {hi['PR / d']:.1%}).")
    if hi["APCS"] - lo["APCS"] > 0.2:
        text += (f" The anisotropy is concentrated in **{escape(hi['group'])}**: look there for the cause "
                 "(for example a popularity or frequency effect pulling those vectors toward one direction).")
    else:
        text += " The groups are similarly (an)isotropic, so the cause is shared rather than specific to one group."
    return text


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def eigenvalue_spectrum(result: iso.IsotropyResult) -> plt.Figure:
    """Covariance spectrum on a log scale, and cumulative variance with the 90 % line."""
    lam = np.clip(result.eigenvalues, 0, None)
    k = np.arange(1, len(lam) + 1)
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    pos = lam > 0
    a.semilogy(k[pos], lam[pos], color=PALETTE["data"], lw=1.8, label="this embedding set")
    a.axhline(lam.mean(), color=PALETTE["reference"], ls="--", lw=1.2, label="isotropic (all equal, same total)")
    a.set(xlabel="Principal component (rank)", ylabel="Eigenvalue (variance, log scale)", title="Eigenvalue spectrum")
    a.legend(loc="upper right")
    cum = np.cumsum(lam) / max(lam.sum(), 1e-300)
    b.plot(k, cum, color=PALETTE["data"], lw=1.8, label="this embedding set")
    b.plot(k, k / len(k), color=PALETTE["reference"], ls="--", lw=1.2, label="isotropic")
    b.axhline(0.9, color=PALETTE["muted"], ls=":", lw=1)
    d90 = result.values["dims_for_90pct_variance"]
    if math.isfinite(d90):
        b.axvline(d90, color=PALETTE["muted"], ls=":", lw=1)
        b.annotate(f"90 % at {d90} of {len(lam)}", (d90, 0.9), xytext=(8, -18), textcoords="offset points",
                   fontsize=9, color="#333")
    b.set(xlabel="Number of components", ylabel="Cumulative variance explained", title="Cumulative variance",
          ylim=(0, 1.02))
    b.legend(loc="lower right")
    return fig


def cosine_histogram(samples: dict[str, np.ndarray], d: int, *, exact_means: dict[str, float] | None = None
                     ) -> plt.Figure:
    """Histogram of sampled pairwise cosines against the isotropic reference N(0, 1/d)."""
    fig, ax = plt.subplots(figsize=(WIDTH, 3.6))
    colors = [PALETTE["data"], PALETTE["accent"], "#7b4ea3", "#2b8a8a"]
    for (name, x), c in zip(samples.items(), colors):
        ax.hist(x, bins=120, range=(-1, 1), density=True, alpha=0.55, color=c, label=name)
        mean = (exact_means or {}).get(name, float(np.mean(x)))
        ax.axvline(mean, color=c, ls="--", lw=1.2)
    grid = np.linspace(-1, 1, 801)
    sd = 1 / math.sqrt(d)
    ax.plot(grid, np.exp(-grid ** 2 / (2 * sd * sd)) / (sd * math.sqrt(2 * math.pi)),
            color=PALETTE["reference"], lw=1.6, label=f"isotropic reference N(0, 1/d), d = {d}")
    ax.set(xlabel="Cosine similarity of a random pair", ylabel="Density", xlim=(-1, 1),
           title="Pairwise cosine similarity (dashed: mean over all pairs)")
    ax.legend(loc="upper left", fontsize=8.5)
    return fig


def all_but_the_top_figure(abtt: pd.DataFrame) -> plt.Figure:
    """APCS and PR/d against the number of removed principal components, with the healthy bands."""
    t = abtt[abtt["removed"].notna()]
    x = t["removed"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.4))
    orig = abtt.iloc[0]
    apcs, pr = iso.SPECS["apcs"].bands, iso.SPECS["participation_ratio_fraction"].bands
    a.plot(x, t["apcs"], "o-", color=PALETTE["data"])
    a.axhline(orig["apcs"], color=PALETTE["muted"], ls=":", label="original")
    a.axhspan(-apcs.healthy, apcs.healthy, color=PALETTE["healthy"], alpha=0.08,
              label=f"healthy band ({apcs.edges})")
    a.set(xlabel="Components removed after centring (D)", ylabel="APCS", title="Mean pairwise cosine")
    a.legend(fontsize=8.5)
    b.plot(x, t["participation_ratio_fraction"], "o-", color=PALETTE["data"])
    b.axhline(orig["participation_ratio_fraction"], color=PALETTE["muted"], ls=":", label="original")
    b.axhspan(pr.healthy, 1.0, color=PALETTE["healthy"], alpha=0.08, label=f"healthy band (> {pr.healthy:.0%})")
    b.set(xlabel="Components removed after centring (D)", ylabel="PR / d", ylim=(0, 1.02),
          title="Participation ratio (fraction of remaining d)")
    b.legend(fontsize=8.5)
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: IsotropyReport) -> None:
    show_markdown(narrative(rep.result, rep.abtt))


def show_metrics(rep: IsotropyReport) -> None:
    r = rep.result
    ci = r.ci_method or f"No interval: {r.plan.reason}."
    show_metric_table(r.metrics, caption=f"Isotropy metrics. {_bands_caption()} {ci}", label="tbl-isotropy-metrics",
                 definitions="**Definitions.** $\\lambda_1 \\ge \\dots \\ge \\lambda_d$ are the eigenvalues of the "
                             "covariance $\\Sigma = \\tfrac1n \\tilde E^\\top \\tilde E$ of the mean-centred vectors.")
    corrected = {k: m for k, m in r.metrics.items() if m.has_ci and not m.ci_low <= m.value <= m.ci_high}
    if corrected:
        items = "; ".join(f"{m.label} {m.value:.4g} (bias-corrected {m.bias_corrected:.4g})" for m in corrected.values())
        show_markdown(f"Some intervals do not contain their plug-in value: {items}. A basic bootstrap interval "
                      "corrects the finite-sample bias of eigenvalue statistics, so it is centred on the "
                      "bias-corrected estimate (2 × value − mean of the resamples), shown in brackets.")


def show_groups(rep: IsotropyReport) -> None:
    if rep.group_column is None:
        show_markdown("The metadata has no group column (`kind`, `group`, `type` or `label` with 2–12 values), "
                      "so no breakdown is shown.")
        return
    table = group_table(rep.groups)
    if not len(table):
        show_markdown(f"No value of “{escape(rep.group_column)}” has the 20 vectors a breakdown needs.")
        return
    show_markdown(group_narrative(table, rep.group_column))
    show_table(table, caption=f"Isotropy within each value of the metadata column “{rep.group_column}” "
                              "(verdict: the worst of the group's Table 217.2 checks; CI: block bootstrap).",
               label="tbl-isotropy-groups")


def show_spectrum(rep: IsotropyReport) -> None:
    show_figure(eigenvalue_spectrum(rep.result),
                caption="Left: covariance eigenvalues by rank (log scale) against a perfectly isotropic spectrum "
                        "with the same total variance. Right: cumulative share of variance; dotted lines mark 90 %.",
                label="fig-isotropy-spectrum")


def show_cosines(rep: IsotropyReport) -> None:
    r, D = rep.result, iso.best_removal(rep.abtt)
    samples, means = {"original": rep.abtt_samples[-1]}, {"original": r.values["apcs"]}
    if D is not None:
        name = f"after all-but-the-top (D = {D})"
        samples[name] = rep.abtt_samples[D]
        means[name] = float(rep.abtt.loc[rep.abtt.removed == D, "apcs"].iloc[0])
    n_pairs = len(rep.abtt_samples[-1])
    show_figure(cosine_histogram(samples, r.d, exact_means=means),
                caption=f"Cosine similarity of {n_pairs:,} random pairs"
                        + (f", before and after removing the mean and the top {D} principal components" if D is not None
                           else "") + ", against the isotropic reference N(0, 1/d).",
                label="fig-isotropy-cosines")


def show_abtt(rep: IsotropyReport) -> None:
    show_table(abtt_table(rep.abtt),
               caption="Isotropy before and after all-but-the-top for D = 0 (centring only) up to 10 and Mu et al.'s "
                       "rule of thumb D ≈ d/100; exact over all pairs.", label="tbl-isotropy-abtt")
    if iso.best_removal(rep.abtt) is None:
        callout("note", "All-but-the-top leaves no variance to measure on this set.", title="Nothing to correct")
        return
    show_figure(all_but_the_top_figure(rep.abtt),
                caption="APCS and participation ratio as more principal components are removed (D = 0: mean "
                        "removed only). Shaded: the healthy band of Table 217.2.", label="fig-isotropy-abtt")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

CHAPTER = ChapterSpec(
    name="isotropy", title="Isotropy", order=10,
    description="Is the space used evenly? Condition number, participation ratio, APCS, spectrum, all-but-the-top (seed 000 §217.0, seed 001 §21.1.1).",
    requires=("vectors",),
    effects=(Effect("anisotropy", ("apcs", "participation_ratio_fraction", "condition_number", "top10_variance_ratio",
                                   "dims_for_90pct_variance"),
                    "A few directions carry most of the variance (anisotropy)",
                    "Centre the vectors or remove their top principal directions before cosine search or "
                    "clustering (the Anisotropy correction chapter compares the options):",
                    titles=(("apcs", "The vectors crowd into a narrow cone (anisotropy)"),), cause="anisotropy"),),
    kind="diagnostic", remedies=("centring", "all-but-the-top", "whitening"), standard_remedies=2,
)
