r"""Retrieval metrics (seed 001 §21.2): the exact rank of every judged relevant document in the
full-corpus ranking of its query, and trec_eval's per-query metrics with their means over queries.

**Ranking.** Each query ranks the whole corpus by cosine similarity (``metric="cosine"``) or by
the inner product (``"dot"``); with ``exclude_self`` a document whose id equals the query id is
left out of that query's ranking (BEIR's ``ignore_identical_ids``; a judgement of it is dropped and
counted, since it could never be retrieved). The *score* of a (query, document) pair is its float64
inner product of the float64 (unit, for cosine) vectors, summed as a fixed pairwise tree
(:func:`pair_scores`): bitwise the same for the same two vectors whatever the batch, so duplicate
documents tie exactly. The rank of document :math:`d` for query :math:`q` is

.. math:: r_q(d) = 1 + \#\{d' : s(q,d') > s(q,d)\} + \#\{d' : s(q,d') = s(q,d),\ d' \text{ before } d\},

**tie policy** ``ties="trec_eval"`` (default): among equal scores the document with the
lexicographically *larger* id comes first (trec_eval sorts by score, then by ``docno``
descending — ``strcmp`` on UTF-8 bytes, the same as Python's ``str`` order; pytrec_eval inherits
it), so ranks agree with trec_eval and pytrec_eval even on tied scores (ranx may order ties
otherwise); ``ties="index"``: the lower corpus row first (the order of
:func:`~embeval_report.kernels.knn`).

**Metrics** (trec_eval semantics; grade ``>= 1`` relevant, 0 judged non-relevant). For a query
with :math:`R_q \ge 1` relevant documents: ``recall_at_k`` (k = 1, 5, 10, 100) the share of them
ranked within k (trec_eval ``recall_k``); ``r_cap_at_10`` found within 10 over
:math:`\min(10, R_q)` (BEIR's capped recall); ``precision_at_k`` (k = 1, 5, 10) found over k, always
k (``P_k``); ``hit_rate_at_10`` whether any is within 10 (``success_10``); ``map`` average precision
over the whole ranking, :math:`\frac1{R_q}\sum_{d} P@r_q(d)` (``map``); ``map_at_100`` the same sum
cut at rank 100, still over :math:`R_q` (``map_cut_100``; seed 001's MAP@K instead divides by the
relevant documents found within K, which inflates it and is not computed here); ``mrr``
:math:`1/\min_d r_q(d)` uncut (``recip_rank``) and ``mrr_at_10`` (0 beyond rank 10);
``ndcg_at_10`` :math:`\mathrm{DCG}@10/\mathrm{IDCG}@10` with linear gain :math:`g` (the grade) and
discount :math:`\log_2(r + 1)`, the ideal list built from *all* the query's judged grades
(``ndcg_cut_10``; Järvelin & Kekäläinen 2002), and ``ndcg_at_10_exp`` the same with gain
:math:`2^g - 1` (Burges et al. 2005; seed 001 §21.2.5's formula; ranx ``ndcg_burges``).
Each mean is over the evaluated queries; queries whose judgements hold no relevant document are
excluded and counted (``protocol["n_without_relevant"]``), as are queries without judgements.
Each mean has a seeded bootstrap interval over queries (:func:`~embeval_report.stats.mean_ci`).

**Unjudged documents** count as non-relevant wherever they are retrieved (trec_eval's convention).
``ndcg_at_10_judged`` is nDCG@10 over *condensed* lists (Sakai 2007, "Alternatives to Bpref"; trec_eval
``-J``, pytrec_eval's ``judged_docs_only_flag``): each query's ranking with every document it has no
judgement for removed, so the judged documents close the gaps. It reads the model on the judged documents
alone, the upper reading when the unjudged documents it ranks high may be relevant; it is recorded with the
other metrics but is not a per-unit mean of the rigor chapter.

**Exact ranks without a score matrix** (:func:`rank_relevant`). No (queries x corpus) matrix is
built: query blocks are multiplied with corpus tiles in float32 (IEEE, TF32 off; GPU when present)
and, per tile, each document is placed among the query's sorted relevant scores (a comparison
loop for up to :data:`LOOP_SLOTS` relevant documents per query, ``searchsorted`` beyond; when few
documents lie above a block's lowest relevant scores, only those are placed): documents whose
float32 product is farther than the rounding bound
:math:`t_q = 2(d + 4)\,2^{-24}\lVert q\rVert\max_j\lVert c_j\rVert` from every relevant score are
certainly above or below each of them (the float32 product of d terms is within
:math:`(d + 2)\,2^{-24}\lVert q\rVert\lVert c\rVert` of the exact one); the few within the bound are
re-scored exactly (:func:`pair_scores`) and compared with the tie policy, as the relevant
documents are among themselves. The same tiles keep each query's running float32 top
``top_k + 16``, re-ranked exactly; when the 16 spare candidates cannot prove the list (a float32
near-tie at its end) that query's list comes from an exact scan. Memory: one tile of
:func:`~embeval_report.kernels.chunk_budget` bytes (GPU: a share of free memory), the float32
corpus on the device and two float64 numbers per vector; the exact re-scoring reads the input rows
(float64 on the CPU), so a memory-mapped input stays on disk.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import InputError
from ..io.files import as_ids, check_unique
from ..io.qrels import qrels_frame
from ..kernels import as_numpy, resolve_device
from ..kernels.ranking import METRICS_KIND, TOP_K, RelevantRanks, Space, pair_scores, rank_relevant, tie_keys
from ..stats import DEFAULT_LEVEL, mean_ci
from .spec import MetricSpec, record_metrics, specs

RECALL_KS = (1, 5, 10, 100)
PRECISION_KS = (1, 5, 10)
#: unit of the bootstrap intervals
UNIT = "queries"



def _found(k):
    return r"|\{d \in \mathrm{rel}(q) : r_q(d) \le %d\}|" % k


_Q = r"\frac{1}{|Q|}\sum_{q \in Q}"
_NDCG = (r"%s \frac{\sum_{i \le 10} %s / \log_2(i + 1)}{\sum_{i \le 10} %s / \log_2(i + 1)}")


def _ref(section: str, trec: str) -> str:
    return f"seed 001 §{section}; trec_eval {trec} (pytrec_eval, ranx)"


#: nDCG@10 over condensed lists (judged documents only): recorded, but not among :data:`METRICS` (the per-query
#: means the report pairs and powers), so the trec_eval contract stays as it is
JUDGED_NDCG = "ndcg_at_10_judged"

SPECS = specs(
    *(MetricSpec(f"recall_at_{k}", f"Recall@{k}", "higher", rf"{_Q} \frac{{{_found(k)}}}{{R_q}}",
                 _ref("21.2.1", f"recall_{k}"), range=(0, 1)) for k in RECALL_KS),
    MetricSpec("r_cap_at_10", "Capped recall@10", "higher", rf"{_Q} \frac{{{_found(10)}}}{{\min(10, R_q)}}",
               "seed 001 §21.2.1; BEIR R_cap@10 (Thakur et al. 2021)", range=(0, 1)),
    *(MetricSpec(f"precision_at_{k}", f"Precision@{k}", "higher", rf"{_Q} \frac{{{_found(k)}}}{{{k}}}",
                 _ref("21.2.2", f"P_{k}"), range=(0, 1)) for k in PRECISION_KS),
    MetricSpec("hit_rate_at_10", "Hit rate@10", "higher", rf"{_Q} [\min_{{d \in \mathrm{{rel}}(q)}} r_q(d) \le 10]",
               _ref("21.2.1", "success_10"), range=(0, 1)),
    MetricSpec("map", "MAP", "higher",
               rf"{_Q} \frac{{1}}{{R_q}} \sum_{{d \in \mathrm{{rel}}(q)}} P@r_q(d)", _ref("21.2.3", "map"), range=(0, 1)),
    MetricSpec("map_at_100", "MAP@100", "higher",
               rf"{_Q} \frac{{1}}{{R_q}} \sum_{{d \in \mathrm{{rel}}(q),\, r_q(d) \le 100}} P@r_q(d)",
               _ref("21.2.3", "map_cut_100"), range=(0, 1)),
    MetricSpec("mrr", "MRR", "higher", rf"{_Q} \frac{{1}}{{\min_{{d \in \mathrm{{rel}}(q)}} r_q(d)}}",
               _ref("21.2.4", "recip_rank"), range=(0, 1)),
    MetricSpec("mrr_at_10", "MRR@10", "higher",
               rf"{_Q} \frac{{[\rho_q \le 10]}}{{\rho_q}},\ \rho_q = \min_{{d \in \mathrm{{rel}}(q)}} r_q(d)",
               "seed 001 §21.2.4; ranx mrr@10 (MS MARCO MRR@10)", range=(0, 1)),
    MetricSpec("ndcg_at_10", "nDCG@10 (linear gain)", "higher", _NDCG % (_Q, "g_{q,i}", "g^*_{q,i}"),
               _ref("21.2.5", "ndcg_cut_10") + "; Järvelin & Kekäläinen 2002", range=(0, 1)),
    MetricSpec("ndcg_at_10_exp", "nDCG@10 (exponential gain)", "higher",
               _NDCG % (_Q, "(2^{g_{q,i}} - 1)", "(2^{g^*_{q,i}} - 1)"),
               "seed 001 §21.2.5 (its gain 2^rel - 1); Burges et al. 2005; ranx ndcg_burges@10", range=(0, 1)),
    MetricSpec(JUDGED_NDCG, "nDCG@10, judged documents only", "higher", _NDCG % (_Q, "g^J_{q,i}", "g^*_{q,i}"),
               "Sakai 2007 (condensed lists); trec_eval -J ndcg_cut_10 (pytrec_eval judged_docs_only_flag)",
               range=(0, 1)),
)
METRICS = tuple(n for n in SPECS if n != JUDGED_NDCG)


# ---------------------------------------------------------------------------------------------

def per_query_metrics(judged: pd.DataFrame) -> pd.DataFrame:
    """trec_eval's per-query metrics from the ranks of the judged documents.

    ``judged``: one row per judgement with columns ``query_id``, ``relevance`` (int grade) and
    ``rank`` (the document's 1-based rank in the query's full ranking; may be NaN for grade 0,
    which needs none). Returns one row per query with at least one relevant document (order of
    first appearance): ``query_id``, ``n_judged``, ``n_relevant``, ``first_relevant_rank`` and every
    metric of :data:`METRICS`.
    """
    codes, uniques = pd.factorize(judged["query_id"], sort=False)
    nq = len(uniques)
    g = judged["relevance"].to_numpy(np.int64)
    rel = g >= 1
    rank = judged["rank"].to_numpy(np.float64)[rel]
    if not np.isfinite(rank).all() or (rank < 1).any():
        raise ValueError("every relevant judgement needs a rank >= 1")
    rc, rr, rg = codes[rel], rank.astype(np.int64), g[rel]
    n_judged = np.bincount(codes, minlength=nq)
    R = np.bincount(rc, minlength=nq)
    keep = R > 0
    Rf = np.maximum(R, 1).astype(float)

    def per_q(weights, c=rc):
        return np.bincount(c, weights=np.asarray(weights, float), minlength=nq)

    out = {"query_id": np.asarray(uniques, dtype=object), "n_judged": n_judged, "n_relevant": R}
    first = np.full(nq, np.iinfo(np.int64).max)
    np.minimum.at(first, rc, rr)
    out["first_relevant_rank"] = first
    found = {k: per_q(rr <= k) for k in sorted(set(RECALL_KS) | set(PRECISION_KS))}
    for k in RECALL_KS:
        out[f"recall_at_{k}"] = found[k] / Rf
    out["r_cap_at_10"] = found[10] / np.minimum(10, np.maximum(R, 1))
    for k in PRECISION_KS:
        out[f"precision_at_{k}"] = found[k] / k
    out["hit_rate_at_10"] = (found[10] > 0).astype(float)
    o = np.lexsort((rr, rc))
    c_s, r_s = rc[o], rr[o]
    prec = (np.arange(len(o)) - np.searchsorted(c_s, c_s) + 1) / r_s  # P@r at the j-th relevant document
    out["map"] = per_q(prec, c_s) / Rf
    out["map_at_100"] = per_q(prec * (r_s <= 100), c_s) / Rf
    out["mrr"] = 1.0 / first
    out["mrr_at_10"] = np.where(first <= 10, 1.0 / first, 0.0)
    disc = np.where(rr <= 10, 1.0 / np.log2(rr + 1.0), 0.0)
    o = np.lexsort((-rg, rc))
    c_i, g_i = rc[o], rg[o]
    pos = np.arange(len(o)) - np.searchsorted(c_i, c_i) + 1
    idisc = np.where(pos <= 10, 1.0 / np.log2(pos + 1.0), 0.0)
    for name, gain in (("ndcg_at_10", lambda x: x.astype(float)), ("ndcg_at_10_exp", lambda x: 2.0 ** x - 1)):
        ideal = per_q(gain(g_i) * idisc, c_i)
        out[name] = per_q(gain(rg) * disc) / np.where(ideal > 0, ideal, 1.0)
    frame = pd.DataFrame(out)[keep].reset_index(drop=True)
    return frame[["query_id", "n_judged", "n_relevant", "first_relevant_rank", *METRICS]]


def judged_only_ndcg(judged: pd.DataFrame, tie_key: np.ndarray, k: int = 10) -> pd.Series:
    r"""nDCG@k over each query's condensed list (Sakai 2007; trec_eval ``-J``): the judged documents only.

    ``judged``: one row per judgement with ``query_id``, ``relevance`` (int grade), ``score`` (the exact
    score of the pair) and ``doc`` (the corpus row, to break ties by ``tie_key``, the ranking's tie
    policy). The condensed rank of a judged document is 1 + the judged documents of its query ranked above
    it; :math:`\mathrm{DCG}@k = \sum_{i \le k} g_i / \log_2(i + 1)` with linear gain over that list, over the
    ideal DCG of all the query's grades (as ``ndcg_at_10``). Returns a Series indexed by query id.
    """
    codes, uniques = pd.factorize(judged["query_id"], sort=False)
    g = judged["relevance"].to_numpy(np.int64).astype(float)
    order = np.lexsort((tie_key[judged["doc"].to_numpy(np.int64)], -judged["score"].to_numpy(float), codes))
    c = codes[order]
    pos = np.arange(len(order)) - np.searchsorted(c, c) + 1
    disc = np.where(pos <= k, 1.0 / np.log2(pos + 1.0), 0.0)
    dcg = np.bincount(c, weights=g[order] * disc, minlength=len(uniques))
    o = np.lexsort((-g, codes))
    ci = codes[o]
    ipos = np.arange(len(o)) - np.searchsorted(ci, ci) + 1
    ideal = np.bincount(ci, weights=g[o] * np.where(ipos <= k, 1.0 / np.log2(ipos + 1.0), 0.0), minlength=len(uniques))
    return pd.Series(dcg / np.where(ideal > 0, ideal, 1.0), index=pd.Index(uniques, dtype=object))


def judged_coverage(judged: pd.DataFrame, top: pd.DataFrame, n_docs: int, k: int = 10) -> dict:
    """How much of the corpus and of the top lists the judgements cover: ``docs_never_judged`` (documents
    judged for no query), ``share_never_judged``, and ``unjudged_in_top`` (the mean count of unjudged documents
    in a query's top ``k``) with ``top_k``."""
    never = n_docs - judged["doc_id"].nunique()
    head = top[top["rank"] <= k]
    per_query = head["relevance"].isna().groupby(head["query_id"]).sum()
    return {"docs_never_judged": int(never), "share_never_judged": never / n_docs if n_docs else float("nan"),
            "unjudged_in_top": float(per_query.mean()) if len(per_query) else float("nan"), "top_k": k}


# ---------------------------------------------------------------------------------------------
# The chapter's evaluation
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RetrievalResult:
    """Everything the retrieval chapter shows.

    ``values`` metric name -> mean over the evaluated queries; ``metrics`` name ->
    :class:`~embeval_report.metrics.spec.Metric` with its bootstrap interval; ``per_query`` one row
    per evaluated query (:func:`per_query_metrics`); ``relevant`` one row per relevant judgement
    (``query_id``, ``doc_id``, ``relevance``, ``score``, ``rank``); ``top`` each evaluated query's top
    list in long form (``query_id``, ``rank``, ``doc_id``, ``score``, ``relevance`` — the grade, ``<NA>``
    when unjudged); ``excluded_queries`` the judged queries without a relevant document;
    ``protocol`` the settings and counts; ``tag`` the short protocol label.
    """

    values: dict
    metrics: dict
    per_query: pd.DataFrame
    relevant: pd.DataFrame
    top: pd.DataFrame
    excluded_queries: list
    protocol: dict
    tag: str
    info: dict = field(default_factory=dict)


def protocol_tag(metric: str, n_docs: int, exclude_self: bool, ties: str) -> str:
    return (f"{metric}, exact ranking of {n_docs:,} documents, {'trec_eval' if ties == 'trec_eval' else 'row-order'}"
            f" ties{', own document excluded' if exclude_self else ''}")


@dataclass(frozen=True)
class RetrievalPlan:
    """The retrieval protocol, fixed before any vector is read: from the judgements, the ids and the options.

    ``judged`` the judgements used (``query_id``, ``doc_id``, ``relevance``; a query's judgement of its own
    document dropped under ``exclude_self``), ``qrow`` / ``drow`` their query and corpus rows; ``own`` each
    query's own corpus row (-1: none, or not excluded); ``evaluated`` the rows of the queries with a relevant
    judgement (the units, in the order of the query vectors); ``excluded`` the judged queries without one.
    """

    metric: str
    ties: str
    exclude_self: bool
    top_k: int
    query_ids: np.ndarray
    doc_ids: np.ndarray
    judged: pd.DataFrame
    qrow: np.ndarray
    drow: np.ndarray
    own: np.ndarray
    evaluated: np.ndarray
    excluded: list
    n_self_judged: int
    n_judged_queries: int

    @property
    def is_relevant(self) -> np.ndarray:
        """Which judgements are relevant (grade >= 1)."""
        return self.judged["relevance"].to_numpy(np.int64) >= 1


def retrieval_plan(qrels, *, query_ids, doc_ids, metric: str = "cosine", exclude_self: bool = False,
                   ties: str = "trec_eval", top_k: int = TOP_K, label: str = "qrels") -> RetrievalPlan:
    """The protocol of :func:`evaluate_retrieval` from the judgements and the ids alone (no vector is read):
    the judgements checked against the ids (``label`` naming them in messages), each query's own document
    dropped under ``exclude_self``, and the queries with a relevant judgement. Raises
    :class:`~embeval_report.errors.InputError` when no judged query has a relevant document."""
    if metric not in METRICS_KIND:
        raise ValueError(f"metric must be one of {METRICS_KIND}, not {metric!r}")
    qids, dids = as_ids(query_ids, "query ids"), as_ids(doc_ids, "document ids")
    for ids, what in ((qids, "query"), (dids, "corpus")):
        check_unique(ids, f"{what} ids")
    judged = qrels_frame(qrels, query_ids=qids, doc_ids=dids, label=label)
    qrow = pd.Index(qids).get_indexer(judged["query_id"].to_numpy(dtype=object))
    drow = pd.Index(dids).get_indexer(judged["doc_id"].to_numpy(dtype=object))
    own = pd.Index(dids).get_indexer(qids) if exclude_self else np.full(len(qids), -1)
    self_judged = own[qrow] == drow
    judged, qrow, drow = judged[~self_judged].reset_index(drop=True), qrow[~self_judged], drow[~self_judged]
    grade = judged["relevance"].to_numpy(np.int64)
    n_rel = np.bincount(qrow[grade >= 1], minlength=len(qids))
    has_judgement = np.bincount(qrow, minlength=len(qids)) > 0
    evaluated = np.flatnonzero(n_rel > 0)
    excluded = [str(qids[i]) for i in np.flatnonzero(has_judgement & (n_rel == 0))]
    if len(evaluated) == 0:
        raise InputError(f"{label}: no judged query has a relevant document (relevance >= 1)"
                         f"{' once each query’s own document is excluded' if self_judged.any() else ''}; "
                         "expected at least one")
    return RetrievalPlan(metric, ties, bool(exclude_self), top_k, qids, dids, judged, qrow, drow, own, evaluated,
                         excluded, int(self_judged.sum()), int(has_judgement.sum()))


@dataclass(frozen=True)
class RetrievalRun:
    """One set of vectors ranked on a plan: ``per_query`` the unit table (:func:`per_query_metrics` and
    ``ndcg_at_10_judged``, one row per evaluated query), ``judged`` the plan's judgements with the ``rank`` and
    ``score`` of each relevant one, ``ranks`` the exact ranks and top lists."""

    per_query: pd.DataFrame
    judged: pd.DataFrame
    ranks: RelevantRanks


def run_retrieval(queries, corpus, plan: RetrievalPlan, *, device="auto",
                  desc: str | None = "retrieval ranks") -> RetrievalRun:
    """Rank the corpus for every evaluated query of ``plan`` and compute each query's metrics. ``queries`` and
    ``corpus``: one vector per id of the plan (any vectors: a model's, another model's, a remedied copy)."""
    Q, C = as_numpy(queries), as_numpy(corpus)
    for ids, X, what in ((plan.query_ids, Q, "query"), (plan.doc_ids, C, "corpus")):
        if len(ids) != len(X):
            raise InputError(f"{len(ids)} {what} ids for {len(X)} {what} vectors; expected one id per vector")
    qrow, drow, evaluated = plan.qrow, plan.drow, plan.evaluated
    local = np.full(len(plan.query_ids), -1, np.int64)
    local[evaluated] = np.arange(len(evaluated))
    is_rel = plan.is_relevant
    rk = rank_relevant(Q[evaluated], C, local[qrow[is_rel]], drow[is_rel], metric=plan.metric, ties=plan.ties,
                       doc_ids=plan.doc_ids, exclude=plan.own[evaluated], top_k=plan.top_k, device=device, desc=desc)
    judged = plan.judged.assign(rank=np.nan, score=np.nan)
    judged.loc[is_rel, "rank"] = rk.ranks
    judged.loc[is_rel, "score"] = rk.scores
    # queries in the order of their vectors
    ordered = judged.assign(_q=qrow).sort_values("_q", kind="stable")
    per_query = per_query_metrics(ordered[ordered["_q"].isin(evaluated)])
    # judged documents only: every judgement of an evaluated query, with its exact score
    ev = ordered[ordered["_q"].isin(evaluated)]
    ev_drow = drow[ev.index.to_numpy()]
    scores = ev["score"].to_numpy(float).copy()
    zero = ~np.isfinite(scores)  # grade-0 judgements have no rank: score them exactly here
    if zero.any():
        Qs, Cs = Space.of(Q[evaluated], plan.metric), Space.of(C, plan.metric)
        scores[zero] = pair_scores(Qs, Cs, local[ev["_q"].to_numpy()[zero]], ev_drow[zero])
    tk = tie_keys(np.arange(len(plan.doc_ids)) if plan.ties == "index" else plan.doc_ids, plan.ties)
    condensed = judged_only_ndcg(ev.assign(score=scores, doc=ev_drow), tk)
    per_query[JUDGED_NDCG] = condensed.reindex(per_query["query_id"].to_numpy()).to_numpy()
    return RetrievalRun(per_query, judged, rk)


def evaluate_retrieval(queries, corpus, qrels, *, query_ids, doc_ids, metric: str = "cosine",
                       exclude_self: bool = False, ties: str = "trec_eval", top_k: int = TOP_K,
                       level: float = DEFAULT_LEVEL, seed: int = 0, device="auto", label: str = "qrels",
                       desc: str | None = "retrieval ranks", plan: RetrievalPlan | None = None,
                       run: RetrievalRun | None = None) -> RetrievalResult:
    """Rank the corpus for every judged query and compute the chapter's metrics.

    ``queries`` (m, d) and ``corpus`` (n, d) vectors with their ids ``query_ids`` / ``doc_ids``;
    ``qrels`` the judgements (a table from :func:`~embeval_report.io.qrels.read_qrels`, or a mapping
    ``{query_id: {doc_id: grade}}``; checked against the ids, ``label`` naming them in messages).
    ``metric`` ``"cosine"`` or ``"dot"``; ``exclude_self`` leaves each query's own id out of its
    ranking; ``ties`` the tie policy (module docstring). Means get ``level`` bootstrap intervals
    over queries (seeded by ``seed``). Raises :class:`~embeval_report.errors.InputError` when no
    judged query has a relevant document. ``plan`` (:func:`retrieval_plan`) and ``run``
    (:func:`run_retrieval`): the protocol and the ranking when already made (the other arguments then
    describe the same protocol; ``metric``, ``ties``, ``exclude_self``, ``top_k`` are the plan's).
    """
    if metric not in METRICS_KIND:
        raise ValueError(f"metric must be one of {METRICS_KIND}, not {metric!r}")
    Q, C = as_numpy(queries), as_numpy(corpus)
    qids, dids = as_ids(query_ids, "query ids"), as_ids(doc_ids, "document ids")
    for ids, X, what in ((qids, Q, "query"), (dids, C, "corpus")):
        if len(ids) != len(X):
            raise InputError(f"{len(ids)} {what} ids for {len(X)} {what} vectors; expected one id per vector")
        check_unique(ids, f"{what} ids")
        if not np.isfinite(X).all():
            raise InputError(f"{what} vectors: row {int(np.argmax(~np.isfinite(X).all(1))) + 1} holds a "
                             "non-finite value; expected finite numbers")
    if plan is None:
        plan = retrieval_plan(qrels, query_ids=qids, doc_ids=dids, metric=metric, exclude_self=exclude_self,
                              ties=ties, top_k=top_k, label=label)
    if run is None:
        run = run_retrieval(Q, C, plan, device=device, desc=desc)
    metric, ties, exclude_self, top_k = plan.metric, plan.ties, plan.exclude_self, plan.top_k
    per_query, judged, rk, evaluated = run.per_query, run.judged, run.ranks, plan.evaluated
    is_rel = plan.is_relevant
    values = {name: float(per_query[name].mean()) for name in (*METRICS, JUDGED_NDCG)}
    cis = {name: mean_ci(per_query[name].to_numpy(), level, seed=seed, units=UNIT) for name in (*METRICS, JUDGED_NDCG)}
    tag = protocol_tag(metric, len(dids), exclude_self, ties)
    metrics = record_metrics(SPECS, values, cis, metric)  # the label names the score; the protocol holds the rest
    relevant = judged[is_rel][["query_id", "doc_id", "relevance", "score", "rank"]].reset_index(drop=True)
    relevant["rank"] = relevant["rank"].astype(np.int64)
    top = _top_frame(qids[evaluated], rk, dids, judged)
    protocol = dict(metric=metric, ties=ties, exclude_self=exclude_self, level=level, seed=seed, top_k=top_k,
                    n_docs=len(dids), n_queries=len(qids), n_judged_queries=plan.n_judged_queries,
                    n_evaluated=len(evaluated), n_without_relevant=len(plan.excluded),
                    n_unjudged=len(qids) - plan.n_judged_queries, n_judgements=int(len(judged)),
                    n_relevant_judgements=int(is_rel.sum()), self_judgements_dropped=plan.n_self_judged)
    info = dict(device=str(resolve_device(device)), rescored_pairs=rk.n_rescored, top_list_scans=rk.n_top_scans,
                judgements=judged_coverage(judged, top, len(dids)))
    return RetrievalResult(values=values, metrics=metrics, per_query=per_query, relevant=relevant, top=top,
                           excluded_queries=list(plan.excluded), protocol=protocol, tag=tag, info=info)


def _top_frame(qids, rk: RelevantRanks, dids, judged: pd.DataFrame) -> pd.DataFrame:
    m, k = rk.top_rows.shape
    ok = rk.top_rows >= 0
    r, c = np.nonzero(ok)
    top = pd.DataFrame({"query_id": np.asarray(qids, dtype=object)[r], "rank": c + 1,
                        "doc_id": np.asarray(dids, dtype=object)[rk.top_rows[r, c]], "score": rk.top_scores[r, c]})
    grades = judged.set_index(["query_id", "doc_id"])["relevance"]
    idx = pd.MultiIndex.from_arrays([top["query_id"], top["doc_id"]])
    top["relevance"] = pd.array(grades.reindex(idx).to_numpy(), dtype="Int64")
    return top


def cutoff_curves(result: RetrievalResult, max_k: int = 100) -> pd.DataFrame:
    """Mean recall@k and precision@k over the evaluated queries for k = 1..``max_k`` (from the exact ranks)."""
    pq = result.per_query.set_index("query_id")
    rel = result.relevant[result.relevant["rank"] <= max_k]
    hits = np.zeros((len(pq), max_k + 1))
    np.add.at(hits, (pq.index.get_indexer(rel["query_id"]), rel["rank"].to_numpy()), 1)
    found = hits.cumsum(1)[:, 1:]
    k = np.arange(1, max_k + 1)
    return pd.DataFrame({"k": k, "recall": (found / pq["n_relevant"].to_numpy()[:, None]).mean(0),
                         "precision": (found / k).mean(0)})
