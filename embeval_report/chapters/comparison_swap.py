"""The comparison report's model swap section: what switching from the first model to a later one changes for the
users of an index (``comparison.json``'s ``swap``, :mod:`embeval_report.report.model_swap`). A helper of the
comparison notebook (:mod:`.comparison`), not a chapter."""
from __future__ import annotations

import pandas as pd

from ..present.display import escape, show_markdown, show_table


def _pct(x) -> str:
    """A share as a percentage: one decimal, two significant digits below 1 %."""
    if x is None:
        return "—"
    return f"{100 * x:.2g} %" if 0 < x < 0.01 else f"{100 * x:.1f} %"


def _num(x, fmt=".3f") -> str:
    return "—" if x is None else format(x, fmt)


def swap_sentence(s: dict) -> str:
    """What the swap changes, in words (or why it was not computed)."""
    a, b = escape(s["a"]), escape(s["b"])
    if s.get("skipped"):
        return f"**{b} in place of {a}:** the swap impact was not computed: {escape(s['skipped'])}."
    nb, k = s["neighbours"], s["k"]
    sampled = (f"a seeded sample of {s['ids_compared']:,} of the {s['shared_ids']:,} shared ids"
               if s.get("sampled") else f"the {s['shared_ids']:,} ids both models hold")
    dims = (f" (vectors of {s['d_a']} and {s['d_b']} dimensions)" if s.get("d_a") != s.get("d_b") else "")
    parts = [f"**{b} in place of {a}:** over {sampled}{dims}, an id keeps on average {_pct(nb['mean'])} of its "
             f"top-{k} cosine neighbours (median {_pct(nb['quantiles'].get('q50'))}); the top-{k} of "
             f"**{_pct(nb['changed_share'])} of ids changes by more than half**."]
    q = s.get("queries")
    if q:
        parts.append(f"Of the {q['queries']:,} queries ({escape(q['source'])}), **{_pct(q['changed_share'])} get a "
                     f"different top-{q['k']}** ({_pct(q['changed_by_more_than_half'])} by more than half).")
        if q.get("metric"):
            parts.append(f"Of the {q['changed_scored']:,} changed queries, {q['gain']:,} gain and {q['lose']:,} lose "
                         f"on the retrieval chapter's per-query {escape(q['metric'])} ({q['same']:,} keep it).")
    seven = next((t for t in s["scale"]["thresholds"] if t.get("threshold in A") == 0.7), None)
    if seven and seven.get("same share in B") is not None:
        parts.append(f"A similarity threshold of 0.7 tuned on {a} keeps {_pct(seven['pairs at or above'])} of pairs; "
                     f"to keep the same share under {b}, move it to **{seven['same share in B']:.3f}** (Spearman's ρ "
                     f"between the two models' cosines of the same pairs: {_num(s['scale']['spearman'], '.2f')}).")
    return " ".join(parts)


def overlap_table(s: dict) -> pd.DataFrame:
    """How many ids keep 0, 1, …, k of their top-k neighbours, and their share."""
    h = pd.DataFrame(s["neighbours"]["histogram"])
    total = max(int(h["ids"].sum()), 1)
    return pd.DataFrame({f"neighbours kept of {s['k']}": h["kept"].astype(int), "ids": h["ids"].map("{:,}".format),
                         "share": (h["ids"] / total).map(lambda x: f"{100 * x:.1f} %")})


def scale_table(s: dict) -> pd.DataFrame:
    """Quantiles of A's and B's cosines over the same pairs."""
    q = pd.DataFrame(s["scale"]["quantiles"])
    return pd.DataFrame({"quantile": q["quantile"].map(lambda x: f"{100 * x:.0f} %"), s["a"]: q["A"].map(_num),
                         s["b"]: q["B"].map(_num)})


def threshold_table(s: dict) -> pd.DataFrame:
    """Each threshold of A, the share of pairs it keeps, and the threshold of B that keeps the same share."""
    t = pd.DataFrame(s["scale"]["thresholds"])
    return pd.DataFrame({f"threshold in {s['a']}": t["threshold in A"].map(lambda x: f"{x:g}"),
                         "pairs at or above": t["pairs at or above"].map(_pct),
                         f"same share in {s['b']}": t["same share in B"].map(lambda x: _num(None if x != x else x))})


def geometry_table(s: dict) -> pd.DataFrame:
    """The shared ids' geometry under each model, paired over the ids, without a verdict."""
    rows = [{"diagnostic": g["label"], s["a"]: _num(g["a"]), s["b"]: _num(g["b"]),
             "B − A (95 % interval)": f"{_signed(g['difference'])} ({_signed(g['ci_low'])} to {_signed(g['ci_high'])})",
             "ids": f"{g['n']:,}"} for g in s.get("geometry") or []]
    return pd.DataFrame(rows)


def _signed(x) -> str:
    return "—" if x is None else format(x, "+.3f").replace("-", "−")


def query_changes(s: dict) -> pd.DataFrame:
    """The queries that gain and lose most among those whose top-k changes."""
    q = s.get("queries") or {}
    rows = [{"query": r["query"], "change": "gains" if kind == "gainers" else "loses",
             f"top-{q.get('k')} kept": _pct(r["overlap"]), f"{q.get('metric')} A → B": f"{r['a']:.3f} → {r['b']:.3f}"}
            for kind in ("gainers", "losers") for r in q.get(kind) or []]
    return pd.DataFrame(rows)


def show_swap(rep) -> None:
    """The model swap section: per later model, the sentence, the neighbour overlap, the queries that gain and
    lose, the similarity scale and the thresholds carried from A to B."""
    sections = rep.doc.get("swap") or []
    if not sections:
        show_markdown("The swap impact was not computed for this comparison (a comparison made by an earlier "
                      "version).")
        return
    for i, s in enumerate(sections):
        show_markdown(swap_sentence(s))
        if s.get("skipped"):
            continue
        tag = f"{i + 1}" if len(sections) > 1 else ""
        show_table(overlap_table(s), caption=f"{s['b']} in place of {s['a']}: how many of its "
                                             f"top-{s['k']} cosine neighbours each shared id keeps.",
                   label=f"tbl-compare-swap-overlap{tag}")
        changes = query_changes(s)
        if len(changes):
            show_table(changes, caption="The queries whose top results change and that gain or lose most on the "
                                        "retrieval chapter's per-query value.", label=f"tbl-compare-swap-queries{tag}")
        show_table(scale_table(s), caption=f"The similarity scale: quantiles of the cosines of the same "
                                           f"{s['scale']['pairs']:,} pairs of shared ids under each model.",
                   label=f"tbl-compare-swap-scale{tag}")
        geometry = geometry_table(s)
        if len(geometry):
            show_table(geometry, caption="The geometry of the shared ids under each model, paired over the ids: a "
                                         "diagnostic, not a verdict (a model can be more anisotropic and still "
                                         "better at every task). Intervals: a bootstrap over the ids.",
                       label=f"tbl-compare-swap-geometry{tag}")
        show_table(threshold_table(s), caption="A similarity threshold of the first model carried to the other: the "
                                               "threshold that keeps the same share of pairs (quantile map).",
                   label=f"tbl-compare-swap-thresholds{tag}")
