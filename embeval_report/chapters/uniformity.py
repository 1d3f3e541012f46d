"""The Uniformity and alignment chapter: what the numbers mean, the metric table, the
alignment–uniformity plane and the distance histogram (computed in
:mod:`embeval_report.metrics.uniformity`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math

import matplotlib.pyplot as plt
import numpy as np
from scipy import stats as sstats

from ..metrics import uniformity as uni
from ..metrics.thresholds import THRESHOLDS
from ..metrics.uniformity import T_DEFAULT, UniformityResult
from ..present.display import callout, escape, show_figure, show_markdown
from ..present.display import show_metrics as show_metric_table
from ..present.format import interval, metric_text, percent
from ..present.plotting import PALETTE, WIDTH
from .declaration import ChapterSpec
from .findings import Effect

if TYPE_CHECKING:
    from .setup import ChapterContext

#: the trade-off box's "typical good" values (seed 001 §21.1.2), the only bands of this chapter
UNIFORMITY_BOX, ALIGNMENT_BOX = THRESHOLDS["uniformity"], THRESHOLDS["alignment"]


def precheck(es, side, settings) -> str | None:
    """Why the chapter cannot run on this valid input (fewer than two vectors), or ``None``."""
    if es.n < 2:
        return f"uniformity is a mean over pairs of vectors and needs at least 2; the set has {es.n}"
    return None


def compute(ctx: ChapterContext) -> UniformityResult:
    """Measure uniformity (and alignment over the positive pairs, when there are any) and record every number."""
    pairs = uni.positive_pairs_for(ctx.es, ctx.side, seed=ctx.seed)
    result = uni.measure_uniformity(ctx.es.vectors, pairs, sample_size=ctx.sample_size, level=ctx.level,
                                    seed=ctx.seed, device=ctx.device)
    ctx.rec.add(*result.metrics.values())
    ctx.rec.note(**result.info)
    return result


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def enable_alignment_text() -> str:
    """What a user adds to get alignment."""
    return ("Alignment needs positive pairs: add `positive_pairs: pairs.csv` to the manifest (a CSV with a header "
            "row whose first two columns are ids of items that should be close, such as two views of one item, "
            "a query and its clicked result, or duplicates), or a `label` column to the `metadata` table "
            "(same-label pairs are then used).")


def _closeness(align: float, rand: float) -> float:
    """How much closer positives are than random pairs (1 − alignment / random-pair mean), α = 2; NaN when
    random pairs coincide (every vector the same direction, up to rounding)."""
    return 1 - align / rand if rand > 1e-9 else math.nan


def _closer(c: float) -> str:
    """``0.33`` -> "33 % closer than random pairs"; negative -> "... further apart than random pairs"."""
    if not math.isfinite(c):
        return "not comparable with random pairs (every pair of vectors coincides)"
    if abs(c) < 0.005:
        return "as close as random pairs"
    return f"{abs(c):.0%} {'closer' if c > 0 else 'further apart'} than random pairs"


def _reading(gap: float, value: float) -> str:
    if gap < 0.05:
        return "**The vectors are spread over the sphere about as evenly as uniformly random directions.**"
    if gap < 0.5:
        return "**The vectors are spread fairly evenly over the sphere, with some clumping.**"
    if value < -1.0:
        return "**The vectors clump: many pairs are much closer than random directions would be.**"
    return "**The vectors sit in a narrow region of the sphere.**"


def _uniformity_box(r: UniformityResult) -> str:
    """Where the set's uniformity sits against seed 001's trade-off box."""
    u, box = r.uniformity, UNIFORMITY_BOX.healthy
    if r.sphere_reference >= box:
        return (f"Seed 001's 'typical good' value (uniformity {UNIFORMITY_BOX.edges}) cannot be reached in "
                f"d = {r.d}, so no verdict is given.")
    return (f"Seed 001's trade-off box calls uniformity {UNIFORMITY_BOX.edges} typical of good embeddings: this "
            "set is " + ("within it." if u.value < box else f"outside it, by {u.value - box:.2f}."))


def _alignment_box(r: UniformityResult) -> str:
    """Where alignment and uniformity sit against the box (a positive_pairs file only), or why not."""
    u, a = r.uniformity, r.alignment
    if r.pairs.source == "file" and a.alpha == 2 and r.info["t"] == T_DEFAULT:
        good_a, good_u = a.value < ALIGNMENT_BOX.healthy, u.value < UNIFORMITY_BOX.healthy
        quad = ("both are in the box's typical good range" if good_a and good_u else
                "positives are close but the set is not spread out, the over-clustered side of the trade-off"
                if good_a else
                "the set is spread out but positives are far apart, the other side of the trade-off"
                if good_u else "neither is in the box's typical good range")
        return f"Against seed 001's box (alignment {ALIGNMENT_BOX.edges}, uniformity {UNIFORMITY_BOX.edges}): {quad}."
    return (f"Alignment gets no verdict here: the box's value ({ALIGNMENT_BOX.edges}) is meant for positive views "
            "of the same item, and members of one label are expected to lie further apart.")


def _abtt_paragraph(r: UniformityResult, gap: float) -> str:
    u, a, rand = r.uniformity, r.alignment, r.random_pair_sq_distance
    ua, D = r.abtt["uniformity"].value, r.abtt["removed"]
    what = "the mean" if D == 0 else f"the mean and the top {D} principal components"
    txt = f"After removing {what} (all-but-the-top), uniformity moves from {u.value:.3f} to {ua:.3f}"
    big = u.value - ua > max(0.05, 0.25 * gap)
    if r.abtt["alignment"] is None or a.alpha != 2:
        return txt + (". Most of the clumping is a few shared directions that post-processing removes." if big else
                      ". The change is small: the clumping is not due to a few dominant directions.")
    aa, rand2 = r.abtt["alignment"].value, r.abtt["random_pair_sq_distance"]
    c0, c1 = _closeness(a.value, rand), _closeness(aa, rand2)
    txt += (f" and alignment from {a.value:.3f} to {aa:.3f}; positives are then {_closer(c1)} "
            f"(before: {_closer(c0)}). ")
    return txt + ("Positives are no closer than random pairs either way, so the correction only changes the "
                  "spread." if max(c0, c1) <= 0.02 else
                  "The shared directions made the set clump without carrying the pair structure, so removing "
                  "them gains uniformity at little cost." if big and c1 >= c0 - 0.05 else
                  "The removed directions carried part of what makes positives close, so the gain in uniformity "
                  "costs alignment; check downstream metrics before adopting the correction." if big else
                  "The change is small: the clumping is not due to a few dominant directions.")


def narrative(r: UniformityResult) -> str:
    """Markdown paragraphs that say what this set's uniformity and alignment mean."""
    u, ref, t = r.uniformity, r.sphere_reference, r.info["t"]
    gap = u.value - ref
    sq_equiv = -u.value / t  # the squared distance at which a constant potential would give U
    how = (f"exact over all {u.n_pairs:,} pairs of the {r.n:,} vectors" if u.method == "exact" else
           f"estimated from {u.n_pairs:,} random pairs because {u.reason} (the pair-sampling error alone "
           f"gives {interval(*u.mc_ci, '.3f')})")
    near = float(np.mean(r.random_sq_distances < 0.2))
    near_ref = float(sstats.beta.sf(0.95, (r.d - 1) / 2, (r.d - 1) / 2)) if r.d >= 2 else math.nan
    parts = [
        f"{_reading(gap, u.value)} Uniformity is {metric_text(r.metrics['uniformity'], '.3f')}, {how}. Uniformly random "
        f"directions in d = {r.d} reach {ref:.3f}, the lowest value a large set can have, and a collapsed set (all "
        f"vectors equal) has 0: this set is "
        + (f"{gap:.3f} above the optimum." if gap >= 0 else
           f"{-gap:.3f} below it, which a small set can reach (the bound holds as n grows).")
        + " Its mean Gaussian potential "
        f"e^U = {u.mean_potential:.3f} is what every pair at squared distance {sq_equiv:.2f} "
        f"(cosine {1 - sq_equiv / 2:.2f}) would give, while the mean squared distance over all pairs is "
        f"{r.random_pair_sq_distance:.3f} (mean cosine {1 - r.random_pair_sq_distance / 2:.3f}): the potential "
        f"is driven by close pairs. {near:.1%} of {len(r.random_sq_distances):,} random pairs have cosine above "
        f"0.9, against {percent(near_ref)} for random directions in d = {r.d}."]
    if t == T_DEFAULT:
        parts.append(_uniformity_box(r))
    a = r.alignment
    if a is None:
        parts.append("No positive pairs were given, so alignment is not reported (see the note below for what "
                     "would enable it).")
    else:
        txt = (f"Alignment over {escape(r.pairs.description)} is {metric_text(r.metrics['alignment'], '.3f')}, on a scale "
               "from 0 (positives coincide) to 2 (unrelated directions).")
        if a.alpha == 2:
            c = _closeness(a.value, r.random_pair_sq_distance)
            txt += (f" Random pairs of this set are at {r.random_pair_sq_distance:.3f} on average, so positives are "
                    + (f"{_closer(c)}." if c > 0.02 or not math.isfinite(c) else
                       f"{_closer(c)}: the embedding does not reflect these pairs."))
        parts.append(txt)
        parts.append(_alignment_box(r))
    if r.abtt is not None:
        parts.append(_abtt_paragraph(r, gap))
    elif "all_but_the_top" in r.info:
        parts.append("All-but-the-top is not compared: removing the mean leaves no variance in this set.")
    return "\n\n".join(parts)


def metrics_caption(r: UniformityResult) -> str:
    """Caption of the metrics table: how each interval was obtained and where verdicts come from."""
    why = "fewer than 3 vectors" if r.n < 3 else "a leave-one-out value is undefined"
    parts = [f"Uniformity: {r.metrics['uniformity'].ci_method or f'no interval ({why})'}."]
    if r.alignment is not None:
        parts.append(f"Alignment over {r.pairs.description}: {r.alignment.ci_method or 'no interval'}.")
    parts.append(f"Verdicts: {UNIFORMITY_BOX.table}, typical good values only (no warning level), "
                 "so a verdict is healthy or concerning; alignment gets one only for a positive_pairs file.")
    return " ".join(parts)


def definitions_text(r: UniformityResult) -> str:
    """The notation above the list of formulas."""
    pos = f", $\\alpha = {r.info['alpha']:g}$, $P$ the positive pairs" if r.alignment is not None else ""
    return (f"**Definitions.** $z_i = e_i / \\lVert e_i \\rVert$ are the L2-normalised vectors, $t = {r.info['t']:g}$"
            f"{pos}. Wang & Isola (2020), ICML; the uniformity "
            "of seed 004 (`nidl.metrics.uniformity_score`). The reference for uniformly random directions in "
            f"$d = {r.d}$ is ${r.sphere_reference:.4f}$.")


def plane_intro(r: UniformityResult) -> str:
    """The paragraph above :func:`alignment_uniformity_plane`."""
    if r.alignment is None:
        return ("Without positive pairs there is no alignment axis: the figure places this set's uniformity between "
                f"uniformly random directions in d = {r.d} (the lowest value a large set can reach) and a collapsed "
                "set (0). Wang & Isola (2020) compare representations in the full alignment–uniformity plane once "
                "positive pairs are available.")
    return ("Wang & Isola (2020) compare representations as points in this plane: lower left is better, a collapsed "
            "set (all vectors equal) sits at (0, 0), perfectly aligned but not spread at all, and no large set can "
            "lie left of the dashed line of uniformly random directions. The triangle shows this set with random "
            "pairs as 'positives': its height above the set's own point is what the positive pairs gain over chance.")


def plane_caption(r: UniformityResult) -> str:
    """Caption of :func:`alignment_uniformity_plane`."""
    if r.alignment is None:
        return ("Uniformity of this set (with its 95 % CI) on a line from uniformly random directions on the sphere "
                f"(d = {r.d}, the lowest value a large set can reach) to a collapsed set (0). No positive pairs, so "
                "no alignment axis.")
    ab = (f" Square: the same set after all-but-the-top (mean and top {r.abtt['removed']} principal components "
          "removed)." if r.abtt is not None else "")
    return ("This set (error bars: 95 % CIs) in the alignment–uniformity plane, lower left is better. Dashed: "
            f"uniformly random directions in d = {r.d}; diamond: such directions with unrelated pairs; triangle: "
            "this set with random pairs in place of positives; cross: a collapsed set; star: the ideal corner; "
            f"shaded: seed 001's typical good values (alignment {ALIGNMENT_BOX.edges}, uniformity "
            f"{UNIFORMITY_BOX.edges}).{ab}")


def distance_caption(r: UniformityResult) -> str:
    """Caption of :func:`distance_distribution`."""
    pos = (f" and of the positive pairs ({r.pairs.description})" if r.alignment is not None else "")
    return (f"Squared distances between unit vectors for {len(r.random_sq_distances):,} random pairs{pos}, "
            f"against the distribution for uniformly random directions in d = {r.d}. Dashed: means (exact over all "
            "pairs for random pairs). Dotted, right axis: the Gaussian potential that uniformity averages.")


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _err(est):
    if est.ci_low is None:
        return None
    return [[est.value - est.ci_low], [est.ci_high - est.value]]


def _uniformity_scale(r: UniformityResult) -> plt.Figure:
    """Without positive pairs: this set's uniformity on a line between its references."""
    u, ref, box_u = r.uniformity, r.sphere_reference, UNIFORMITY_BOX.healthy
    fig, ax = plt.subplots(figsize=(WIDTH, 2.4))
    pts = [(u.value, "this set", PALETTE["data"], "o"),
           (ref, f"uniform on the sphere (d = {r.d})", PALETTE["reference"], "D"),
           (0.0, "collapsed (all equal)", PALETTE["problematic"], "X")]
    if r.abtt is not None:
        pts.insert(1, (r.abtt["uniformity"].value, f"after all-but-the-top (D = {r.abtt['removed']})",
                       PALETTE["accent"], "s"))
    for x, lab, c, mk in pts:
        ax.plot([x], [0], mk, color=c, ms=10, label=lab, zorder=3)
    if u.ci_low is not None:
        ax.errorbar([u.value], [0], xerr=_err(u), color=PALETTE["data"], capsize=4, lw=1.5, zorder=2)
    ax.axvline(box_u, color=PALETTE["muted"], ls=":", lw=1)
    ax.annotate(f"seed 001: typical good {UNIFORMITY_BOX.edges}", (box_u, 0.6), xytext=(4, 0),
                textcoords="offset points", fontsize=8.5, color="#555")
    ax.set(yticks=[], ylim=(-1, 1), xlabel=f"Uniformity (t = {r.info['t']:g}; lower = more uniform)",
           title="Uniformity of this set against its references (no positive pairs for alignment)",
           xlim=(min(ref, u.value, box_u) - 0.3, 0.3))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=4, fontsize=8.5, frameon=False)
    return fig


def alignment_uniformity_plane(r: UniformityResult) -> plt.Figure:
    """The alignment–uniformity plane (lower-left is better) with reference points.

    Without positive pairs, a uniformity scale with the same reference points instead.
    """
    if r.alignment is None:
        return _uniformity_scale(r)
    u, a, ref = r.uniformity, r.alignment, r.sphere_reference
    box_u, box_a = UNIFORMITY_BOX.healthy, ALIGNMENT_BOX.healthy
    fig, ax = plt.subplots(figsize=(WIDTH, 5.6))
    if a.alpha == 2 and r.info["t"] == T_DEFAULT:
        ax.fill_between([min(ref, u.value) - 1, box_u], 0, box_a, color=PALETTE["healthy"], alpha=0.08,
                        label=f"seed 001: typical good (alignment {ALIGNMENT_BOX.edges}, "
                              f"uniformity {UNIFORMITY_BOX.edges})")
    ax.errorbar([u.value], [a.value], xerr=_err(u), yerr=_err(a), fmt="o", ms=9, color=PALETTE["data"],
                capsize=4, label="this set", zorder=4)
    pts_x, pts_y = [u.value, 0.0, ref], [a.value, 0.0, a.value]
    if a.alpha == 2:
        ax.plot([u.value], [r.random_pair_sq_distance], "^", ms=8, color=PALETTE["muted"], zorder=3,
                label="this set, random pairs as 'positives'")
        ax.plot([ref], [2.0], "D", ms=8, mfc="none", mec=PALETTE["reference"], mew=1.6, zorder=3,
                label="uniform on the sphere, unrelated pairs")
        pts_y += [r.random_pair_sq_distance, 2.0]
        pts_x += [u.value, ref]
    if r.abtt is not None:
        ab_u, ab_a = r.abtt["uniformity"], r.abtt["alignment"]
        ax.plot([ab_u.value], [ab_a.value], "s", ms=8, color=PALETTE["accent"], zorder=4,
                label=f"after all-but-the-top (D = {r.abtt['removed']})")
        ax.annotate("", (ab_u.value, ab_a.value), (u.value, a.value),
                    arrowprops=dict(arrowstyle="->", color=PALETTE["accent"], lw=1.2))
        pts_x.append(ab_u.value)
        pts_y.append(ab_a.value)
    ax.plot([0], [0], "X", ms=9, color=PALETTE["problematic"], zorder=3, label="collapsed (all vectors equal)")
    ax.axvline(ref, color=PALETTE["reference"], ls="--", lw=1.1,
               label=f"uniform on the sphere: {ref:.3f} (d = {r.d})")
    ax.plot([ref], [0], "*", ms=13, color=PALETTE["healthy"], zorder=3, label="ideal corner")
    ax.set(xlim=(min(pts_x) - 0.25, 0.25), ylim=(-0.08, max(max(pts_y) * 1.12, 0.6)),
           xlabel=f"Uniformity (t = {r.info['t']:g}; lower = more uniform)",
           ylabel=f"Alignment (α = {a.alpha:g}; lower = positives closer)",
           title="Alignment–uniformity plane (lower left is better)")
    handles, labels = ax.get_legend_handles_labels()
    first = labels.index("this set")
    order = [first] + [k for k in range(len(labels)) if k != first]
    ax.legend([handles[k] for k in order], [labels[k] for k in order], loc="upper center",
              bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize=8.5, frameon=False)
    return fig


def distance_distribution(r: UniformityResult) -> plt.Figure:
    """Histogram of squared distances on the sphere: random pairs vs positive pairs vs uniform reference."""
    fig, ax = plt.subplots(figsize=(WIDTH, 3.8))
    bins = np.linspace(0, 4, 121)
    ax.hist(r.random_sq_distances, bins=bins, density=True, alpha=0.55, color=PALETTE["data"],
            label=f"random pairs ({len(r.random_sq_distances):,} sampled)")
    ax.axvline(r.random_pair_sq_distance, color=PALETTE["data"], ls="--", lw=1.2)
    if r.alignment is not None:
        sq = r.alignment.sq_distances
        ax.hist(sq, bins=bins, density=True, alpha=0.55, color=PALETTE["accent"],
                label=f"positive pairs ({len(sq):,}, {'file' if r.pairs.source == 'file' else 'same label'})")
        ax.axvline(float(sq.mean()), color=PALETTE["accent"], ls="--", lw=1.2)
    grid = np.linspace(0, 4, 801)
    if r.d >= 2:
        ax.plot(grid, uni.sphere_sq_distance_density(grid, r.d), color=PALETTE["reference"], lw=1.6,
                label=f"uniform on the sphere (d = {r.d})")
    ax.set(xlabel="Squared distance ‖zᵢ − zⱼ‖² between unit vectors (= 2 − 2 cos)", ylabel="Density",
           xlim=(0, 4), title="Pairwise distances on the sphere (dashed: means)")
    ymax = ax.get_ylim()[1]
    ax2 = ax.twinx()
    ax2.plot(grid, np.exp(-r.info["t"] * grid), color=PALETTE["muted"], ls=":", lw=1.3)
    ax2.set_ylabel(f"Gaussian potential e^(−{r.info['t']:g}δ) (dotted)", color="#666")
    ax2.set_ylim(0, 1.05)
    ax2.grid(False)
    ax.set_ylim(0, ymax)
    ax.legend(loc="upper right", fontsize=8.5)
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(r: UniformityResult) -> None:
    show_markdown(narrative(r))
    if r.alignment is None:
        callout("note", enable_alignment_text(), title="Alignment not computed")
    elif r.pairs.sampled:
        callout("note", f"Alignment uses {r.pairs.description}. The sample is uniform over all "
                "same-label pairs, so its mean is unbiased for the mean over all of them.",
                title="Sampled positive pairs")


def show_metrics(r: UniformityResult) -> None:
    show_metric_table(r.metrics, caption="Uniformity and alignment; lower is better for both. " + metrics_caption(r),
                      label="tbl-uniformity-metrics", definitions=definitions_text(r))


def show_plane(r: UniformityResult) -> None:
    show_markdown(plane_intro(r))
    show_figure(alignment_uniformity_plane(r), caption=plane_caption(r), label="fig-uniformity-plane")


def show_distances(r: UniformityResult) -> None:
    show_figure(distance_distribution(r), caption=distance_caption(r), label="fig-uniformity-distances")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

CHAPTER = ChapterSpec(
    name="uniformity", title="Uniformity and alignment", order=20,
    description="Are vectors spread over the sphere, and are positive pairs close? Wang & Isola uniformity (exact, all pairs) and alignment (seed 001 §21.1.2).",
    requires=("vectors",), optional=("positive_pairs",),
    precheck=precheck,
    effects=(Effect("uniformity", ("uniformity",), "The vectors do not spread over the sphere",
                    "Expect crowded neighbourhoods; a contrastive objective or a correction spreads them:",
                    cause="anisotropy"),),
    kind="diagnostic", remedies=("centring", "all-but-the-top", "whitening"),
)
