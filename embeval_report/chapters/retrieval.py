"""The Retrieval chapter: every judged query ranks the whole corpus exactly, and trec_eval's metrics
say how well the relevant documents come back (computed in :mod:`embeval_report.metrics.retrieval`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field, replace
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..io import group_column
from ..metrics import retrieval as rt
from ..metrics.scoring import Aggregate, TaskScorer, check_units, weighted_mean
from ..io.texts import SNIPPET, snippet, texts_by_id
from ..present.display import escape, show_figure, show_markdown, show_table
from ..present.display import show_metrics as show_metric_table
from ..present.format import number, percent, value_with_ci
from ..present.plotting import PALETTE, WIDTH
from ..stats import mean_ci
from .declaration import ChapterSpec

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["SCORER", "RetrievalInputs", "RetrievalReport", "compute", "curves_figure", "distribution_figure",
           "group_table", "narrative",
           "precheck", "show_curves", "show_distribution", "show_groups", "show_metrics", "show_protocol",
           "judgements_text", "show_summary", "show_worst", "worst_queries"]

#: queries listed in the "worst queries" table
WORST = 10
#: documents shown per listed query
SHOWN_DOCS = 3
#: characters of a document's text shown beside its id in the worst-queries table (a query gets SNIPPET)
DOC_SNIPPET = 40


@dataclass(frozen=True)
class RetrievalReport:
    """Everything the chapter shows."""

    result: rt.RetrievalResult
    curves: pd.DataFrame
    groups: pd.Series | None     # query id -> group label, when the queries have a group column
    group_name: str | None
    queries_from: str            # where the queries come from (a file, or the corpus itself)
    by_group: pd.DataFrame | None = None  # :func:`group_table`, computed (and recorded) with the run's seed
    texts: dict = field(default_factory=dict)   # id -> text of the documents and queries, when the set has them
    qrels_note: str = ""         # the manifest's `qrels_note`: how the grades were made


def precheck(es, side, settings) -> str | None:
    """Why retrieval cannot be evaluated: no corpus beyond a single document."""
    if es.n < 2:
        return f"retrieval needs a corpus of at least 2 documents to rank; the set has {es.n}"
    return None


@dataclass(frozen=True)
class RetrievalInputs:
    """The scorer's inputs: the query vectors (``None``: the corpus itself is the queries), the ids, the
    judgements and the manifest's settings (``metric`` the set's score, ``exclude_self``); ``device`` where
    to rank (not part of the plan: every device gives the same exact ranks)."""

    queries: np.ndarray | None
    query_ids: np.ndarray
    doc_ids: np.ndarray
    qrels: pd.DataFrame
    metric: str
    exclude_self: bool
    device: str = "auto"
    meta: pd.DataFrame | None = None   # the queries' metadata (their groups)
    source: str = ""                   # where the queries come from, in words


def retrieval_inputs(es, side, settings) -> RetrievalInputs:
    """The queries (the ``queries`` side data, else the corpus itself), the judgements and the settings."""
    score = es.fields.get("score", "cosine")
    if "queries" in side:
        q = side.queries
        queries, qids, meta, source = q.vectors, q.ids, q.metadata, q.file
    else:
        queries, qids, meta, source = None, es.ids, es.metadata, "the corpus itself (no queries given)"
    return RetrievalInputs(queries, qids, es.ids, side.qrels, score if score in rt.METRICS_KIND else "cosine",
                           bool(side.exclude_self), settings.device, meta, source)


def retrieval_plan(inputs: RetrievalInputs, settings) -> rt.RetrievalPlan:
    """The evaluated queries and their judgements, the score, the tie policy and the own-document rule
    (:func:`~embeval_report.metrics.retrieval.retrieval_plan`): from the judgements and the ids only."""
    return rt.retrieval_plan(inputs.qrels, query_ids=inputs.query_ids, doc_ids=inputs.doc_ids, metric=inputs.metric,
                             exclude_self=inputs.exclude_self, label="qrels")


def retrieval_run(X, inputs: RetrievalInputs, plan: rt.RetrievalPlan) -> rt.RetrievalRun:
    """``X`` (the corpus) ranked for every evaluated query: the query vectors are ``X`` itself when the corpus is
    the queries."""
    return rt.run_retrieval(X if inputs.queries is None else inputs.queries, X, plan, device=inputs.device)


def _map_queries(inputs: RetrievalInputs, f) -> RetrievalInputs:
    """The inputs with the query vectors mapped by ``f`` (a remedy applied to the set applies to its queries)."""
    return inputs if inputs.queries is None else replace(inputs, queries=f(inputs.queries))


#: retrieval scored per query: trec_eval's metrics of each evaluated query; the chapter's numbers are their means
SCORER = TaskScorer(
    unit="queries", key="query_id", columns=("n_judged", "n_relevant", "first_relevant_rank", *rt.METRICS,
                                             rt.JUDGED_NDCG),
    aggregates=(*(Aggregate(m, mean_of=m) for m in rt.METRICS),
                # a mean over queries too, paired by the bootstrap: it has never been a per-unit mean of the rigor
                # chapter (its power), so the report records no new number for it
                Aggregate(rt.JUDGED_NDCG, fn=lambda t: float(np.asarray(t[rt.JUDGED_NDCG], float).mean()),
                          unit_column=rt.JUDGED_NDCG, boot=partial(weighted_mean, column=rt.JUDGED_NDCG))),
    inputs=retrieval_inputs, plan=retrieval_plan,
    score=lambda X, inputs, plan: retrieval_run(X, inputs, plan).per_query, map_inputs=_map_queries)


def compute(ctx: ChapterContext) -> RetrievalReport:
    """Rank the corpus for every judged query and record the metrics."""
    es = ctx.es
    inputs = SCORER.inputs(es, ctx.side, ctx.settings)
    plan = SCORER.plan(inputs, ctx.settings)
    run = retrieval_run(es.vectors, inputs, plan)  # the scorer's units, with the ranks the chapter also shows
    units = check_units(run.per_query, SCORER.key, SCORER.columns)
    Q = es.vectors if inputs.queries is None else inputs.queries
    result = rt.evaluate_retrieval(Q, es.vectors, ctx.side.qrels, query_ids=inputs.query_ids, doc_ids=es.ids,
                                   metric=plan.metric, exclude_self=plan.exclude_self, level=ctx.level, seed=ctx.seed,
                                   device=ctx.device, label="qrels", plan=plan, run=run)
    ctx.rec.add(*result.metrics.values())
    ctx.rec.scored(SCORER, units, plan)
    ctx.rec.note(protocol=result.protocol, excluded_queries=result.excluded_queries[:50], **result.info)
    meta, qids = inputs.meta, inputs.query_ids
    groups, column = _query_groups(meta, qids)
    texts = {**texts_by_id(es.fields, es.metadata), **texts_by_id(None, meta)}
    rep = RetrievalReport(result, rt.cutoff_curves(result), groups, column, inputs.source, texts=texts,
                          qrels_note=str(es.fields.get("qrels_note") or ""))
    by_group = group_table(rep, ctx.level, seed=ctx.seed)
    if by_group is not None:
        ctx.rec.note(by_group={"column": column, "table": by_group.to_dict(orient="records")})
    return replace(rep, by_group=by_group)


def _query_groups(meta: pd.DataFrame | None, qids) -> tuple[pd.Series | None, str | None]:
    """Query id -> group label from the queries' metadata (its first group-like column), if any."""
    if meta is None:
        return None, None
    table = meta.set_index("id") if "id" in meta.columns else meta
    column = group_column(table)
    if column is None:
        return None, None
    return table[column].reindex(pd.Index(qids, dtype=object)), column


# ---------------------------------------------------------------------------------------------
# Numbers, narrative, tables, figures
# ---------------------------------------------------------------------------------------------

def _value(r: rt.RetrievalResult, name: str, fmt: str = ".3f") -> str:
    m = r.metrics[name]
    return value_with_ci(m.value, m.ci_low, m.ci_high, fmt)


def narrative(rep: RetrievalReport) -> str:
    """What the numbers say about this model's retrieval."""
    r, p = rep.result, rep.result.protocol
    pq = r.per_query
    first = pq["first_relevant_rank"]
    miss10 = float((first > 10).mean())
    parts = [
        f"**{p['n_evaluated']:,} queries** with at least one relevant document ranked all {p['n_docs']:,} documents "
        f"by {p['metric']} similarity (exact, every document). nDCG@10 is {_value(r, 'ndcg_at_10')}, recall@10 "
        f"{_value(r, 'recall_at_10')} and MRR {_value(r, 'mrr')}; the first relevant document of a query is at "
        f"median rank {number(float(first.median()), 3)} (mean {number(float(first.mean()), 3)}).",
        f"{percent(miss10, 1)} of the queries find no relevant document in the top 10 "
        f"(hit rate@10 {_value(r, 'hit_rate_at_10')}); recall@100 is {_value(r, 'recall_at_100')}, so "
        + ("most relevant documents are within reach of a re-ranker that reads the top 100."
           if r.values["recall_at_100"] >= 0.8 else
           "a re-ranker reading the top 100 would still miss a sizeable share of the relevant documents: the "
           "first stage itself loses them."),
    ]
    gap = r.values["ndcg_at_10_exp"] - r.values["ndcg_at_10"]
    if abs(gap) >= 0.01:
        parts.append(f"With exponential gain (2^rel − 1, which rewards the highest grades more) nDCG@10 is "
                     f"{r.values['ndcg_at_10_exp']:.3f}, {'above' if gap > 0 else 'below'} the linear-gain value: the "
                     f"model places the most relevant documents {'better' if gap > 0 else 'worse'} than the "
                     "merely relevant ones.")
    parts.append(judgements_text(rep))
    skipped = p["n_without_relevant"] + p["n_unjudged"]
    if skipped:
        parts.append(f"{p['n_without_relevant']:,} judged queries have no relevant document and "
                     f"{p['n_unjudged']:,} queries have no judgement at all; both are left out of every mean "
                     "(trec_eval's convention), so the numbers describe answerable queries only.")
    return "\n\n".join(parts)


def judgements_text(rep: RetrievalReport) -> str:
    """How the judgements cover the corpus and the top lists, how the grades were made (the manifest's
    ``qrels_note``), and nDCG@10 over the judged documents alone when unjudged ones reach the top lists."""
    r, p = rep.result, rep.result.protocol
    cov = r.info["judgements"]
    grades = r.relevant["relevance"].value_counts().sort_index(ascending=False)
    n_zero = p["n_judgements"] - p["n_relevant_judgements"]
    text = (f"**Judgements.** {p['n_judgements']:,} judgements: "
            + ", ".join(f"{int(n):,} of grade {int(g)}" for g, n in grades.items())
            + f" and {n_zero:,} of grade 0 (judged non-relevant)."
            + (f" How the grades were made: {escape(rep.qrels_note.strip().rstrip('.'))}." if rep.qrels_note else ""))
    if cov["docs_never_judged"]:
        text += (f" {cov['docs_never_judged']:,} of the {p['n_docs']:,} documents "
                 f"({percent(cov['share_never_judged'], 0)}) are judged for no query: like every document a query has "
                 "no judgement for, they count as non-relevant wherever they are retrieved (trec_eval's convention).")
    m = r.metrics.get(rt.JUDGED_NDCG)
    if m is not None and cov["unjudged_in_top"] > 0:
        text += (f" A query's top {cov['top_k']} holds {number(cov['unjudged_in_top'], 3)} unjudged documents on "
                 f"average; over the judged documents alone (condensed lists: each ranking without its unjudged "
                 f"documents; Sakai 2007, trec_eval -J) nDCG@10 is {_value(r, rt.JUDGED_NDCG)}, against "
                 f"{_value(r, 'ndcg_at_10')} over the full lists. The full-list value counts the unjudged documents "
                 "the model ranks high as misses, the judged-only value ignores them: if some of them are relevant, "
                 "the model's true nDCG@10 lies between the two.")
    return text


def curves_figure(curves: pd.DataFrame) -> plt.Figure:
    """Mean recall@k and precision@k for k = 1..100."""
    fig, ax = plt.subplots(figsize=(WIDTH * 0.62, 3.0))
    ax.plot(curves["k"], curves["recall"], color=PALETTE["data"], label="recall@k")
    ax.plot(curves["k"], curves["precision"], color=PALETTE["accent"], label="precision@k")
    ax.set_xscale("log")
    ax.set_xlabel("cut-off k")
    ax.set_ylabel("mean over queries")
    ax.set_ylim(0, 1.02)
    for k in (1, 10, 100):
        ax.axvline(k, color=PALETTE["muted"], lw=0.6, ls=":")
    ax.legend(frameon=False, fontsize=8)
    return fig


def distribution_figure(per_query: pd.DataFrame, n_docs: int) -> plt.Figure:
    """Per-query nDCG@10 and the rank of the first relevant document."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 2.8))
    a.hist(per_query["ndcg_at_10"], bins=np.linspace(0, 1, 21), color=PALETTE["data"])
    a.set_xlabel("nDCG@10 of a query")
    a.set_ylabel("queries")
    first = per_query["first_relevant_rank"].to_numpy(float)
    edges = np.unique(np.geomspace(1, max(n_docs, 2) + 1, 25).round())
    b.hist(first, bins=edges, color=PALETTE["accent"])
    b.set_xscale("log")
    b.axvline(10.5, color=PALETTE["muted"], lw=0.8, ls="--")
    b.set_xlabel("rank of the first relevant document")
    return fig


def worst_queries(rep: RetrievalReport, n: int = WORST) -> pd.DataFrame:
    """The queries ranked worst (lowest nDCG@10, then latest first relevant document), with what they retrieved
    and what they should have (✓ marks a relevant document, its grade in brackets)."""
    r = rep.result
    worst = r.per_query.sort_values(["ndcg_at_10", "first_relevant_rank"], ascending=[True, False]).head(n)
    top = r.top[r.top["rank"] <= SHOWN_DOCS].groupby("query_id")
    rel = r.relevant.sort_values(["query_id", "relevance", "rank"], ascending=[True, False, True]).groupby("query_id")
    texts = rep.texts

    def named(i, width=DOC_SNIPPET) -> str:  # an id, with the start of its text when the set has texts
        return f"{i} “{snippet(texts[str(i)], width)}”" if str(i) in texts else str(i)

    rows = []
    for _, q in worst.iterrows():
        retrieved = top.get_group(q["query_id"]) if q["query_id"] in top.groups else pd.DataFrame()
        shown = [f"{named(d)}{' ✓(' + str(int(g)) + ')' if pd.notna(g) and g >= 1 else ''}"
                 for d, g in zip(retrieved.get("doc_id", []), retrieved.get("relevance", []))]
        wanted = rel.get_group(q["query_id"]).head(SHOWN_DOCS)
        rows.append({"query": named(q["query_id"], SNIPPET), "relevant": int(q["n_relevant"]),
                     "first relevant at": int(q["first_relevant_rank"]), "nDCG@10": f"{q['ndcg_at_10']:.2f}",
                     f"top {SHOWN_DOCS} retrieved": ", ".join(shown),
                     "relevant documents (rank)": ", ".join(f"{named(d)} ({int(k)})"
                                                            for d, k in zip(wanted["doc_id"], wanted["rank"]))})
    return pd.DataFrame(rows)


def group_table(rep: RetrievalReport, level: float = 0.95, *, seed: int = 0) -> pd.DataFrame | None:
    """Per query group: queries, nDCG@10, recall@10 and MRR with bootstrap intervals (seeded) over the group's
    queries."""
    if rep.groups is None:
        return None
    pq = rep.result.per_query.assign(group=rep.groups.reindex(rep.result.per_query["query_id"]).to_numpy())
    pq = pq[pq["group"].notna()]
    if pq["group"].nunique() < 2:
        return None
    rows = []
    for g, part in pq.groupby("group", sort=True):
        row = {"group": str(g), "queries": len(part)}
        for name, label in (("ndcg_at_10", "nDCG@10"), ("recall_at_10", "recall@10"), ("mrr", "MRR")):
            lo, hi, _ = (mean_ci(part[name].to_numpy(), level, seed=seed, units="queries") if len(part) > 1
                         else (np.nan, np.nan, ""))
            row[label] = f"{part[name].mean():.3f}" + (f" ({lo:.3f}–{hi:.3f})" if np.isfinite([lo, hi]).all() else "")
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: RetrievalReport) -> None:
    show_markdown(narrative(rep))


def show_metrics(rep: RetrievalReport) -> None:
    r = rep.result
    show_metric_table(r.metrics, caption=f"Retrieval metrics over {r.protocol['n_evaluated']:,} queries, each "
                                         f"ranking all {r.protocol['n_docs']:,} documents exactly by "
                                         f"{r.protocol['metric']} similarity; trec_eval definitions, means over "
                                         "queries with at least one relevant document, bootstrap intervals over "
                                         "queries. No verdict: retrieval quality depends on the task and corpus.",
                      label="tbl-retrieval-metrics")


def show_curves(rep: RetrievalReport) -> None:
    show_figure(curves_figure(rep.curves),
                caption="Mean recall@k and precision@k by cut-off (log scale): recall rises towards the share of "
                        "relevant documents the model ever ranks well; precision falls as k outgrows the number "
                        "of relevant documents per query.", label="fig-retrieval-curves")


def show_distribution(rep: RetrievalReport) -> None:
    r = rep.result
    show_figure(distribution_figure(r.per_query, r.protocol["n_docs"]),
                caption="Per query: nDCG@10 (left) and the rank of the first relevant document (right, log bins; "
                        "the dashed line is rank 10). A mass at nDCG 0 is the queries the model fails outright.",
                label="fig-retrieval-distribution")


def show_worst(rep: RetrievalReport) -> None:
    show_table(worst_queries(rep),
               caption=f"The {WORST} worst queries: lowest nDCG@10, then latest first relevant document. ✓(g): a "
                       f"retrieved document judged relevant with grade g; the relevant documents with their ranks"
                       + ("; each id with the start of its text." if rep.texts else "."),
               label="tbl-retrieval-worst")


def show_groups(rep: RetrievalReport) -> None:
    t = rep.by_group
    if t is None:
        show_markdown("No breakdown: the queries have no group column (give `queries: {metadata: ...}` with a "
                      "`group`, `kind`, `type` or `label` column).")
        return
    show_table(t, caption=f"By query {rep.group_name}: means with 95 % bootstrap intervals over the group's "
                          "queries.", label="tbl-retrieval-groups")


def show_protocol(rep: RetrievalReport) -> None:
    p = rep.result.protocol
    rows = [("queries from", rep.queries_from), ("documents ranked", f"{p['n_docs']:,} (all, exact)"),
            ("score", p["metric"]),
            ("ties", "equal scores: the larger document id first (trec_eval)" if p["ties"] == "trec_eval"
             else "equal scores: the lower row first"),
            ("own document", "excluded from its query's ranking" if p["exclude_self"] else "ranked like any other"),
            ("judgements", f"{p['n_judgements']:,} ({p['n_relevant_judgements']:,} with grade ≥ 1)"),
            ("queries evaluated", f"{p['n_evaluated']:,} of {p['n_queries']:,}"),
            ("left out", f"{p['n_without_relevant']:,} without a relevant document, {p['n_unjudged']:,} unjudged"
             + (f"; {p['self_judgements_dropped']:,} judgements of a query's own document dropped"
                if p["self_judgements_dropped"] else ""))]
    show_table(pd.DataFrame(rows, columns=["setting", "value"]), caption="The evaluation protocol.",
               label="tbl-retrieval-protocol")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

CHAPTER = ChapterSpec(
    name="retrieval", title="Retrieval", order=85,
    description="Retrieval quality on judged queries: recall, precision, MAP, MRR and nDCG with trec_eval's definitions over an exact ranking of the whole corpus (seed 001 §21.2).",
    requires=("qrels",), optional=("queries", "exclude_self"),
    precheck=precheck, demo="retrieval", scorer=SCORER,
)
