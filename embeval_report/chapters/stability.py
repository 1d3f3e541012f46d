"""The Stability-across-runs chapter: the verdict, what the numbers mean, the run pairs, the
per-entity distribution and the least stable entities, the subsets, and how the runs matched
(computed in :mod:`embeval_report.metrics.stability`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped
from ..metrics import stability as st
from ..metrics.stability_subsets import Grouping, SubsetStability, subset_correlations
from ..metrics.thresholds import SEVERITY
from ..present.display import escape, show_figure, show_markdown, show_table, smaller_k_note
from ..present.display import show_metrics as show_metric_table
from ..present.escape import mathtext
from ..present.format import interval, metric_text
from ..present.plotting import PALETTE, WIDTH
from ..stats import BCA_MAX, MEAN_CI_RESAMPLES, HypothesisTest
from .declaration import ChapterSpec, K
from .findings import ChapterResults, Finding, test_text

if TYPE_CHECKING:
    from .setup import ChapterContext

BANDS = st.CORRELATION_BANDS


@dataclass(frozen=True)
class StabilityReport:
    """Everything the chapter shows."""

    inputs: st.RunInputs
    result: st.RunStabilityResult
    groupings: list
    subsets: SubsetStability
    freq: dict | None
    k_requested: int
    metadata: pd.DataFrame | None


def _too_few(n: int) -> str:
    return (f"only {n} entit{'y is' if n == 1 else 'ies are'} present in the main set and in every run; the k-NN "
            f"overlap needs at least {st.MIN_ENTITIES}")


def precheck(es, side, settings) -> str | None:
    """Why the chapter cannot run: fewer shared entities than a k-NN overlap needs."""
    if not side.runs:
        return None
    n = len(st.common_rows(es, side.runs))
    return _too_few(n) if n < st.MIN_ENTITIES else None


def compute(ctx: ChapterContext) -> StabilityReport:
    """Match the runs, measure their stability and the subsets, and record every number."""
    es = ctx.es
    inputs = st.match_runs(es, ctx.side.runs)
    k_requested = ctx.option("k")
    k = st.usable_k(k_requested, len(inputs.index))
    if k < 1:
        raise ChapterSkipped(_too_few(len(inputs.index)))
    result = st.measure_run_stability(inputs, k, level=ctx.level, seed=ctx.seed, device=ctx.device)
    groupings = st.stability_groupings(es, inputs.index, vocabularies=ctx.side.vocabularies or [])
    subsets = st.subset_stability(result, groupings, level=ctx.level, seed=ctx.seed)
    correlations = subset_correlations(inputs.vectors, groupings, bands=BANDS, device=ctx.device)
    freq = st.frequency_association(result, es.metadata, inputs.index)
    ctx.rec.add(*result.metrics.values())
    ctx.rec.units(pd.DataFrame({"entity": np.asarray(es.ids, dtype=object)[inputs.index], "knn_overlap": result.overlap,
                                "procrustes_aligned_cosine": result.aligned_cosine}),
                  key="entity", unit="entities", means=("knn_overlap", "procrustes_aligned_cosine"))
    ctx.rec.test(*subset_tests(subsets, freq))
    ctx.rec.note(k=k, **({"k_requested": k_requested} if k != k_requested else {}), n_compared=result.n,
                 runs=result.labels, chance_knn_overlap=result.chance, resampling=result.plan.method,
                 bootstrap_blocks=result.n_blocks, bootstrap_resamples=result.n_boot,
                 spread_over_pairs=result.info["spread"], pairs=result.pairs.to_dict(orient="records"),
                 coverage=inputs.coverage.to_dict(orient="records"), excluded_entities=len(inputs.excluded),
                 **({"dimension_mismatch": result.info["dimension_mismatch"]}
                    if "dimension_mismatch" in result.info else {}),
                 subsets=subsets.table.to_dict(orient="records"), subset_tests=subsets.tests.to_dict(orient="records"),
                 subset_correlations=correlations.to_dict(orient="records"),
                 frequency_association=freq)
    return StabilityReport(inputs, result, groupings, subsets, freq, k_requested, es.metadata)


def subset_tests(subsets: SubsetStability, freq: dict | None) -> list[HypothesisTest]:
    """The chapter's hypothesis tests, for the report-wide correction: each subset comparison (Kruskal–Wallis
    across a grouping's subsets, Mann–Whitney between two) and the frequency–stability correlation."""
    out = []
    for _, t in subsets.tests.iterrows():
        kruskal = "Kruskal" in t["comparison"]
        n = f"{int(t['n₁']):,}" + ("" if t["n₂"] is None or pd.isna(t["n₂"]) else f" + {int(t['n₂']):,}") + " entities"
        out.append(HypothesisTest(
            name=f"{t['grouping']}: {t['comparison']}", p_value=float(t["p"]), statistic=float(t["statistic"]), n=n,
            test="Kruskal–Wallis H" if kruskal else "Mann–Whitney U, two-sided",
            null=("k-NN overlap has the same distribution in every subset" if kruskal
                  else "k-NN overlap has the same distribution in both subsets"),
            family=f"subset comparisons by {t['grouping']}"))
    if freq:
        out.append(HypothesisTest(name=f"{freq['column']} vs k-NN overlap", test="Spearman rank correlation, two-sided",
                                  p_value=freq["p"], statistic=freq["rho"], n=f"{freq['n']:,} entities",
                                  null=f"no monotone association between {freq['column']} and k-NN overlap"))
    return out


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _text(m, fmt: str) -> str:
    """A metric's value with its interval, or "undefined"."""
    return metric_text(m, fmt) if m.value is not None and math.isfinite(m.value) else "undefined"


def _p(p: float) -> str:
    """``= 0.012`` / ``< 1e-300`` (a p-value that underflowed to 0 is not 0)."""
    return "< 1e-300" if p < 1e-300 else f"= {p:.2g}"


def _excludes(m) -> bool:
    return m.has_ci and not m.ci_low <= m.value <= m.ci_high


def band_text(verdict: str | None) -> str:
    """What the stability guideline says about a verdict (edges read from the bands)."""
    b = BANDS
    return {"healthy": f"above {b.healthy:g}: excellent stability, the choice of seed has minimal impact",
            "concerning": f"between {b.problematic:g} and {b.healthy:g}: acceptable for most applications; consider "
                          "averaging across seeds",
            "problematic": f"below {b.problematic:g}: problematic; investigate the sources of instability"
            }.get(verdict, "no band")


def coverage_text(inputs: st.RunInputs) -> str:
    """One paragraph on how the runs' ids matched the main set (missing and extra ids)."""
    cov = inputs.coverage.iloc[1:]
    issues = cov[(cov["missing"] > 0) | (cov["extra"] > 0)]
    n_all = len(inputs.ids) + len(inputs.excluded)
    if not len(issues):
        return (f"Every run holds all {n_all:,} entities of the main set (matched by id), so all of them are "
                "compared.")
    parts = []
    for _, r in issues.iterrows():
        bits = []
        if r["missing"]:
            bits.append(f"lacks {r['missing']:,} of the main set's ids (e.g. {escape(r['missing ids (first)'])})")
        if r["extra"]:
            bits.append(f"has {r['extra']:,} ids the main set does not (e.g. {escape(r['extra ids (first)'])})")
        parts.append(f"**{escape(r['run'])}** " + " and ".join(bits))
    return ("Rows are matched by id. " + "; ".join(parts) + f". Stability is computed on the {len(inputs.ids):,} "
            f"entities present in every run; {len(inputs.excluded):,} main-set entities missing from some run "
            "are left out (listed in the coverage table), and extra ids have no counterpart to compare with.")


def _correlation_text(r: st.RunStabilityResult) -> str:
    corr = r.metrics["pairwise_similarity_correlation"]
    R, P = len(r.labels), len(r.pair_index)
    sp = r.info["spread"]
    runs = f"the {P} pair{'s' if P > 1 else ''} of {R} runs (the main set and {R - 1} other{'s' if R > 2 else ''})"
    if corr.value is None or not math.isfinite(corr.value):
        return (f"**No verdict.** The pairwise similarity correlation over {runs} is undefined: the similarities "
                "between entities do not vary in some run (identical or collinear rows), so there is nothing to "
                "correlate. The other metrics are read against their chance level and their ceiling of 1.")
    head = {"healthy": "**The model is stable across training runs.**",
            "concerning": "**The model is moderately stable across training runs.**",
            "problematic": "**The model is unstable across training runs.**"}.get(corr.verdict, "")
    return (f"{head} The pairwise similarity correlation, the correlation between the similarity of every pair of "
            f"entities in one run and in another, is {metric_text(corr, '.3f')} on average over {runs}; the seed's "
            f"stability guideline reads this as {band_text(corr.verdict)}. This metric carries the chapter's verdict "
            "(seed 000 §217.2.2); the other metrics have no published bands and are read against their chance level "
            "and their ceiling of 1." + (f" Across pairs it ranges from {sp['similarity correlation']['min']:.3f} to "
                                         f"{sp['similarity correlation']['max']:.3f}." if P > 1 else ""))


def dimension_text(r: st.RunStabilityResult) -> str:
    """What a run of another dimension than the main set means here ("" when every run shares it)."""
    other = r.info.get("dimension_mismatch")
    if not other:
        return ""
    names = ", ".join(f"**{escape(m['name'])}** (d = {m['d']})" for m in other)
    return (f"**Dimensions.** The main set has d = {r.info['dims'][0]}, but {names} "
            f"{'has' if len(other) == 1 else 'have'} another dimension. No rotation aligns spaces of different "
            "dimensions, so the aligned cosine and the Procrustes disparity are not defined and are recorded as null "
            "with this reason (and the pairs that involve such a run have none in the pairs table); the k-NN overlap "
            "and the pairwise similarity correlation compare neighbourhoods and similarities within each run and are "
            "kept.")


def _procrustes_text(r: st.RunStabilityResult) -> str:
    m, v = r.metrics, r.values
    if r.info.get("dimension_mismatch"):
        return dimension_text(r)
    if not math.isfinite(v["procrustes_disparity"]):
        return ("After mean-centring, every entity has the same vector in some run, so there is no spread to align: "
                "the aligned cosine and the Procrustes disparity are undefined.")
    d = m["procrustes_disparity"]
    text = (f"After Procrustes alignment (mean-centring and the best rotation of one run onto the other), an entity's "
            f"vector has cosine {_text(m['procrustes_aligned_cosine'], '.3f')} with its counterpart on average, and "
            f"the residual disparity is {metric_text(d, '.4f')} (Procrustes distance $d_P$ = "
            f"{math.sqrt(max(v['procrustes_disparity'], 0)):.3f} on a scale from 0, identical up to rotation, to √2).")
    if _excludes(d):
        text += (" The disparity's interval lies above the value: the fitted rotation has d(d − 1)/2 free parameters "
                 "and adapts to the sample, so the in-sample disparity is biased low; the basic bootstrap interval "
                 "corrects for that bias"
                 + (f" (bias-corrected estimate {d.bias_corrected:.4f})." if d.bias_corrected is not None else "."))
    return text


def narrative(r: st.RunStabilityResult, inputs: st.RunInputs | None = None, subsets: SubsetStability | None = None,
              freq: dict | None = None, ids=None) -> str:
    """Markdown paragraphs that say what this set's stability numbers mean."""
    m, v = r.metrics, r.values
    corr = m["pairwise_similarity_correlation"]
    P = len(r.pair_index)
    sp = r.info["spread"]
    parts = [_correlation_text(r)]
    ratio = v["knn_overlap"] / r.chance if r.chance > 0 else float("inf")
    local = ("so local neighbourhoods are essentially reproducible" if v["knn_overlap"] >= 0.9 else
             "so most of each neighbour list survives a retrain" if v["knn_overlap"] >= 0.6 else
             "so a large part of each neighbour list changes when the model is retrained" if v["knn_overlap"] >= 0.3
             else "so neighbour lists are mostly different from one run to the next")
    parts.append(
        f"Locally, an entity keeps on average {v['knn_overlap']:.1%} of its {r.k} nearest neighbours from one run to "
        f"another: k-NN overlap {metric_text(m['knn_overlap'], '.3f')}, {ratio:,.{0 if ratio >= 10 else 1}f} times the "
        f"{r.chance:.4f} (= k/(n − 1)) expected if the runs were unrelated, {local}. "
        + (f"Pairs of runs range from {sp['k-NN overlap']['min']:.3f} to {sp['k-NN overlap']['max']:.3f}. "
           if P > 1 else "")
        + f"{(r.overlap < 0.5).mean():.1%} of the entities keep fewer than half of their neighbours.")
    if corr.verdict == "healthy" and v["knn_overlap"] < 0.6:
        parts.append("Note the contrast: the global geometry is reproducible (high correlation), but the top of each "
                     "neighbour list is not. Applications that read only the nearest few neighbours (recommendations, "
                     "'similar items') will see their lists change between retrains even though the space as a whole "
                     "is stable.")
    parts.append(_procrustes_text(r))
    if ids is not None and len(r.overlap):
        worst = np.lexsort((r.aligned_cosine, r.overlap))[:3]
        parts.append("The least stable entities are " + ", ".join(
            f"{escape(ids[i])} (overlap {r.overlap[i]:.2f})" for i in worst) + " (table below).")
    if freq is not None:
        direction = ("more frequent entities are more stable, as seed 003 expects" if freq["rho"] > 0.1 else
                     "more frequent entities are less stable" if freq["rho"] < -0.1 else
                     "stability hardly depends on frequency")
        parts.append(f"Across entities, k-NN overlap and `{escape(freq['column'])}` have Spearman ρ = {freq['rho']:.2f} "
                     f"(raw p {_p(freq['p'])}, n = {freq['n']:,}): {direction}.")
    if subsets is not None and len(subsets.table):
        parts.append(subset_text(subsets))
        worst = subsets.table.loc[subsets.table["k-NN overlap"].idxmin()]
        if corr.verdict == "healthy" and worst["k-NN overlap"] < 0.5:
            parts.append(f"The healthy verdict is a whole-set average: entities in “{escape(worst['subset'])}” "
                         f"({escape(worst['grouping'])}, n = {worst['n']:,}) keep only {worst['k-NN overlap']:.1%} of "
                         "their neighbours between runs, so their nearest-neighbour lists are largely reshuffled by "
                         "a retrain.")
    if inputs is not None:
        parts.append(coverage_text(inputs))
    if corr.verdict in ("concerning", "problematic"):
        parts.append("Remedies the seed lists (§217.2.2): deterministic algorithms where available, averaging "
                     "embeddings across several seeds, more training data or epochs to reduce optimisation "
                     "variance, and consensus approaches that keep the stable core of the space.")
    return "\n\n".join(parts)


def notes_text(s: SubsetStability) -> str:
    """The subset coverage notes as markdown (user strings escaped)."""
    return " ".join(escape(n) + "." for n in s.notes)


def subset_text(s: SubsetStability) -> str:
    """What the subset comparison shows, one sentence per grouping."""
    out = []
    for g, t in s.table.groupby("grouping", sort=False):
        hi, lo = t.loc[t["k-NN overlap"].idxmax()], t.loc[t["k-NN overlap"].idxmin()]
        tests = s.tests[s.tests["grouping"] == g] if len(s.tests) else s.tests
        sig = tests[tests["differs"] & tests["comparison"].str.contains("Mann")] if len(tests) else tests
        kw = tests[tests["comparison"].str.contains("Kruskal")] if len(tests) else tests
        if len(t) == 1:
            text = (f"By {escape(g)}, only “{escape(lo['subset'])}” (n = {lo['n']:,}) has compared entities: k-NN "
                    f"overlap {lo['k-NN overlap']:.3f}")
        elif hi["k-NN overlap"] == lo["k-NN overlap"]:
            text = f"By {escape(g)}, k-NN overlap is {lo['k-NN overlap']:.3f} in each of the {len(t)} subsets"
        else:
            text = (f"By {escape(g)}, k-NN overlap ranges from {lo['k-NN overlap']:.3f} ({escape(lo['subset'])}, "
                    f"n = {lo['n']:,}) to {hi['k-NN overlap']:.3f} ({escape(hi['subset'])}, n = {hi['n']:,})")
        if len(kw):
            text += f"; Kruskal–Wallis p {_p(kw['p'].iloc[0])}"
        if len(tests):
            text += (f"; {len(sig)} of {int(tests['comparison'].str.contains('Mann').sum())} pairwise comparisons "
                     "differ after Holm correction within the grouping." if len(sig) else "; no pairwise difference "
                     "survives Holm correction within the grouping.")
        else:
            text += "."
        out.append(text)
    if len(s.tests):
        out.append("These p-values are raw or adjusted within the chapter; the report-wide adjustment over every "
                   "test of the report is in the Statistical rigor chapter's tests table.")
    return " ".join(out)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def pair_display_table(r: st.RunStabilityResult) -> pd.DataFrame:
    """The per-pair metrics as shown in the report."""
    return r.pairs


def subset_display_table(s: SubsetStability) -> pd.DataFrame:
    """The per-subset table as shown: the interval as one column after the mean."""
    t = s.table.copy()
    t.insert(t.columns.get_loc("k-NN overlap") + 1, "95 % CI",
             [interval(lo, hi, ".3f", sep=" – ") for lo, hi in zip(t["ci_low"], t["ci_high"])])
    return t.drop(columns=["ci_low", "ci_high"])


def subset_tests_table(s: SubsetStability) -> pd.DataFrame:
    """The subset tests as shown in the report."""
    if not len(s.tests):
        return s.tests
    t = s.tests.copy()
    t["differs"] = np.where(t["differs"], "yes", "no")
    return t


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def distribution_figure(r: st.RunStabilityResult) -> plt.Figure:
    """Histograms of per-entity k-NN overlap (with chance and mean) and aligned cosine."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.6))
    edges = np.linspace(0, 1, min(r.k, 40) * 2 + 2) if r.k <= 40 else 40
    a.hist(r.overlap, bins=edges, color=PALETTE["data"], alpha=0.8)
    a.axvline(r.values["knn_overlap"], color=PALETTE["data"], ls="--", lw=1.3,
              label=f"mean {r.values['knn_overlap']:.3f}")
    a.axvline(r.chance, color=PALETTE["reference"], ls=":", lw=1.6, label=f"chance k/(n−1) = {r.chance:.4f}")
    a.set(xlabel=f"k-NN overlap (share of the {r.k} neighbours kept), mean over run pairs", ylabel="Entities",
          xlim=(-0.02, 1.02), title="Neighbourhood overlap per entity")
    a.legend(loc="upper left", fontsize=8.5)
    cos = r.aligned_cosine[np.isfinite(r.aligned_cosine)]
    if len(cos):
        lo = float(min(np.quantile(cos, 0.001), 0.9))
        b.hist(cos, bins=60, range=(lo, 1.0), color=PALETTE["accent"], alpha=0.8)
        b.axvline(r.values["procrustes_aligned_cosine"], color=PALETTE["accent"], ls="--", lw=1.3,
                  label=f"mean {r.values['procrustes_aligned_cosine']:.3f}")
        b.legend(loc="upper left", fontsize=8.5)
    else:
        b.text(0.5, 0.5, "undefined: no alignment (see the text)", ha="center", va="center", transform=b.transAxes)
    b.set(xlabel="Cosine with the same entity in the other run, after alignment", ylabel="Entities",
          title="Aligned cosine per entity")
    return fig


def pair_heatmap(r: st.RunStabilityResult) -> plt.Figure:
    """Run x run matrices of k-NN overlap and pairwise similarity correlation."""
    R = len(r.labels)
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 0.55 * R + 2.4))
    short = [mathtext(lab if len(lab) <= 18 else lab[:16] + "…") for lab in r.labels]
    for ax, col, title in zip(axes, ("k-NN overlap", "similarity correlation"),
                              ("k-NN overlap", "Pairwise similarity correlation")):
        M = np.full((R, R), np.nan)
        for (a, b), val in zip(r.pair_index, r.pairs[col]):
            M[a, b] = M[b, a] = val
        vals = r.pairs[col].to_numpy(float)
        vals = vals[np.isfinite(vals)]
        vmin = float(min(vals.min(), 0.8 if col != "k-NN overlap" else vals.min())) if len(vals) else 0.0
        vmin = min(vmin, 0.999)
        im = ax.imshow(M, cmap="viridis", vmin=vmin, vmax=1.0)
        for i in range(R):
            for j in range(R):
                if i != j:
                    ax.text(j, i, f"{M[i, j]:.3f}" if np.isfinite(M[i, j]) else "—", ha="center", va="center",
                            fontsize=8, color="white" if M[i, j] < vmin + 0.6 * (1 - vmin) else "black")
        ax.set_xticks(range(R), short, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(R), short, fontsize=8)
        ax.grid(False)
        ax.set_title(title)
        fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def subset_figure(r: st.RunStabilityResult, groupings: list[Grouping], max_panels: int = 3) -> plt.Figure:
    """Box plots of per-entity k-NN overlap within each subset, one panel per grouping."""
    gs = [g for g in groupings if any(len(v) for v in g.subsets.values())][:max_panels]
    fig, axes = plt.subplots(1, max(1, len(gs)), figsize=(WIDTH, 3.8), squeeze=False)
    for ax, g in zip(axes[0], gs):
        names = [nm for nm, idx in g.subsets.items() if len(idx)]
        data = [r.overlap[g.subsets[nm]] for nm in names]
        ax.boxplot(data, showmeans=True, widths=0.6, medianprops={"color": PALETTE["reference"]},
                   meanprops={"marker": "D", "markerfacecolor": PALETTE["data"], "markeredgecolor": "white"})
        ax.set_xticks(range(1, len(names) + 1),
                      [mathtext(nm if len(nm) <= 18 else nm[:16] + "…").replace(": ", "\n") + f"\n(n={len(d):,})"
                       for nm, d in zip(names, data)], fontsize=7.5 if len(names) > 3 else 8)
        ax.axhline(r.chance, color=PALETTE["muted"], ls=":", lw=1)
        ax.set(ylabel="k-NN overlap per entity", ylim=(-0.03, 1.03), title=f"By {mathtext(g.name)}")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: StabilityReport) -> None:
    r = rep.result
    smaller_k_note(r.k, rep.k_requested, f"Only {r.n:,} entities are present in every run")
    show_markdown(narrative(r, rep.inputs, rep.subsets, rep.freq, rep.inputs.ids))


def show_metrics(rep: StabilityReport) -> None:
    r = rep.result
    ci = r.ci_method or (f"No interval: {r.plan.reason}." if r.plan is not None and r.plan.reason else "No interval.")
    show_metric_table(
        r.metrics,
        caption=f"Stability over {len(r.pair_index)} pair{'s' if len(r.pair_index) > 1 else ''} of {len(r.labels)} "
                f"runs on {r.n:,} shared entities "
                f"(k = {r.k}). Verdict: the {BANDS.table}, applied to the pairwise similarity correlation only. {ci}",
        label="tbl-stability-metrics",
        definitions=f"**Chance level.** Two unrelated runs share on average $k/(n-1) = {r.k}/{r.n - 1} = "
                    f"{r.chance:.4f}$ of each neighbour list; identical runs (up to rotation) share 1.\n\n"
                    "**Definitions.** $N^r_k(i)$ are the $k$ nearest neighbours of entity $i$ by cosine in run $r$ "
                    "(itself excluded); $P$ is the set of run pairs; $\\tilde e$ are mean-centred vectors, $\\hat E$ "
                    "the centred run scaled to unit Frobenius norm, and $R^*_{rs}$ the orthogonal matrix that best "
                    "rotates run $s$ onto run $r$. The seed's Procrustes distance is $d_P = \\sqrt{\\text{disparity}} "
                    "\\in [0, \\sqrt2]$.")


def show_pairs(rep: StabilityReport) -> None:
    show_table(pair_display_table(rep.result),
               caption=f"Stability of each pair of runs. Verdict: pairwise similarity correlation against the "
                       f"{BANDS.table} ({BANDS.text}).", label="tbl-stability-pairs")
    show_figure(pair_heatmap(rep.result),
                caption="k-NN overlap (left) and pairwise similarity correlation (right) for every pair of runs.",
                label="fig-stability-pairs")


def show_entities(rep: StabilityReport) -> None:
    r = rep.result
    show_figure(distribution_figure(r),
                caption=f"Left: per-entity share of the {r.k} nearest neighbours kept between runs (dashed: mean; "
                        "dotted: chance level k/(n − 1)). Right: per-entity cosine with its counterpart after "
                        "Procrustes alignment.", label="fig-stability-distribution")
    table = st.least_stable(r, rep.inputs.ids, rep.metadata)
    show_table(table, caption=f"The {len(table)} least stable entities (smallest k-NN overlap, ties broken by aligned "
                              "cosine).", label="tbl-stability-least")


def show_subsets(rep: StabilityReport) -> None:
    s = rep.subsets
    if not len(s.table):
        show_markdown("No subsets to compare: the manifest has no `vocabularies` that overlap the compared entities, "
                      "and the metadata has no numeric `frequency` column and no `kind`, `type` or `group` column."
                      + (" " + notes_text(s) if s.notes else ""))
        return
    if s.notes:  # the comparison itself is in the narrative above ("What the numbers say")
        show_markdown(notes_text(s))
    show_table(subset_display_table(s),
               caption=f"k-NN overlap within each subset (mean over entities of the per-entity overlap; CI: BCa "
                       f"bootstrap over entities ({MEAN_CI_RESAMPLES:,} resamples) up to {BCA_MAX:,} entities, "
                       "normal interval beyond). 'share < 0.5': entities keeping fewer than half their neighbours.",
               label="tbl-stability-subsets")
    if len(s.tests):
        show_table(subset_tests_table(s), caption="Do the subsets differ? Tests on the per-entity k-NN overlap; "
                                                  "p (Holm) is adjusted within each grouping.",
                   label="tbl-stability-tests")
    show_figure(subset_figure(rep.result, rep.groupings),
                caption="Per-entity k-NN overlap within each subset (box: quartiles; diamond: mean; dotted: chance).",
                label="fig-stability-subsets")


def show_coverage(rep: StabilityReport) -> None:  # coverage_text is in the narrative
    show_table(rep.inputs.coverage, caption="Each run's rows matched by id to the main set.",
               label="tbl-stability-coverage")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

def _subset_words(grouping: str, subset: str) -> str:
    """``in the vocabulary “niche items”``, ``in frequency quartile “Q1: 0 – 31”``, ``with kind “item”``."""
    if grouping == "vocabulary":
        return f"in the vocabulary “{subset}”"
    return f"in {grouping} “{subset}”" if grouping.endswith(("quartile", "quantile bin")) else f"with {grouping} “{subset}”"


def findings(r: ChapterResults) -> list[Finding]:
    """The worst group decides: in every grouping whose subsets differ (its test rejects after the report-wide
    adjustment), a subset whose own pairwise similarity correlation has a worse verdict than the whole set's
    is unstable. One finding: the least stable such subset leads, with its k-NN overlap beside the most stable
    subset of its grouping; the others are named."""
    whole = (r.metric("pairwise_similarity_correlation") or {}).get("verdict")
    overlap = {(s["grouping"], s["subset"]): s for s in r.info.get("subsets", [])}
    rows = r.info.get("subset_correlations", [])
    unstable = []
    for grouping in dict.fromkeys(c["grouping"] for c in rows):
        tests = [t for t in r.tests if t["name"].startswith(f"{grouping}: ")]
        if not any(r.significant(t["name"]) for t in tests):
            continue
        mine = [c for c in rows if c["grouping"] == grouping]
        best = max(mine, key=lambda c: overlap.get((grouping, c["subset"]), {}).get("k-NN overlap", 0))
        test = min(tests, key=lambda t: r.adjusted_p(t["name"]) or 1.0)
        unstable += [(c, best, test) for c in mine if SEVERITY[c["verdict"]] > SEVERITY[whole]]
    if not unstable:
        return []
    unstable.sort(key=lambda u: u[0]["similarity correlation"])
    (lead, best, test), others = unstable[0], unstable[1:]
    w, b = overlap.get((lead["grouping"], lead["subset"]), {}), overlap.get((best["grouping"], best["subset"]), {})
    also = "; ".join(f"{c['subset']} ({c['grouping']}): {c['similarity correlation']:.3f}, {c['verdict']}"
                     for c, _, _ in others)
    return [Finding(
        max((u[0]["verdict"] for u in unstable), key=SEVERITY.get), "model", r.name,
        f"Vectors {_subset_words(lead['grouping'], lead['subset'])} are unstable across retrains",
        f"Do not rely on the neighbourhoods of the vectors in “{lead['subset']}” until training is "
        f"made more stable for them: they keep {w.get('k-NN overlap', float('nan')):.0%} of their neighbours "
        f"between runs ({b.get('k-NN overlap', float('nan')):.0%} for {best['subset']}; {test_text(test)}), and "
        f"their pairwise similarity correlation is {lead['similarity correlation']:.3f}: {lead['verdict']} by the "
        f"stability guidelines (seed 000 §217.2.2), while the whole set's is {whole or 'not rated'}"
        + (f". Also unstable: {also}." if also else "."),
        metrics=("pairwise_similarity_correlation", "knn_overlap"),
        evidence={"group": lead["subset"], "grouping": lead["grouping"], "value": lead["similarity correlation"],
                  "label": f"Pairwise similarity correlation of “{lead['subset']}”",
                  "knn_overlap": w.get("k-NN overlap"), "knn_overlap_ci": [w.get("ci_low"), w.get("ci_high")],
                  "compared_with": best["subset"], "compared_knn_overlap": b.get("k-NN overlap"),
                  "test": test["name"], "p_adjusted": r.adjusted_p(test["name"]),
                  "also": [{"group": c["subset"], "grouping": c["grouping"], "value": c["similarity correlation"],
                            "verdict": c["verdict"]} for c, _, _ in others]},
        rule="worst group", effect="stability by group")]


CHAPTER = ChapterSpec(
    name="stability", title="Stability across training runs", order=70,
    description="Do retrains of the model agree? k-NN neighbourhood overlap per entity, Procrustes-aligned cosine and disparity, pairwise similarity correlation (verdict), the least stable entities, and stability by vocabulary, frequency bin and kind (seed 003; seed 000 §217.2).",
    requires=("runs",), optional=("vocabularies",),
    options=(K,), precheck=precheck, demo="stability",
    findings=findings,
)
