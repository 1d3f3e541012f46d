"""The Clustering alignment chapter: do the natural groups of the space match the labels? k-means
against the classes, the silhouettes, a t-SNE map, the contingency, the sweep over k and the
clustering within each kind of entity (computed in :mod:`embeval_report.metrics.clustering`).

It reads the node-classification chapter's recorded probe (:func:`recorded_probe`) to set
"decodable" against "clustered".
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped, InputError
from ..io import kind_column
from ..metrics import clustering as cl
from ..present.format import metric_text
from ..present.display import definitions_markdown, escape, show_definitions, show_figure, show_markdown, show_table
from ..present.display import metrics_table as metric_rows
from ..present.escape import mathtext
from ..present.plotting import PALETTE, WIDTH, share_heatmap
from .recorder import read_results
from ..context import current
from ..metrics.scoring import Aggregate, TaskScorer
from .labelled import LABEL_COLUMN, LabelInputs, exclusion_text, label_inputs, precheck
from .declaration import INF, ChapterSpec, Option

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["ClusteringReport", "compute", "precheck", "recorded_probe"]


@dataclass(frozen=True)
class ClusteringReport:
    """Everything the chapter shows."""

    result: cl.ClusteringResult
    kind_column: str | None
    kinds: np.ndarray | None          # the kind of every row of the set (marker shapes)
    by_group: pd.DataFrame | None     # k-means within each value of ``kind_column``
    kind_agreement: dict | None       # ARI / NMI of the clusters with ``kind_column``
    projection: cl.Projection
    probe: dict | None                # the node-classification chapter's recorded probe


def recorded_probe(results_dir) -> dict | None:
    """The node-classification chapter's recorded probe accuracy and majority baseline, if it ran."""
    rec = read_results(results_dir).get("node_classification") if results_dir else None
    try:
        return {"accuracy": rec["metrics"]["accuracy"]["value"],
                "majority": rec["info"]["baselines"]["majority"]["accuracy"]}
    except (TypeError, KeyError):
        return None


def clustering_plan(inputs: LabelInputs, settings) -> cl.ClusterPlan:
    """k-means' k, seed and settings and the silhouette sample, from the labels and the seed."""
    try:
        return cl.cluster_plan(inputs.labels, inputs.ids, silhouette_sample=settings.option("silhouette_sample"),
                               seed=settings.seed)
    except InputError as e:
        raise ChapterSkipped(str(e).split(": ", 1)[-1]) from None


def _weighted(metric: str):
    return partial(cl.partition_boot, metric=metric)  # bound to each table once by the paired bootstrap


#: k-means against the labels, scored per entity: its cluster and its silhouettes
SCORER = TaskScorer(
    unit="entities", key="entity", columns=("label", "y", "cluster", "silhouette", "label_silhouette"),
    aggregates=(Aggregate("ari", fn=cl.partition_ari, boot=_weighted("ari"), boot_exact=True),
                Aggregate("nmi", fn=cl.partition_nmi, boot=_weighted("nmi"), boot_exact=True),
                Aggregate("ami", fn=cl.partition_ami, boot=_weighted("ami"), boot_exact=True),
                Aggregate("silhouette", mean_of="silhouette", task=False),
                Aggregate("label_silhouette", mean_of="label_silhouette", task=False)),
    inputs=label_inputs, plan=clustering_plan,
    score=lambda X, inputs, plan: cl.cluster_units(X, plan, device=current().device),
    outcomes=lambda X, inputs, plan: cl.cluster_units(X, plan, device=current().device, silhouettes=False))


def compute(ctx: ChapterContext) -> ClusteringReport:
    """k-means against the labels (and within each kind), the t-SNE map; record every number."""
    es, meta = ctx.es, ctx.es.metadata
    inputs = SCORER.inputs(es, ctx.side, ctx.settings)
    plan = SCORER.plan(inputs, ctx.settings)
    # the t-SNE map is drawn on another core while k-means runs (the same coordinates)
    projection = cl.project_aside(es.vectors, plan.labels, method="tsne", seed=ctx.seed, device=ctx.device)
    units = SCORER.units(es.vectors, inputs, plan)
    labels, sample = inputs.labels, ctx.option("silhouette_sample")
    result = cl.evaluate_clustering(es.vectors, labels, level=ctx.level, device=ctx.device, column=LABEL_COLUMN,
                                    plan=plan, units=units)
    col = kind_column(meta)
    kinds = meta[col].to_numpy() if col else None
    by_kind = (cl.clustering_by_group(es.vectors, meta[LABEL_COLUMN], kinds, column=col, silhouette_sample=sample,
                                      seed=ctx.seed, device=ctx.device, label_column=LABEL_COLUMN) if col else None)
    agreement = cl.partition_agreement(result.clusters, kinds[result.labels.rows]) if col else None
    projection = projection()
    ctx.rec.add(*result.metrics.values())
    ctx.rec.scored(SCORER, units, plan)
    ctx.rec.note(**clustering_record(result, by_kind, col, agreement),
                 projection={"method": projection.method, "points": int(len(projection.positions))})
    return ClusteringReport(result, col, kinds, by_kind, agreement, projection, recorded_probe(ctx.rec.results_dir))


def contingency_order(r: cl.ClusteringResult) -> tuple[np.ndarray, list[str]]:
    """Clusters ordered by the class they are matched to, and their column names."""
    order = np.argsort(np.where(r.matching >= 0, r.matching, r.k + np.arange(r.k)), kind="stable")
    cols = [f"c{j} ({r.labels.classes[r.matching[j]]})" if r.matching[j] >= 0 else f"c{j}" for j in order]
    return order, cols


def contingency_table(r: cl.ClusteringResult) -> pd.DataFrame:
    """Classes x clusters counts, clusters ordered by the class they are matched to."""
    order, cols = contingency_order(r)
    df = pd.DataFrame(r.contingency[:, order], columns=cols)
    df.insert(0, "class", list(r.labels.classes))
    df["entities"] = r.contingency.sum(1)
    return df


def clustering_record(r: cl.ClusteringResult, by_group: pd.DataFrame | None = None, column: str | None = None,
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


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _names(items, limit: int = 3) -> str:
    items = list(items)[:limit]
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1] if items else ""


def alignment_reading(ari: float) -> str:
    """Words for an ARI (not a verdict: the seed gives no bands)."""
    return ("reproduce the classes almost exactly" if ari >= 0.9 else "largely match the classes" if ari >= 0.6
            else "partly match the classes" if ari >= 0.3 else "match the classes only weakly" if ari >= 0.1
            else "do not match the classes")


def silhouette_reading(s: float) -> str:
    """Kaufman & Rousseeuw's (1990) reading of an average silhouette (:data:`~embeval_report.metrics.clustering.SILHOUETTE_READINGS`)."""
    for edge, text in cl.SILHOUETTE_READINGS:
        if s > edge:
            return text
    return cl.SILHOUETTE_READINGS[-1][1]


#: the silhouette below which a space has no substantial structure
NO_STRUCTURE = cl.SILHOUETTE_READINGS[-2][0]


def silhouette_readings_text() -> str:
    """The readings of :data:`~embeval_report.metrics.clustering.SILHOUETTE_READINGS` in words."""
    edges = [e for e, _ in cl.SILHOUETTE_READINGS]
    words = [w for _, w in cl.SILHOUETTE_READINGS]
    parts = [f"above {edges[0]:g} {words[0]}"]
    parts += [f"{edges[i]:g}–{edges[i - 1]:g} {words[i]}" for i in range(1, len(edges) - 1)]
    parts.append(f"{edges[-2]:g} or below {words[-1]}")
    return "Kaufman & Rousseeuw's (1990) reading of a mean silhouette: " + ", ".join(parts) + "."


def _mixing_paragraph(r: cl.ClusteringResult) -> str:
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


def _separation_paragraph(r: cl.ClusteringResult) -> str:
    v, m, ls = r.values, r.metrics, r.labels
    n_s = len(r.sample)
    where = f"all {ls.n:,} entities" if n_s == ls.n else f"a seeded sample of {n_s:,} entities"
    sil, lsil = v["silhouette"], v["label_silhouette"]
    if not (math.isfinite(sil) and math.isfinite(lsil)):
        which = (("silhouette", "the k-means clusters"), ("label_silhouette", "the classes"))
        text = f"**Separation.** Over {where}, the mean cosine silhouette "
        notes: dict = {}  # the same reason for both is said once
        for name, w in which:
            if not math.isfinite(v[name]):
                notes.setdefault(m[name].note or "undefined", []).append(w)
        text += "; ".join(f"of {' and of '.join(ws)} is {note}" for note, ws in notes.items()) + "."
        for name, w in which:
            if math.isfinite(v[name]):
                text += f" That of {w} is {metric_text(m[name], '.3f')} (*{silhouette_reading(v[name])}*)."
        return text
    text = (f"**Separation.** Computed over {where}, the mean cosine silhouette of the k-means clusters is "
            f"{metric_text(m['silhouette'], '.3f')}, *{silhouette_reading(sil)}* in Kaufman & Rousseeuw's reading; the "
            f"classes themselves, "
            f"taken as clusters, have silhouette {metric_text(m['label_silhouette'], '.3f')} (*{silhouette_reading(lsil)}*).")
    if sil - lsil > 0.15:
        text += (" The space has clearer groups than the classes: k-means finds structure, but it is organised by "
                 "something other than the label.")
    elif lsil >= NO_STRUCTURE:
        text += " The classes are themselves compact, well-separated groups."
    return text


def _sweep_paragraph(r: cl.ClusteringResult) -> str | None:
    sw, v = r.sweep, r.values
    if sw is None or len(sw) <= 1:
        return None
    k_ari = int(sw.loc[sw["ari"].idxmax(), "k"])
    k_sil = int(sw.loc[sw["silhouette"].idxmax(), "k"]) if sw["silhouette"].notna().any() else None
    best_ari = float(sw["ari"].max())
    text = (f"**Number of clusters.** Over k = {int(sw['k'].min())}…{int(sw['k'].max())} (the seed's range "
            f"around the {r.k} classes), ARI peaks at k = {k_ari} ({best_ari:.3f})")
    text += f" and the silhouette at k = {k_sil}" if k_sil is not None else ""
    if k_sil is not None and sw["silhouette"].max() <= NO_STRUCTURE:
        text += (f". No k gives substantial structure (silhouette ≤ {NO_STRUCTURE:g} throughout), so the space has no "
                 "natural cluster count to compare with the classes.")
    elif k_sil is not None and k_sil != r.k:
        text += (". By the silhouette, the space's own cluster count is not the number of classes: classes split "
                 "into sub-groups or share one region.")
    elif k_ari != r.k:
        text += (f". The silhouette prefers k = {r.k}; {'more' if k_ari > r.k else 'fewer'} clusters raise ARI only "
                 + ("slightly" if best_ari - v["ari"] < 0.05 else "somewhat") + f" (from {v['ari']:.3f}).")
    else:
        text += f": both agree with the {r.k} classes."
    return text


def _probe_paragraph(v: dict, probe_accuracy: float, probe_majority: float | None) -> str:
    decodable = probe_majority is None or probe_accuracy - probe_majority > 0.5 * (1 - probe_majority)
    clustered = v["ari"] >= 0.5
    reading = ("the label is both linearly decodable and the main cluster structure." if decodable and clustered
               else "the label is linearly decodable but is not what organises the space: a classifier trained "
                    "on labels will find it, nearest-neighbour or clustering-based uses will mix classes."
               if decodable else
               "the clusters follow the label although the probe struggles; unusual, check the label column."
               if clustered else "the label is neither clearly decodable nor clustered.")
    return (f"**Decodable versus clustered.** The node-classification probe reads the label with accuracy "
            f"{probe_accuracy:.3f}" + (f" (majority class {probe_majority:.3f})" if probe_majority is not None
                                       else "") + f" while k-means recovers ARI {v['ari']:.3f}: " + reading)


def _by_group_paragraph(by_group: pd.DataFrame) -> str | None:
    if by_group is None or "ARI" not in by_group or by_group["ARI"].notna().sum() < 1:
        return None
    t = by_group[by_group["ARI"].notna()]
    gcol = by_group.columns[0]
    lsil = t["silhouette (labels)"]
    text = f"**By {escape(gcol)}** (k-means within each): " + "; ".join(
        f"{escape(x[gcol])} ARI {x['ARI']:.3f}, NMI {x['NMI']:.3f}, silhouette of the classes "
        + (f"{s:.3f}" if math.isfinite(s) else "undefined") for (_, x), s in zip(t.iterrows(), lsil)) + "."
    hi, lo = t.loc[t["ARI"].idxmax()], t.loc[t["ARI"].idxmin()]
    if hi["ARI"] - lo["ARI"] > 0.2:
        text += (f" Among {escape(hi[gcol])} vectors the clusters {alignment_reading(hi['ARI'])}; among "
                 f"{escape(lo[gcol])} vectors they {alignment_reading(lo['ARI'])}.")
    return text


def clustering_narrative(r: cl.ClusteringResult, *, probe_accuracy: float | None = None,
                         probe_majority: float | None = None, kind_agreement: dict | None = None,
                         kind_column: str | None = None, by_group: pd.DataFrame | None = None) -> str:
    """Markdown paragraphs that say what this set's clustering numbers mean."""
    v, m, ls = r.values, r.metrics, r.labels
    col, what = escape(ls.column), r.info.get("interval_label", "seed range")
    parts = [
        f"**The k-means clusters {alignment_reading(v['ari'])}.** k-means with k = {r.k} (the number of `{col}` "
        f"classes) on the L2-normalised vectors of {ls.n:,} entities gives ARI {metric_text(m['ari'], '.3f', what)}, "
        f"NMI {metric_text(m['nmi'], '.3f', what)} and AMI {metric_text(m['ami'], '.3f', what)}"
        + (f" (the {100 * r.level:.0f} % range over {r.info['interval_over']})"
           if m["ari"].ci_low is not None else "") + ". A random partition has ARI 0 in expectation and a perfect one "
        "1; NMI is not corrected for chance (it is above 0 even for a random partition), AMI is. Matching each "
        f"cluster to one class, {v['cluster_accuracy']:.1%} of the entities sit in their class's cluster.",
        _separation_paragraph(r), _mixing_paragraph(r)]
    if kind_agreement is not None and kind_column and np.isfinite(kind_agreement.get("ari", np.nan)):
        ka = kind_agreement["ari"]
        parts.append(
            f"**Clusters and `{escape(kind_column)}`.** The same clusters agree with `{escape(kind_column)}` at ARI "
            f"{ka:.3f} (NMI {kind_agreement['nmi']:.3f})"
            + (f", more than with `{col}`: the strongest grouping in the space is the kind of entity, so clustering "
               "all entities together mostly separates kinds. The per-kind table below is the fairer test."
               if ka > v["ari"] else "; the kind of entity does not dominate the clusters."))
    parts.append(_sweep_paragraph(r))
    if probe_accuracy is not None:
        parts.append(_probe_paragraph(v, probe_accuracy, probe_majority))
    parts += [_by_group_paragraph(by_group), exclusion_text(ls)]
    return "\n\n".join(p for p in parts if p)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

_MARKERS = ("o", "^", "s", "D")


def class_colors(n: int) -> list:
    """Colours for ``n`` classes (largest first): tab10 / tab20, grey beyond 20."""
    base = plt.get_cmap("tab10" if n <= 10 else "tab20").colors
    return [base[i] if i < min(n, 19 if n > 20 else 20) else (0.6, 0.6, 0.6) for i in range(n)]


def contingency_figure(r: cl.ClusteringResult) -> plt.Figure:
    """Classes x clusters, each row as shares of the class; clusters ordered by their matched class."""
    order, cols = contingency_order(r)
    C = r.labels.n_classes
    size = min(WIDTH * 0.75, 2.2 + 0.42 * C)
    fig, ax = plt.subplots(figsize=(size + 1.6, size))
    im = share_heatmap(ax, r.contingency[:, order], r.labels.classes, cols, annotate=C <= 20)
    ax.set(xlabel="k-means cluster (matched class)", ylabel="Class", title="Share of each class in each cluster")
    fig.colorbar(im, ax=ax, shrink=0.8, label="share of the class")
    return fig


def projection_figure(r: cl.ClusteringResult, proj: cl.Projection, groups=None) -> plt.Figure:
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
    clu = r.clusters[pos]
    for ax, c in ((a, colors[ls.codes[pos]]), (b, colors[matched[clu]])):
        for name, marker in (zip(sorted(set(g)), _MARKERS) if g is not None else [(None, "o")]):
            sel = np.ones(len(pos), bool) if name is None else g == name
            ax.scatter(xy[sel, 0], xy[sel, 1], c=c[sel], marker=marker, **kw)
    for j in range(r.k):
        sel = clu == j
        if sel.any():
            cx, cy = np.median(xy[sel], axis=0)
            b.text(cx, cy, f"c{j}", fontsize=8, fontweight="bold", ha="center", va="center",
                   bbox=dict(boxstyle="round,pad=0.15", fc="white", ec=colors[matched[j]], alpha=0.85))
    if proj.method == "pca":
        ex = proj.explained
        xl, yl = f"PC 1 ({ex[0]:.0%} of variance)", f"PC 2 ({ex[1]:.0%})"
    else:
        xl, yl = "t-SNE 1", "t-SNE 2"
    a.set(xlabel=xl, ylabel=yl, title=f"Coloured by {mathtext(ls.column)}")
    b.set(xlabel=xl, title=f"Coloured by k-means cluster (k = {r.k})")
    shown = min(ls.n_classes, 19 if ls.n_classes > 20 else 20)
    handles = [plt.Line2D([], [], ls="", marker="o", ms=6, color=colors[i], label=mathtext(ls.classes[i]))
               for i in range(shown)]
    if ls.n_classes > shown:
        handles.append(plt.Line2D([], [], ls="", marker="o", ms=6, color=(0.6, 0.6, 0.6),
                                  label=f"{ls.n_classes - shown} smaller classes"))
    if g is not None:
        handles += [plt.Line2D([], [], ls="", marker=mk, ms=6, color="#555", label=f"{mathtext(name)}")
                    for name, mk in zip(sorted(set(g)), _MARKERS)]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 8), fontsize=8, frameon=False)
    return fig


def sweep_figure(r: cl.ClusteringResult) -> plt.Figure:
    """Silhouette, ARI and NMI against k, with the number of classes marked (the seed's
    ``fig-clustering-metrics``)."""
    sw = r.sweep
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH, 3.3))
    for ax, key, title in zip(axes, ("silhouette", "ari", "nmi"),
                              ("Silhouette (cosine)", "Adjusted Rand index", "Normalized mutual information")):
        ax.plot(sw["k"], sw[key], "o-", color=PALETTE["data"], lw=2)
        ax.axvline(r.k, color=PALETTE["reference"], ls="--", alpha=0.8, label=f"classes: k = {r.k}")
        if key == "ari":
            ax.axhline(cl.SPECS["ari"].chance, color=PALETTE["muted"], ls=":", lw=1,
                       label=f"chance ({cl.SPECS['ari'].chance:g})")
        ax.set(xlabel="Number of clusters k", title=title)
        ax.set_xticks(list(sw["k"]))
        ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: ClusteringReport) -> None:
    probe = rep.probe or {}
    show_markdown(clustering_narrative(rep.result, probe_accuracy=probe.get("accuracy"),
                                       probe_majority=probe.get("majority"), kind_agreement=rep.kind_agreement,
                                       kind_column=rep.kind_column, by_group=rep.by_group))


def show_metrics(rep: ClusteringReport) -> None:
    r = rep.result
    m = r.metrics
    show_table(metric_rows(m),
               caption=f"Agreement of k-means (k = {r.k}, {r.algorithm}, n_init = {r.info['n_init']}) with "
                       f"the {r.labels.n_classes} classes over {r.n:,} entities, and the silhouettes. ARI/NMI/AMI "
                       f"interval: {m['ari'].ci_method or 'none'}. Silhouette interval: "
                       f"{m['silhouette'].ci_method or m['label_silhouette'].ci_method or 'none'}. "
                       "No seed threshold table applies, so no verdict.",
               label="tbl-cl-metrics")
    show_definitions("**Definitions.** $n_{ij}$: entities of class $i$ in cluster $j$; $a_i$, $b_j$: class and cluster sizes. "
                  "ARI is 0 in expectation when the clusters are a random partition with the same sizes and 1 when they "
                  "equal the classes; it can be negative. $I$ is mutual information and $H$ entropy. In the silhouette, "
                  "$a(i)$ is the mean cosine distance of entity $i$ to the rest of its cluster and $b(i)$ the smallest "
                  "mean distance to another cluster. " + silhouette_readings_text() + "\n\n" + definitions_markdown(m))


def show_projection(rep: ClusteringReport) -> None:
    p = rep.projection
    show_figure(projection_figure(rep.result, p, rep.kinds),
                caption=f"t-SNE of {len(p.positions):,} sampled entities"
                        + (f" ({p.protocol})" if p.protocol else "") + ". Left: coloured by class. Right: coloured "
                        "by k-means cluster, each cluster in the colour of the class it is matched to (one-to-one, most "
                        "entities in common), its number at its median position"
                        + (f"; marker shape: {rep.kind_column}." if rep.kind_column else "."),
                label="fig-cl-projection")


def show_contingency(rep: ClusteringReport) -> None:
    r = rep.result
    show_figure(contingency_figure(r),
                caption="Share of each class (row) in each k-means cluster (column, named with its matched class).",
                label="fig-cl-contingency")
    show_table(contingency_table(r), caption="Entities of each class (row) in each k-means cluster (column).",
               label="tbl-cl-contingency")


def show_sweep(rep: ClusteringReport) -> None:
    r = rep.result
    if r.sweep is None or len(r.sweep) <= 1:
        show_markdown("Too few entities for a sweep over k.")
        return
    show_figure(sweep_figure(r),
                caption="Silhouette (cosine), ARI and NMI of k-means for k around the number of classes (dashed).",
                label="fig-cl-sweep")
    show_table(r.sweep, caption=f"k-means for each k ({r.info['sweep_method']}); silhouette on the same entities as "
                                "the headline.", label="tbl-cl-sweep")


def show_by_kind(rep: ClusteringReport) -> None:
    if rep.by_group is None:
        show_markdown("The metadata has no `kind`, `type` or `group` column with 2–4 values, so no breakdown is shown.")
        return
    show_table(rep.by_group, caption=f"k-means within each value of “{rep.kind_column}” (one seeded run; matched %: "
                                     "entities in their class's cluster).", label="tbl-cl-by-kind")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

SILHOUETTE_SAMPLE = Option("silhouette_sample", 10_000, "rows the cosine silhouette is computed on",
                           bounds=(1, INF))

CHAPTER = ChapterSpec(
    name="clustering", title="Clustering alignment", order=96,
    description="Do the natural groups match the labels? k-means with k = number of classes on unit vectors: ARI, NMI, AMI, cosine silhouette, t-SNE coloured by class and cluster, k sweep (seed 000 §218.4).",
    requires=("metadata.label",),
    options=(SILHOUETTE_SAMPLE,), scorer=SCORER,
)
