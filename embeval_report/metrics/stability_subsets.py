"""Stability restricted to subsets of the entities: named vocabularies, frequency bins and kinds.

Restriction follows seed 003 §4: neighbours come from the whole shared vocabulary, and each
entity's k-NN overlap (averaged over run pairs) is averaged over the subset's entities. Whether
subsets differ is tested on the per-entity overlaps (Kruskal–Wallis, Mann–Whitney U with Holm's
correction through :func:`embeval_report.stats.adjust_pvalues`).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as sstats

from ..errors import UndefinedMetricWarning
from ..io import EmbeddingSet, kind_column
from ..io.runs import Vocabulary
from ..stats import DEFAULT_LEVEL, adjust_pvalues, mean_ci


@dataclass(frozen=True)
class Grouping:
    """Named subsets of the compared entities (positions into the per-entity arrays)."""

    name: str
    subsets: dict
    disjoint: bool
    notes: list = field(default_factory=list)


def vocabulary_grouping(es: EmbeddingSet, index: np.ndarray, entries: list[Vocabulary] | None = None
                        ) -> Grouping | None:
    """The ``vocabularies`` as a :class:`Grouping` over the compared entities (rows ``index``).

    ``entries``: the validated :class:`~embeval_report.io.runs.Vocabulary` list (``ctx.side.vocabularies``, or
    :func:`embeval_report.io.runs.read_vocabularies`); ``None`` or empty: no vocabularies.
    Ids unknown to the set, or missing from some run, are counted in ``notes``; a vocabulary none
    of whose ids is compared is left out with a note.
    """
    if not entries:
        return None
    vocabularies = list(entries)
    pos = pd.Index(es.ids[index])
    known = pd.Index(es.ids)
    subsets, notes = {}, []
    for v in vocabularies:
        at = pos.get_indexer(v.ids)
        unknown = int((known.get_indexer(v.ids) < 0).sum())
        not_compared = int((at < 0).sum()) - unknown
        if not (at >= 0).any():
            notes.append(f"Vocabulary “{v.name}”: none of its {len(v.ids)} ids is among the {len(pos)} entities "
                         f"compared ({unknown} not in the embedding set, {not_compared} missing from some run); "
                         "left out")
            continue
        subsets[v.name] = np.sort(at[at >= 0])
        if unknown or not_compared:
            notes.append(f"Vocabulary “{v.name}”: {len(v.ids)} ids, {unknown} not in the embedding set, "
                         f"{not_compared} missing from some run; {len(subsets[v.name])} compared")
    members = np.concatenate(list(subsets.values())) if subsets else np.array([], dtype=np.int64)
    return Grouping("vocabulary", subsets, disjoint=len(members) == len(np.unique(members)), notes=notes)


def _edge(x) -> str:
    """A bin edge in a subset name (``1``, ``1,200``, ``0.125``)."""
    x = float(x)
    return f"{x:,.0f}" if x == int(x) else f"{x:,.3g}"


def quantile_grouping(values, *, column: str = "frequency", q: int = 4) -> Grouping | None:
    """Quantile bins of a numeric column (e.g. frequency quartiles); ``None`` when it cannot be binned."""
    s = pd.to_numeric(pd.Series(np.asarray(values, dtype=object)), errors="coerce")
    ok = s.notna().to_numpy()
    if ok.sum() < 2 * q or s[ok].nunique() < 2:
        return None
    bins = pd.qcut(s[ok], q, duplicates="drop")
    rows = np.flatnonzero(ok)
    subsets = {}
    for j, cat in enumerate(bins.cat.categories, 1):
        members = rows[(bins == cat).to_numpy()]
        lo, hi = s[ok][(bins == cat).to_numpy()].agg(["min", "max"])
        subsets[f"Q{j}: {_edge(lo)} – {_edge(hi)}"] = members
    if len(subsets) < 2:
        return None
    notes = [f"{int((~ok).sum())} entities without a “{column}” value are left out"] if (~ok).any() else []
    return Grouping(f"{column} {'quartile' if len(subsets) == 4 else 'quantile bin'}", subsets, True, notes)


def category_grouping(values, *, column: str) -> Grouping | None:
    """One subset per value of a categorical column (missing values left out)."""
    s = pd.Series(np.asarray(values, dtype=object))
    ok = s.notna().to_numpy()
    cats = sorted(s[ok].astype(str).unique())
    if len(cats) < 2:
        return None
    sv = s.astype(str).to_numpy()
    return Grouping(column, {c: np.flatnonzero(ok & (sv == c)) for c in cats}, True)


def stability_groupings(es: EmbeddingSet, index: np.ndarray, *, frequency_column: str = "frequency",
                        q: int = 4, vocabularies: list | None = None) -> list[Grouping]:
    """Subsets to compare: the vocabularies (``vocabularies``, validated: :func:`vocabulary_grouping`),
    quantile bins of ``frequency_column`` and a kind column."""
    out = []
    voc = vocabulary_grouping(es, index, vocabularies)
    if voc is not None:
        out.append(voc)
    meta = es.metadata
    if meta is not None:
        rows = meta.iloc[index]
        if frequency_column in rows.columns:
            g = quantile_grouping(rows[frequency_column].to_numpy(), column=frequency_column, q=q)
            if g is not None:
                out.append(g)
        col = kind_column(meta)
        if col is not None:
            g = category_grouping(rows[col].to_numpy(), column=col)
            if g is not None:
                out.append(g)
    return out


@dataclass(frozen=True)
class SubsetStability:
    """Per-subset stability (``table``: n, mean k-NN overlap with ``ci_low``/``ci_high``, ...) and the
    tests of whether the subsets differ."""

    table: pd.DataFrame
    tests: pd.DataFrame
    notes: list
    ci_method: str = ""


def _comparisons(g: Grouping, testable: dict, x: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
    if g.disjoint:
        return [(f"{a} vs {b}", x[ia], x[ib]) for (a, ia), (b, ib) in combinations(testable.items(), 2)]
    everyone = np.arange(len(x))
    out = []
    for a, ia in testable.items():
        rest = np.setdiff1d(everyone, ia)
        if len(rest) >= 2:
            out.append((f"{a} vs the rest", x[ia], x[rest]))
    return out


def subset_stability(result, groupings: list[Grouping], *, alpha: float = 0.05,
                     level: float = DEFAULT_LEVEL, seed: int = 0) -> SubsetStability:
    """Stability restricted to each subset, and whether subsets differ.

    ``result``: a :class:`~embeval_report.metrics.stability.RunStabilityResult`. Restriction
    follows seed 003 §4: neighbours come from the whole shared vocabulary and the per-entity
    overlap (averaged over run pairs) is averaged over the subset's entities, with the interval of
    :func:`embeval_report.stats.mean_ci`. Tests on the per-entity overlap: Kruskal–Wallis across
    the subsets of a grouping when they are disjoint, then two-sided Mann–Whitney U for every pair
    of subsets (each subset against the rest of the entities when subsets overlap), Holm-corrected
    within the grouping. The effect size is the probability of superiority
    :math:`A = U / (n_1 n_2)` (0.5 = no difference). A grouping whose compared entities all have
    the same overlap is not tested (an :class:`~embeval_report.errors.UndefinedMetricWarning`).
    """
    rows, tests, notes, how = [], [], [], ""
    x = result.overlap.astype(float)
    c = result.aligned_cosine.astype(float)
    for g in groupings:
        notes += g.notes
        usable = {name: idx for name, idx in g.subsets.items() if len(idx) > 0}
        for name, idx in usable.items():
            if len(idx) < 2:
                lo = hi = float("nan")
                warnings.warn(f"Subset “{name}” ({g.name}) has a single entity: its mean has no interval",
                              UndefinedMetricWarning, stacklevel=2)
            else:
                lo, hi, method = mean_ci(x[idx], level, seed=seed, units="entities")
                how = how or method
            rows.append({"grouping": g.name, "subset": name, "n": len(idx), "k-NN overlap": float(x[idx].mean()),
                         "ci_low": lo, "ci_high": hi, "median": float(np.median(x[idx])),
                         "aligned cosine": float(c[idx].mean()), "share < 0.5": float((x[idx] < 0.5).mean())})
        testable = {k_: v for k_, v in usable.items() if len(v) >= 2}
        if len(testable) < 2 and g.disjoint:
            continue
        comparisons = _comparisons(g, testable, x)
        if not comparisons:
            continue
        compared = np.concatenate([np.concatenate([u, v]) for _, u, v in comparisons])
        if np.ptp(compared) == 0:
            warnings.warn(f"Every entity compared by {g.name} has the same k-NN overlap ({compared[0]:.3g}): the "
                          "subsets cannot differ, so they are not tested", UndefinedMetricWarning, stacklevel=2)
            continue
        if g.disjoint:
            h, p = sstats.kruskal(*[x[v] for v in testable.values()])
            tests.append({"grouping": g.name, "comparison": f"all {len(testable)} subsets (Kruskal–Wallis H)",
                          "n₁": sum(len(v) for v in testable.values()), "n₂": None, "statistic": float(h),
                          "effect A": None, "p": float(p), "p (Holm)": float(p), "differs": bool(p < alpha)})
        ps, part = [], []
        for label, u, v in comparisons:
            res = sstats.mannwhitneyu(u, v, alternative="two-sided")
            ps.append(float(res.pvalue))
            part.append({"grouping": g.name, "comparison": f"{label} (Mann–Whitney U)", "n₁": len(u), "n₂": len(v),
                         "statistic": float(res.statistic), "effect A": float(res.statistic) / (len(u) * len(v)),
                         "p": float(res.pvalue)})
        reject, p_holm = adjust_pvalues(ps, "holm", alpha)
        for r, ph, rej in zip(part, p_holm, reject):
            r.update({"p (Holm)": float(ph), "differs": bool(rej)})
        tests += part
    return SubsetStability(pd.DataFrame(rows), pd.DataFrame(tests), notes, how)


def frequency_association(result, metadata: pd.DataFrame | None, index, column: str = "frequency") -> dict | None:
    """Spearman correlation between a frequency column and each entity's k-NN overlap (``None`` without one,
    or when either does not vary)."""
    if metadata is None or column not in metadata.columns:
        return None
    f = pd.to_numeric(metadata[column].iloc[np.asarray(index)], errors="coerce").to_numpy(float)
    ok = np.isfinite(f)
    if ok.sum() < 10 or np.unique(f[ok]).size < 2 or np.ptp(result.overlap[ok]) == 0:
        return None
    res = sstats.spearmanr(f[ok], result.overlap[ok])
    return {"column": column, "rho": float(res.statistic), "p": float(res.pvalue), "n": int(ok.sum())}


#: fewest entities of a subset whose pairwise similarity correlation is measured (a correlation over its pairs)
MIN_CORRELATION_ENTITIES = 20


def subset_correlations(runs: list, groupings: list[Grouping], *, bands, device="auto") -> pd.DataFrame:
    """The pairwise similarity correlation within each subset of the disjoint groupings (seed 000 §217.2.1.3,
    over the subset's pairs of entities only, averaged over the pairs of runs), with its verdict by ``bands``
    (the stability guidelines, seed 000 §217.2.2): a subset can be unstable while the whole set is stable.
    ``runs``: the matched vectors of every run (rows: the compared entities). Subsets with fewer than
    :data:`MIN_CORRELATION_ENTITIES` entities are left out. No interval (a point estimate per subset)."""
    from .pair_moments import similarity_correlation

    rows = []
    for g in groupings:
        if not g.disjoint:
            continue
        for name, idx in g.subsets.items():
            if len(idx) < MIN_CORRELATION_ENTITIES:
                continue
            values = [similarity_correlation(runs[a][idx], runs[b][idx], device=device)
                      for a, b in combinations(range(len(runs)), 2)]
            rho = float(np.mean(values))
            rows.append({"grouping": g.name, "subset": name, "n": len(idx), "similarity correlation": rho,
                         "verdict": bands.verdict(rho)})
    return pd.DataFrame(rows, columns=["grouping", "subset", "n", "similarity correlation", "verdict"])
