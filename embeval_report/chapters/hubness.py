"""The Hubness chapter: what the k-occurrence numbers mean, the hubs by id and by kind, retrieval
across kinds of entity, and CSLS / mutual proximity before and after (computed in
:mod:`embeval_report.metrics.hubness`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

from ..errors import ChapterSkipped
from ..io import KIND_COLUMNS, kind_column
from ..kernels.device import chunk_rows
from ..kernels.neighbours import fast_recall
from ..metrics import hubness as hub
from ..metrics import hubness_sampled as hs
from ..metrics.thresholds import SEVERITY
from ..present.display import callout, escape, show_figure, show_markdown, show_table, with_mark_note
from ..present.display import show_metrics as show_metric_table
from ..present.escape import mathtext
from ..present.format import fixed_text, interval, marked_value, metric_text, outside
from ..present.plotting import PALETTE, WIDTH
from .declaration import ChapterSpec, K
from .findings import Effect

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["HubnessReport", "KIND_COLUMNS", "SKEW_READING", "compute", "cross_display_table", "impact_callout", "k_occurrence_figure",
           "kind_column", "narrative", "precheck", "reduction_display_table", "reduction_figure", "sampled_narrative", "show_cross",
           "show_distribution", "show_hubs", "show_metrics", "show_reduction", "show_summary"]

#: reading of the skewness bands, as the seed's diagnose_hubness prints them
SKEW_READING = {"healthy": "low hubness", "concerning": "moderate hubness", "problematic": "severe hubness"}
SKEW_BANDS = hub.SPECS["k_occurrence_skewness"].bands


@dataclass(frozen=True)
class HubnessReport:
    """Everything the chapter shows."""

    result: hub.HubnessResult
    reduction: hub.ReductionEffect
    cross: hub.CrossHubness | None
    kind_column: str | None
    kinds: np.ndarray | None       # the kind of each row (``kind_column``), when there is one
    ids: np.ndarray
    metadata: pd.DataFrame | None
    k_requested: int               # the ``k`` option; ``result.k`` is smaller when the set has too few points
    sampled: hs.SampledSkewness | None = None  # sampled mode (``sample_size`` < n): the only number computed
    recall: tuple[float, int] | None = None    # --precision fast: recall of the graph against exact lists, queries


def _identical_directions(X, chunk: int | None = None) -> bool:
    """Whether every row points the way the first one does (all cosines 1): no nearest-neighbour list is
    defined. One pass over the rows, ``chunk`` at a time (default: a chunk of work of the memory budget; the
    runner's precheck of a memory-mapped set larger than the budget reads it block by block)."""
    norm = np.finfo(float).tiny

    def unit(x):
        x = np.asarray(x, float)
        return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), norm)
    chunk = chunk or chunk_rows(len(X), X.shape[1] * 8 * 2)  # the float64 rows and their unit copy
    u0 = unit(X[0])
    return all((unit(X[s:s + chunk]) @ u0).min() >= 1 - hub.TIE_TOLERANCE for s in range(0, len(X), chunk))


def precheck(es, side, settings) -> str | None:
    """Why hubness cannot be measured on this set: fewer than 3 vectors, or all pointing the same way."""
    if es.n < 3:
        return (f"hubness needs at least 3 vectors (each point's nearest neighbours among at least 2 others); "
                f"the set has {es.n}")
    if _identical_directions(es.vectors):
        return ("every vector points in the same direction (all pairwise cosines are 1), so nearest-neighbour "
                "lists are arbitrary ties and hubness is undefined")
    return None


def compute(ctx: ChapterContext) -> HubnessReport:
    """Measure the k-NN graph, the reductions and retrieval across kinds, and record every number."""
    es, X, meta = ctx.es, ctx.es.vectors, ctx.es.metadata
    requested = int(ctx.option("k"))
    k = hub.usable_k(requested, es.n)
    if ctx.sample_size is not None and 3 <= ctx.sample_size < es.n:
        return _compute_sampled(ctx, k, requested)
    result = hub.measure_hubness(X, k, level=ctx.level, seed=ctx.seed, device=ctx.device)
    if result.all_ties:
        raise ChapterSkipped(result.metrics["k_occurrence_skewness"].note)
    labels = meta["label"].to_numpy() if es.has("metadata.label") else None
    reduction = hub.hubness_reduction_effect(X, result, labels=labels, level=ctx.level, seed=ctx.seed,
                                             device=ctx.device)
    kind_col = kind_column(meta)
    kinds = meta[kind_col].to_numpy() if kind_col else None
    cross = (hub.cross_kind_hubness(X, kinds, k, column=kind_col, level=ctx.level, seed=ctx.seed, device=ctx.device)
             if kind_col else None)
    ctx.rec.add(*result.metrics.values(), *hub.reduction_metrics(reduction))
    recall = fast_recall(X)
    ctx.rec.note(k=result.k, hub_size=result.hub_size, metric="cosine",
                 **({"fast_precision_recall": recall[0], "fast_precision_queries": recall[1]} if recall else {}),
                 **({"k_requested": requested} if k != requested else {}),
                 **{key: v for key, v in result.info.items() if key not in ("level", "device", "metric")},
                 max_k_occurrence=result.values["max_k_occurrence"], top1pct_slot_share=result.top_share,
                 centroid_spearman=result.centroid_spearman,
                 reductions=reduction.table.to_dict(orient="records"),
                 cross_kind=None if cross is None else cross.table.to_dict(orient="records"))
    return HubnessReport(result, reduction, cross, kind_col, kinds, np.asarray(es.ids, dtype=object), meta, requested,
                         recall=recall)


def _compute_sampled(ctx: ChapterContext, k: int, requested: int) -> HubnessReport:
    """Sampled mode: the skewness from ``sample_size`` exact query lists against the full set, with its error."""
    s = hs.sampled_skewness(ctx.es.vectors, k, int(ctx.sample_size), level=ctx.level, seed=ctx.seed,
                            device=ctx.device)
    metric = hub.SPECS["k_occurrence_skewness"].record(s.value, s.ci, ci_method=s.method, note=s.method)
    ctx.rec.add(metric)
    ctx.rec.note(k=k, metric="cosine", sampled_queries=s.m, **({"k_requested": requested} if k != requested else {}))
    return HubnessReport(None, None, None, None, None, np.asarray(ctx.es.ids, dtype=object), ctx.es.metadata,
                         requested, sampled=s)


def _sampled_note(rep: HubnessReport) -> bool:
    """In sampled mode, say why a graph-wide section is absent; True when it was said."""
    if rep.sampled is None:
        return False
    show_markdown(f"Not computed in sampled mode (`--sample-size {rep.sampled.m}`): this section needs every point's "
                  f"k-occurrence, that is the full {rep.sampled.n:,} × {rep.sampled.n:,} neighbour search. Run without "
                  "`--sample-size` for it.")
    return True


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def _ci_column(t: pd.DataFrame) -> list[str]:
    return [interval(lo, hi, ".2f", sep=" – ") for lo, hi in zip(t["skew_ci_low"], t["skew_ci_high"])]


def _skew_column(t: pd.DataFrame) -> list:
    """The skewness, marked where its interval excludes it (the number itself where it does not)."""
    return [marked_value(v, lo, hi, text=f"{v:.4g}") if outside(v, lo, hi) else v
            for v, lo, hi in zip(t["skewness"], t["skew_ci_low"], t["skew_ci_high"])]


def reduction_display_table(effect: hub.ReductionEffect) -> pd.DataFrame:
    """The before/after table as the report shows it."""
    t = effect.table
    out = pd.DataFrame({
        "setting": t["setting"], "skewness": _skew_column(t), "95 % CI": _ci_column(t), "verdict": t["verdict"],
        "Robin Hood": t["robin_hood_index"], "antihubs %": 100 * t["antihub_occurrence"],
        "max N_k": t["max_k_occurrence"], "lists kept %": 100 * t["neighbour_overlap"]})
    if "label_agreement" in t:
        out["same label %"] = 100 * t["label_agreement"]
    return out


def cross_display_table(cross: hub.CrossHubness) -> pd.DataFrame:
    """The query -> index table as the report shows it."""
    t = cross.table
    return pd.DataFrame({
        "queries → index": [f"{a} ({na:,}) → {b} ({nb:,})" for a, b, na, nb
                            in zip(t["queries"], t["index"], t["n queries"], t["n index"])],
        "mean N_k": t["mean N_k"], "skewness": _skew_column(t), "95 % CI": _ci_column(t),
        "verdict": t["verdict"], "Robin Hood": t["robin_hood_index"],
        "never retrieved %": 100 * t["antihub_occurrence"], "top hub reach %": 100 * t["top_hub_reach"],
        "ρ(N_k, centrality)": t["direction_spearman"]})


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _freq_text(metadata: pd.DataFrame | None, row: int, among) -> str:
    """", frequency F, rank R of N" for ``row`` among the rows ``among`` (empty without a frequency column)."""
    if metadata is None or "frequency" not in metadata:
        return ""
    f = pd.to_numeric(metadata["frequency"], errors="coerce").to_numpy(float)
    if not np.isfinite(f[row]):
        return ""
    g = f[among]
    rank = int((g[np.isfinite(g)] > f[row]).sum()) + 1
    return f", frequency {f[row]:,.0f}, rank {rank:,} of {len(g):,} by frequency"


def _ids_text(ids, rows, limit: int = 3) -> str:
    return ", ".join(f"**{escape(ids[i])}**" for i in rows[:limit])


def impact_callout(r: hub.HubnessResult, cross: hub.CrossHubness | None = None) -> dict:
    """Arguments ``kind``, ``text``, ``title`` of :func:`embeval_report.present.display.callout`: the business
    reading of seed 000 §217.1.2 (the numbers are in the narrative above it)."""
    text = ("In a recommender, hubs are the items shown to everyone regardless of taste, and antihubs are never "
            "shown however relevant they are: **popularity bias**, **long-tail invisibility** and lost discovery "
            "(seed 000 §217.1.2). ")
    severity = r.metrics["k_occurrence_skewness"].verdict
    if cross is not None and len(cross.table):  # the numbers are in the narrative's "Retrieval across kinds"
        w = cross.table.sort_values("skewness", ascending=False).iloc[0]
        text += (f"The share of {escape(w['index'])}s never retrieved and the reach of the most retrieved ones are "
                 "given above (retrieval across kinds).")
        severity = max(severity, w["verdict"], key=SEVERITY.__getitem__)
    else:  # and in its "Concentration" paragraph
        text += "The antihub share and the slots the most listed points fill are given above (concentration)."
    kind = {"problematic": "danger", "concerning": "warning"}.get(severity, "success")
    title = {"danger": "Hubness will show up as popularity bias", "warning": "Some hubness: watch for popularity bias",
             "success": "Little hubness"}[kind]
    return dict(kind=kind, title=title, text=text)


def _reduction_paragraph(red: hub.ReductionEffect) -> str:
    t = red.table
    orig, rest = t.iloc[0], t.iloc[1:]
    has_labels = "label_agreement" in t

    def row_text(x):
        text = (f"{escape(x['setting'])} {fixed_text(x['skewness'])} (Robin Hood {x['robin_hood_index']:.3f}, antihubs "
                f"{x['antihub_occurrence']:.1%}, {x['neighbour_overlap']:.0%} of each neighbour list kept")
        if has_labels and pd.notna(x["label_agreement"]):
            text += f", same-label neighbours {x['label_agreement']:.1%}"
        return text + ")"
    text = (f"**Reducing hubness.** Re-scoring all pairs and recomputing the neighbour lists moves the skewness "
            f"from {fixed_text(orig['skewness'])} to " + "; ".join(row_text(x) for _, x in rest.iterrows()) + ".")
    if has_labels and pd.notna(orig["label_agreement"]):
        text += (f" Before, {orig['label_agreement']:.1%} of neighbours share their point's label; a reduction that "
                 "keeps that share removes hubs without losing meaningful neighbours.")
    low = SKEW_BANDS.healthy
    better = rest[rest["skewness"] < orig["skewness"]]
    if len(better):
        best = better.sort_values("skewness").iloc[0]
        text += " " + (f"{escape(best['setting'])} brings the skewness into the low band: consider it (or re-ranking "
                       "the top candidates with it) in front of nearest-neighbour retrieval." if best["skewness"] < low
                       else f"{escape(best['setting'])} helps most but does not reach the low band (< {low:g}).")
    worse = rest[rest["skewness"] > orig["skewness"]]
    for _, x in worse.iterrows():
        why = (" It models each point's similarities to all others as a normal distribution; where they are far "
               "from normal (bounded by 1 and skewed inside a narrow cone, or mixing kinds of entity) its scores "
               "misrank and create new hubs." if x["method"] == "mutual_proximity" else "")
        text += f" {escape(x['setting'])} makes hubness *worse* on this set (skewness {x['skewness']:.2f}).{why}"
    return text


def _k_sentence(r: hub.HubnessResult, requested: int | None) -> str:
    if requested is None or requested == r.k:
        return ""
    return (f" (The `k` option asks for {requested} neighbours, but a set of {r.n:,} vectors has only {r.n - 1} "
            f"others per point, and $N_k$ needs more than $k$ of them: $k = {r.k}$ is used throughout this chapter.)")


def narrative(r: hub.HubnessResult, ids=None, metadata: pd.DataFrame | None = None,
              reduction: hub.ReductionEffect | None = None, cross: hub.CrossHubness | None = None,
              k_requested: int | None = None) -> str:
    """Markdown paragraphs that say what this set's hubness numbers mean."""
    v, m, k = r.values, r.metrics, r.k
    ids = np.asarray(ids if ids is not None else [str(i) for i in range(r.n)], dtype=object)
    sk = m["k_occurrence_skewness"]
    if math.isfinite(v["k_occurrence_skewness"]):
        reading = SKEW_READING.get(sk.verdict, "hubness")
        skew_text = (f"Its skewness is {metric_text(sk, '.2f')}, in the seed's *{reading}* band ({SKEW_BANDS.text}).")
    else:
        reading = "no hubness"
        skew_text = (f"Every point is in exactly {k} lists, so its skewness is undefined (no spread): there are no "
                     "hubs and no antihubs.")
    parts = [
        f"**{reading[0].upper() + reading[1:]}.** Over all {r.n:,} vectors, each point's {k} nearest neighbours "
        f"(cosine, itself excluded) give the k-occurrence $N_{{{k}}}(x)$, the number of lists a point appears in; "
        f"its mean is {k} by construction. {skew_text} $N_{{{k}}}$ ranges from "
        f"{int(r.k_occurrence.min())} to {int(v['max_k_occurrence'])}: the most listed point is among the "
        f"{k} nearest neighbours of {v['max_k_occurrence'] / r.n:.1%} of the set." + _k_sentence(r, k_requested)]
    nh, na = r.info["n_hubs"], r.info["n_antihubs"]
    hub_ids = r.hubs
    parts.append(
        f"**Concentration.** The 1 % of points with the largest $N_{{{k}}}$ fill {r.top_share:.1%} of the "
        f"{r.n * k:,} neighbour slots (an even spread would give 1 %). {nh:,} points ({nh / r.n:.1%}) are hubs "
        f"($N_{{{k}}} \\ge {r.hub_size:g}k = {r.hub_size * k:g}$) and take "
        f"{metric_text(m['hub_occurrence'], '.1%')} of all slots. The Robin Hood index is "
        f"{metric_text(m['robin_hood_index'], '.3f')}: that share of the slots would have to move from over- to "
        f"under-listed points to list every point equally often; the Gini index of $N_{{{k}}}$ is "
        f"{metric_text(m['k_occurrence_gini'], '.3f')}. At the other end, {na:,} points "
        f"({metric_text(m['antihub_occurrence'], '.1%')}) are antihubs, in nobody's {k}-NN list. The seed's own rule "
        f"($N_{{{k}}} > k + 2\\,\\mathrm{{sd}} = {r.info['seed_hub_threshold']:.1f}$) marks "
        f"{r.info['n_hubs_2sd']:,} points ({v['hub_fraction_2sd']:.1%}) as hubs.")

    who = []
    rho = r.centroid_spearman
    if np.isfinite(rho):
        who.append(
            f"The Spearman correlation between $N_{{{k}}}$ and a point's cosine to the set's mean direction is "
            f"{rho:.2f}: " + (
                "hubs are the points closest to the centre of the data, the classic mechanism of hubness in high "
                "dimension (Radovanović et al. 2010)." if rho >= 0.3 else
                "hubs are only weakly tied to the global mean direction here; they are more likely central "
                "within local regions (clusters or kinds of entity) than to the whole set." if rho >= 0 else
                "the most listed points are *not* near the mean direction."))
    if len(hub_ids):
        who.insert(0, f"The strongest hubs are {_ids_text(ids, hub_ids)}.")
    col = kind_column(metadata)
    if col is not None and len(hub_ids):
        g = metadata[col].astype(object).fillna("(missing)").astype(str).to_numpy()
        comp = pd.Series(g[hub_ids]).value_counts()
        base = pd.Series(g).value_counts(normalize=True)
        who.append("By " + escape(col) + ", the hubs are " + ", ".join(
            f"{c} {escape(name)} ({c / len(hub_ids):.0%} of hubs vs {base.get(name, 0):.0%} of the set)"
            for name, c in comp.items()) + ".")
    if metadata is not None and "frequency" in metadata:
        assoc = []
        groups = ([(None, None)] if col is None else
                  [(name, np.flatnonzero(metadata[col].astype(object).fillna("(missing)").astype(str).to_numpy() == name))
                   for name in sorted(metadata[col].dropna().astype(str).unique())])
        for name, rows in groups:
            rho_f = hub.frequency_association(r.k_occurrence if rows is None else r.k_occurrence[rows], metadata, rows)
            if rho_f is not None:
                assoc.append((rho_f, f"{rho_f:.2f}" + ("" if name is None else f" among {escape(name)}s")))
        if assoc:
            who.append("Spearman ρ between $N_{" + str(k) + "}$ and the `frequency` column: "
                       + ", ".join(text for _, text in assoc)
                       + (" (near 0: being a hub is not explained by how often an entity occurs)."
                          if max(abs(x) for x, _ in assoc) < 0.2 else
                          "; where it is clearly positive, frequent entities are listed more often."))
    if who:
        parts.append("**Who the hubs are.** " + " ".join(who))

    if cross is not None and len(cross.table):
        worst = cross.table.sort_values("skewness", ascending=False).iloc[0]
        a, b = escape(worst["queries"]), escape(worst["index"])
        pair = (worst["queries"], worst["index"])
        top = cross.index_rows[pair][int(np.argmax(cross.k_occurrence[pair]))]
        parts.append(
            f"**Retrieval across kinds.** The lists above take neighbours from the whole set, all kinds together. "
            f"Retrieving {b}s for {a}s (each {a}'s {k} nearest {b}s, as a recommender does) gives skewness "
            f"{fixed_text(worst['skewness'])}: {worst['antihub_occurrence']:.1%} of {b}s are never retrieved for any of "
            f"the {int(worst['n queries']):,} {a}s, the top {b} (**{escape(ids[top])}**{_freq_text(metadata, top, cross.index_rows[pair])}) "
            f"is in the lists of {worst['top_hub_reach']:.1%} of them, and the 1 % most retrieved {b}s fill "
            f"{worst['top1pct_share']:.1%} of all slots."
            + (f" The {b}s retrieved most are those closest to the mean direction of the {a}s (Spearman ρ = "
               f"{worst['direction_spearman']:.2f} between $N_{{{k}}}$ and that cosine): where the {a}s crowd, "
               f"for example pulled together by popular {b}s, the {b}s nearest that direction are shown to everyone."
               if worst["direction_spearman"] >= 0.3 else ""))

    if reduction is not None and len(reduction.table) > 1:
        parts.append(_reduction_paragraph(reduction))
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _distribution(ax, nk, color, label, marker="o"):
    values, counts = np.unique(nk, return_counts=True)
    ax.plot(values, counts, marker=marker, ms=3.5, lw=0.8, color=color, label=label, alpha=0.9)


def _occurrence_axis(axis, top: float) -> None:
    """Symmetric-log N_k axis (0 shown) with plain-number ticks 0, 1, 2, 5, 10, 20, 50, ..."""
    ticks = [0] + [m * 10 ** e for e in range(0, 8) for m in (1, 2, 5) if m * 10 ** e <= max(top, 1) * 1.05]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FixedFormatter([f"{t:,}" for t in ticks]))
    axis.set_minor_locator(NullLocator())


def k_occurrence_figure(r: hub.HubnessResult, groups=None) -> plt.Figure:
    """Left: the N_k distribution on log axes with the mean k, the hub threshold and the seed's
    k + 2 sd rule. Right: N_k against the cosine to the mean direction (coloured by group)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.9))
    k = r.k
    _distribution(a, r.k_occurrence, PALETTE["data"], "points per value")
    a.axvline(k, color=PALETTE["muted"], ls="--", lw=1.1, label=f"mean = k = {k}")
    a.axvline(r.hub_size * k, color=PALETTE["reference"], ls="--", lw=1.1,
              label=f"hub threshold {r.hub_size:g}k = {r.hub_size * k:g}")
    a.axvline(r.info["seed_hub_threshold"], color=PALETTE["accent"], ls=":", lw=1.3,
              label=f"seed rule k + 2 sd = {r.info['seed_hub_threshold']:.1f}")
    a.set_xscale("symlog", linthresh=1.0)
    a.set_yscale("log")
    _occurrence_axis(a.xaxis, r.k_occurrence.max())
    a.set(xlabel=f"$N_{{{k}}}$: number of {k}-NN lists a point is in (symmetric log scale)",
          ylabel="Number of points (log scale)", xlim=(-0.2, None),
          title=f"k-occurrence distribution (skewness {fixed_text(r.values['k_occurrence_skewness'])})")
    a.legend(loc="lower left", fontsize=8.5)
    colors = [PALETTE["data"], PALETTE["reference"], PALETTE["accent"], "#7b4ea3", "#2b8a8a", PALETTE["muted"]]
    if groups is not None:
        g = pd.Series(np.asarray(groups, dtype=object)).fillna("(missing)").astype(str).to_numpy()
        for name, c in zip(sorted(set(g))[:len(colors)], colors):
            s = g == name
            b.scatter(r.centroid_cosine[s], r.k_occurrence[s], s=5, alpha=0.45, color=c, label=mathtext(name),
                      rasterized=True)
        b.legend(loc="upper left", fontsize=8.5, markerscale=2.5)
    else:
        b.scatter(r.centroid_cosine, r.k_occurrence, s=5, alpha=0.45, color=PALETTE["data"], rasterized=True)
    b.set_yscale("symlog", linthresh=1.0)
    _occurrence_axis(b.yaxis, r.k_occurrence.max())
    b.axhline(r.hub_size * k, color=PALETTE["reference"], ls="--", lw=1.1)
    b.set(xlabel="Cosine to the set's mean direction", ylabel=f"$N_{{{k}}}$ (symmetric log scale)",
          title=f"Hubs and the mean direction (Spearman ρ = {fixed_text(r.centroid_spearman)})")
    return fig


def reduction_figure(effect: hub.ReductionEffect, k: int) -> plt.Figure:
    """Left: share of points with N_k ≥ v before and after each reduction (log axes; a long flat tail
    is hubness). Right: Lorenz curves of N_k (share of neighbour slots held by the least-listed share
    of points)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.9))
    colors = [PALETTE["data"], PALETTE["reference"], PALETTE["accent"], "#7b4ea3"]
    markers = ["o", "s", "^", "D"]
    t = effect.table.set_index("setting")
    for (label, nk), c, mk in zip(effect.k_occurrence.items(), colors, markers):
        values, counts = np.unique(nk, return_counts=True)
        ccdf = np.cumsum(counts[::-1])[::-1] / len(nk)
        a.step(values, ccdf, where="post", color=c, lw=1.6,
               label=f"{label} (skew {fixed_text(t.loc[label, 'skewness'])})")
        x = np.sort(nk).astype(float)
        lor = np.concatenate([[0.0], np.cumsum(x) / x.sum()])
        b.plot(np.linspace(0, 1, len(lor)), lor, color=c, lw=1.6,
               label=f"{label} (Gini {t.loc[label, 'gini']:.2f})")
    a.axvline(k, color=PALETTE["muted"], ls="--", lw=1.0)
    a.set_xscale("symlog", linthresh=1.0)
    a.set_yscale("log")
    _occurrence_axis(a.xaxis, max(int(nk.max()) for nk in effect.k_occurrence.values()))
    n = len(next(iter(effect.k_occurrence.values())))
    a.set(xlabel=f"$v$ (symmetric log scale; dashed: k = {k})", ylabel=f"Share of points with $N_{{{k}}} \\geq v$ (log)",
          ylim=(0.5 / n, 1.3), xlim=(-0.2, None), title="k-occurrence before and after hubness reduction")
    a.legend(loc="lower left", fontsize=8)
    b.plot([0, 1], [0, 1], color=PALETTE["muted"], ls=":", lw=1.1, label="every point listed equally often")
    b.set(xlabel="Share of points (sorted by $N_k$, least listed first)", ylabel="Share of neighbour slots",
          xlim=(0, 1), ylim=(0, 1), title="Lorenz curve of the k-occurrence")
    b.legend(loc="upper left", fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def sampled_narrative(s: hs.SampledSkewness) -> str:
    """What the sampled estimate says, with its error and what is not estimated."""
    band = hub.SPECS["k_occurrence_skewness"].verdict(s.value, None)
    lo, hi = s.ci
    ci = (f"95 % interval {interval(lo, hi, '.2f', sep=' to ')}" if math.isfinite(lo)
          else "no interval (too few queries)")
    return (f"**Sampled mode.** The exact {s.k} nearest neighbours of {s.m:,} randomly chosen points (seeded) among "
            f"all {s.n:,} give a k-occurrence skewness of **{fixed_text(s.value)}** ({ci}; verdict "
            f"{band or 'none'}: {SKEW_READING.get(band, 'undefined')}). The estimate uses unbiased power sums of "
            f"$N_k$ from how often each point appears in the sampled lists; its interval is a jackknife over groups "
            f"of the sampled queries and narrows as the sample grows (roughly with m²/n). The other hubness measures "
            f"(Robin Hood, Gini, hubs and antihubs) need every point's $N_k$ and are not estimated from a sample.")


def show_summary(rep: HubnessReport) -> None:
    if rep.sampled is not None:
        show_markdown(sampled_narrative(rep.sampled))
        return
    show_markdown(narrative(rep.result, rep.ids, rep.metadata, rep.reduction, rep.cross, rep.k_requested))
    callout(**impact_callout(rep.result, rep.cross))


def show_metrics(rep: HubnessReport) -> None:
    if rep.sampled is not None:
        s = rep.sampled
        show_metric_table({"k_occurrence_skewness": hub.SPECS["k_occurrence_skewness"].record(s.value, s.ci,
                                                                                              ci_method=s.method)},
                          caption=f"Hubness estimated from {s.m:,} of {s.n:,} queries. Verdict: the "
                                  f"{SKEW_BANDS.table}, {SKEW_BANDS.text}. Interval: {s.method}.",
                          label="tbl-hubness-metrics")
        return
    r = rep.result
    show_metric_table(
        r.metrics,
        caption=f"Hubness of the cosine {r.k}-NN graph over all {r.n:,} vectors. Verdict: the {SKEW_BANDS.table}, "
                f"{SKEW_BANDS.text}. " + (r.metrics["k_occurrence_skewness"].ci_method or "No CI.")
                + ("" if rep.recall is None else
                   f" Fast precision: the lists come from bfloat16 candidates re-ranked exactly; they hold "
                   f"{rep.recall[0]:.2%} of the exact {r.k} nearest neighbours of {rep.recall[1]:,} seeded queries."),
        label="tbl-hubness-metrics",
        definitions=f"**Definitions.** $N_k(x)$ is the number of points that have $x$ among their $k = {r.k}$ "
                    "nearest neighbours by cosine similarity (each point's own entry excluded); $\\bar N_k = k$. "
                    "Robin Hood, Gini, hub and antihub occurrence are 0 when every point is listed equally often.")


def show_distribution(rep: HubnessReport) -> None:
    if _sampled_note(rep):
        return
    r = rep.result
    show_figure(k_occurrence_figure(r, rep.kinds),
                caption=f"Left: number of points with each k-occurrence N_{r.k} (log axes; 0 = antihubs). "
                        f"Dashed: the mean k and the hub threshold {r.hub_size:g}k; dotted: the seed's k + 2 sd rule. "
                        "Right: N_k against each point's cosine to the set's mean direction"
                        + (f", coloured by {rep.kind_column}." if rep.kind_column else "."),
                label="fig-hubness-distribution")


def _hub_captions(r: hub.HubnessResult, shown: int) -> tuple[str, str]:
    """Captions of the hub and antihub tables (which show ``shown`` points whether or not that many are hubs)."""
    nh, na, k = r.info["n_hubs"], r.info["n_antihubs"], r.k
    hubs = (f"The {shown} strongest hubs (largest N_{k})." if nh >= shown else
            f"The {shown} most listed points (largest N_{k}); {nh:,} of them {'is a hub' if nh == 1 else 'are hubs'} "
            f"(N_k ≥ {r.hub_size:g}k).")
    ties = "ties: farthest from the mean direction first"
    anti = (f"{shown} of the {na:,} antihubs (smallest N_{k}; {ties})." if na >= shown else
            f"The {shown} least listed points (smallest N_{k}; {ties}); {na:,} of them "
            f"{'is an antihub' if na == 1 else 'are antihubs'} (N_k = 0).")
    return hubs, anti


def show_hubs(rep: HubnessReport) -> None:
    if _sampled_note(rep):
        return
    r = rep.result
    hubs = hub.hub_table(r, rep.ids, rep.metadata, which="hubs")
    cap_hubs, cap_anti = _hub_captions(r, len(hubs))
    show_table(hubs, caption=cap_hubs, label="tbl-hubness-hubs")
    show_table(hub.hub_table(r, rep.ids, rep.metadata, which="antihubs"), caption=cap_anti,
               label="tbl-hubness-antihubs")
    if rep.kind_column:
        show_table(hub.hubness_by_group(r, rep.kinds, column=rep.kind_column),
                   caption=f"Hubs and antihubs by {rep.kind_column} (hubs: N_k ≥ {r.hub_size:g}k).",
                   label="tbl-hubness-groups")


def show_cross(rep: HubnessReport) -> None:
    if _sampled_note(rep):
        return
    cross, k = rep.cross, rep.result.k
    if cross is None:
        show_markdown("Not applicable: the metadata has no `kind`, `type` or `group` column with 2–4 values.")
        return
    if not len(cross.table):
        show_markdown(f"Not applicable: fewer than two kinds in the “{escape(cross.column)}” column have more than "
                      f"k = {k} members.")
        return
    table = cross_display_table(cross)
    show_table(table, caption=with_mark_note(table, f"Hubness of {k}-NN retrieval between kinds ({cross.column} "
                                                    "column). " + cross.ci_method),
               label="tbl-hubness-cross")
    worst = cross.table.sort_values("skewness", ascending=False).iloc[0]
    pair = (worst["queries"], worst["index"])
    show_table(hub.cross_hub_table(cross, pair, rep.ids, rep.metadata),
               caption=f"The most retrieved {pair[1]}s when retrieving {pair[1]}s for {pair[0]}s.",
               label="tbl-hubness-cross-hubs")


def show_reduction(rep: HubnessReport) -> None:
    if _sampled_note(rep):
        return
    red, k = rep.reduction, rep.result.k
    table = reduction_display_table(red)
    show_table(table, caption=with_mark_note(table, f"Hubness of the {k}-NN graph before and after each reduction. "
                                                    "Skewness CI: " + (red.ci_method or "none.")),
               label="tbl-hubness-reduction")
    show_figure(reduction_figure(red, k),
                caption="Left: share of points listed at least v times, before and after each reduction (log axes). "
                        "Right: Lorenz curves: the share of all neighbour slots held by the least-listed share of "
                        "points; the farther below the diagonal, the more unequal.",
                label="fig-hubness-reduction")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

CHAPTER = ChapterSpec(
    name="hubness", title="Hubness", order=40,
    description="Do a few points crowd every nearest-neighbour list? k-occurrence skewness, Robin Hood and Gini indices, hub and antihub occurrence, the hubs by id, and CSLS / mutual proximity before and after (seed 000 §217.1).",
    requires=("vectors",),
    options=(K,), graph=True, graph_rescored=("mutual_proximity", "csls"), precheck=precheck,
    effects=(Effect("hubness", ("k_occurrence_skewness",), "A few points crowd most neighbour lists (hubness)",
                    "Use CSLS or mutual proximity for neighbour search (compared in this chapter):"),),
    kind="diagnostic", remedies=("centring",),
)
