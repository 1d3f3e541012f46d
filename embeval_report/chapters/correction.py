"""The Anisotropy-correction chapter: centring, all-but-the-top and whitening compared on isotropy,
uniformity and hubness, and what they cost the neighbourhoods (computed in
:mod:`embeval_report.metrics.correction`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..metrics import correction as corr
from ..metrics.hubness import usable_k
from ..present.display import escape, show_figure, show_markdown, show_table
from ..present.format import fixed_text, interval, percent
from ..present.plotting import PALETTE, WIDTH
from .declaration import ChapterSpec, K

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["CorrectionReport", "comparison_figure", "compute", "display_table", "narrative", "precheck",
           "recorded_text", "show_comparison", "show_metrics", "show_summary"]


@dataclass(frozen=True)
class CorrectionReport:
    """Everything the chapter shows."""

    comparison: corr.CorrectionComparison
    k_requested: int   # the ``k`` option; ``comparison.k`` is smaller when the set has too few points


def precheck(es, side, settings) -> str | None:
    """Why the corrections cannot be compared: fewer than 3 vectors leave no k-nearest-neighbour list."""
    if es.n < 3:
        return (f"comparing corrections needs at least 3 vectors (the hubness and neighbourhood checks use each "
                f"point's nearest neighbours among at least 2 others); the set has {es.n}")
    return None


def compute(ctx: ChapterContext) -> CorrectionReport:
    """Apply each correction, measure the corrected sets, and record the what-if metrics."""
    meta = ctx.es.metadata
    labels = meta["label"].to_numpy() if meta is not None and "label" in meta else None
    requested = int(ctx.option("k"))
    comparison = corr.compare_corrections(ctx.es.vectors, labels, k=usable_k(requested, ctx.es.n),
                                          sample_size=ctx.sample_size, level=ctx.level, seed=ctx.seed,
                                          device=ctx.device)
    ctx.rec.add(*comparison.metrics.values())
    ctx.rec.note(removed=comparison.removed, k=comparison.k, sampling=comparison.sampling,
                 subsample=comparison.subsample,
                 **({"k_requested": requested} if comparison.k != requested else {}),
                 table=comparison.table.to_dict(orient="records"))
    return CorrectionReport(comparison, requested)


# ---------------------------------------------------------------------------------------------
# Tables, narrative, figure
# ---------------------------------------------------------------------------------------------

def display_table(c: corr.CorrectionComparison) -> pd.DataFrame:
    """The comparison as the report shows it (percentages for shares)."""
    t = c.table.rename(columns={k: v[0] for k, v in corr.COLUMNS.items()})
    for col in ("antihubs", "k-NN kept", "same-label k-NN", "PR / d"):
        if col in t:
            t[col] = [percent(x, 1) for x in t[col]]
    for col, label, fmt in (("k_occurrence_skewness", "N_k skewness", ".2f"), ("uniformity", "uniformity", ".3f")):
        cis = {s: ci for (s, c_), ci in c.intervals.items() if c_ == col}
        if cis:  # a sampled estimate: its interval next to it
            t.insert(t.columns.get_loc(label) + 1, f"{label} CI",
                     [interval(*cis[s], fmt, sep=" – ") if s in cis else "—" for s in t["setting"]])
    return t


def _undefined_narrative(c: corr.CorrectionComparison) -> str:
    o = c.table.iloc[0]
    return ("Every correction starts by subtracting the mean; here that leaves no variance at all (every vector is "
            f"the same), so {', '.join(escape(s) for s in c.undefined)} have no directions left to measure and their "
            "isotropy, uniformity and hubness are undefined (shown as —). The set as delivered has APCS "
            f"{fixed_text(o['apcs'], '.3f')} and uniformity {fixed_text(o['uniformity'], '.3f')}: no post-processing "
            "can separate vectors that are identical; the problem lies upstream, in the model or the export.")


def narrative(c: corr.CorrectionComparison, k_requested: int | None = None) -> str:
    """What each correction buys and costs on this set."""
    k_note = ("" if k_requested is None or k_requested == c.k else
              f"\n\nThe neighbourhood checks use k = {c.k} nearest neighbours instead of the `k` option's "
              f"{k_requested}: the set has only {c.k + 2} vectors (each point needs more than k others).")
    if len(c.undefined) == len(c.table) - 1:
        return _undefined_narrative(c) + k_note
    t = c.table.set_index("setting")
    o, ab, wh = t.iloc[0], t.iloc[2], t.iloc[3]
    abn = escape(t.index[2])

    def f(x, fmt=".3f"):
        return fixed_text(x, fmt)
    parts = [
        f"On this set, {abn} moves APCS from {f(o['apcs'])} to {f(ab['apcs'])} and PR/d from "
        f"{f(o['participation_ratio_fraction'], '.1%')} to {f(ab['participation_ratio_fraction'], '.1%')}; whitening "
        f"gives APCS {f(wh['apcs'])} and PR/d {f(wh['participation_ratio_fraction'], '.1%')} (by construction every "
        "direction then has the same variance, so the isotropy metrics say nothing more about quality).",
        f"Uniformity goes from {f(o['uniformity'])} to {f(ab['uniformity'])} ({abn}) and {f(wh['uniformity'])} "
        f"(whitened); the k-occurrence skewness from {f(o['k_occurrence_skewness'], '.2f')} to "
        f"{f(ab['k_occurrence_skewness'], '.2f')} and {f(wh['k_occurrence_skewness'], '.2f')}.",
    ]
    if np.isfinite(ab["neighbour_overlap"]) and np.isfinite(wh["neighbour_overlap"]):
        cost = (f"The price is the neighbourhoods: {ab['neighbour_overlap']:.0%} of each point's {c.k} nearest "
                f"neighbours survive {abn}, {wh['neighbour_overlap']:.0%} survive whitening")
    else:
        kept = [f"{x['neighbour_overlap']:.0%} survive {what}" if np.isfinite(x["neighbour_overlap"]) else
                f"after {what} they cannot be compared (the neighbour lists are ties)"
                for x, what in ((ab, abn), (wh, "whitening"))]
        cost = f"The price is the neighbourhoods: of each point's {c.k} nearest neighbours, " + ", ".join(kept)
    if "label_agreement" in t:
        cost += (f", and the share of neighbours with the same label goes from {f(o['label_agreement'], '.1%')} to "
                 f"{f(ab['label_agreement'], '.1%')} and {f(wh['label_agreement'], '.1%')}")
        if t["label_agreement"].notna().any():
            best = t["label_agreement"].idxmax()
            cost += (f". On this proxy the best setting is **{escape(best)}**" + (
                "; whitening amplifies low-variance (often noise) directions as much as the informative ones, "
                "which is why it can hurt neighbour quality even while it perfects the isotropy numbers."
                if wh["label_agreement"] < o["label_agreement"] else "."))
        else:
            cost += "."
    else:
        cost += ". Without labels the report cannot tell whether the changed neighbours are better or worse: " \
                "check a downstream task before adopting a correction."
    parts.append(cost)
    advice = ("All-but-the-top is the gentler correction (seed 000: it \"often works better than full "
              "whitening\"): it removes only the few dominant directions that frequency or popularity effects "
              "put into every vector.")
    if "label_agreement" in t and ab["label_agreement"] < t.iloc[1]["label_agreement"] - 0.02:
        advice += (f" Here, though, those top directions also carry the label structure: removing them costs "
                   f"{100 * (t.iloc[1]['label_agreement'] - ab['label_agreement']):.1f} points of same-label "
                   "neighbours against centring alone, so they are signal, not only a common direction.")
    parts.append(advice + " Whichever you adopt, fit the transform on the training set and apply it to queries "
                          "and index alike.")
    return "\n\n".join(parts) + k_note


def comparison_figure(c: corr.CorrectionComparison) -> plt.Figure:
    """Small multiples: each compared quantity as bars per setting."""
    cols = [col for col in corr.COLUMNS if col in c.table and col != "condition_number"]
    fig, axes = plt.subplots(1, len(cols), figsize=(WIDTH, 3.0))
    colors = [PALETTE["muted"], PALETTE["data"], PALETTE["accent"], PALETTE["reference"]]
    short = ["original", "centred", f"ABTT D={c.removed}", "whitened"]
    for ax, col in zip(np.atleast_1d(axes), cols):
        ax.bar(range(len(c.table)), c.table[col].fillna(0), color=colors[:len(c.table)])
        label, direction = corr.COLUMNS[col]
        ax.set_title(f"{label}\n({direction} is better)", fontsize=9)
        ax.set_xticks(range(len(c.table)), short, rotation=60, ha="right", fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: CorrectionReport) -> None:
    show_markdown(narrative(rep.comparison, rep.k_requested))


def show_comparison(rep: CorrectionReport) -> None:
    c = rep.comparison
    hubness = (f"k-occurrence skewness and antihub share of the cosine {c.k}-NN graph (hubness chapter)"
               if c.sampling is None else f"the {c.k}-NN {c.sampling} (the antihub share needs every point's "
                                          "N_k and is not estimated)")
    show_table(display_table(c),
               caption=(f"{c.subsample} " if c.subsample else "")  # a caption is plain text: show_table escapes it
               + f"Each setting: APCS, PR/d and κ (isotropy chapter), uniformity (t = 2, over all pairs unless "
                       f"a note below says sampled), {hubness}, the share of the original k-NN lists kept, and the "
                       "share of neighbours with the same label (when labels exist)."
                       + (" —: undefined (no variance left)." if c.undefined else ""),
               label="tbl-correction")
    if len(c.undefined) == len(c.table) - 1:
        show_markdown("No figure: no correction leaves anything to measure on this set.")
        return
    show_figure(comparison_figure(c),
                caption="The compared quantities per setting (ABTT = all-but-the-top). Isotropy and uniformity improve "
                        "by construction; the last panels show whether neighbourhoods keep their meaning."
                        + (" Undefined values are drawn as empty bars." if c.table.isna().any().any() else ""),
                label="fig-correction")


def recorded_text(metrics: dict) -> str:
    """Which numbers the chapter records (the comparison table's corrected rows, not shown again) and the notes of
    those that are undefined or sampled (markdown)."""
    names = sorted({name.rsplit("_after_", 1)[0] for name in metrics})
    suffixes = sorted({name.rsplit("_after_", 1)[1] for name in metrics})
    text = (f"The all-but-the-top and whitened rows of the comparison table are recorded in `metrics.json` as "
            f"{len(metrics)} what-if numbers, `<column>_after_<{'|'.join(suffixes)}>` for "
            + ", ".join(f"`{n}`" for n in names) + ", with the values shown there.")
    notes = [f"- {escape(m.label)}: {escape(m.note)}" for m in metrics.values() if m.note]
    return text + ("\n\n" + "\n".join(notes) if notes else "")


def show_metrics(rep: CorrectionReport) -> None:
    show_markdown(recorded_text(rep.comparison.metrics))


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

CHAPTER = ChapterSpec(
    name="correction", title="Anisotropy correction", order=50,
    description="Centring, all-but-the-top and whitening: isotropy, uniformity and hubness before and after, and what they cost the neighbourhoods (seed 000 §217.0.9, §217.0.12).",
    requires=("vectors",),
    options=(K,), graph=True, precheck=precheck, kind="diagnostic",
)
