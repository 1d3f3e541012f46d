r"""Link prediction from fixed vectors: every test edge ranked against its negatives (seed 002;
seed 000 §218.1, §219.2).

Metrics (seed 002's definitions): ``mean_rank`` :math:`\frac1B\sum_i r_i` (lower; best 1), ``mrr``
:math:`\frac1B\sum_i 1/r_i`, ``hits_at_k`` :math:`\frac1B\sum_i [r_i \le k]` for k = 1, 10, 50, and
``auc`` the probability that a random positive outscores a random negative, *any* negative of
any test edge (ties count ½), computed exactly over all pairs (PBG estimates it from random pairs).
Averages are over all test edges, each counting once, which is PBG's global average (its
per-bucket stats are sums divided by the total count); per-relation values are kept beside it.

Chance-adjusted (Hoyt et al. 2022; PyKEEN ``AdjustedArithmeticMeanRankIndex`` etc.), with the
expectation under uniformly random ranking of each edge's :math:`N_i` candidates:
:math:`\mathrm{AMRI} = 1 - \frac{\mathrm{MR} - 1}{\mathbb E[\mathrm{MR}] - 1}`,
:math:`\mathbb E[\mathrm{MR}] = \frac1B \sum_i \frac{N_i + 1}{2}`; adjusted MRR
:math:`\frac{\mathrm{MRR} - \mathbb E}{1 - \mathbb E}` with :math:`\mathbb E[\mathrm{MRR}] = \frac1B\sum_i H_{N_i}/N_i`;
adjusted Hits@k likewise with :math:`\mathbb E = \frac1B \sum_i \min(k, N_i)/N_i`. 0 = chance, 1 = perfect,
comparable across negative counts.

Scoring and ranking: :mod:`.ranks`; the probes and the negative-sampling quality:
:mod:`.edge_probes`; splits, negatives and heuristics: :mod:`.graph`; the temporal protocol:
:mod:`.temporal`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..io.graph import DEFAULT_SCORE, EdgeList
from ..kernels import as_numpy, resolve_device
from ..stats import DEFAULT_LEVEL, HypothesisTest, mean_ci
from .edge_probes import (
    OPERATOR_LABELS,
    SUSPECT_QUANTILE,
    NegativeQuality,
    ProbeResult,
    SuspectedNegatives,
    negative_hardness,
    negative_quality,
    operator_probes,
    suspected_false_negatives,
)
from .graph import HEURISTIC_SHORT, HEURISTICS, LinkData, adjacency, heuristic_scores, sample_non_edges
from .labels import aside
from .ranks import (
    KS,
    TIES,
    CandidateScores,
    Ranks,
    adjust,
    adjusted_index,
    auc_delong,
    chance_terms,
    expected_metrics,
    positive_placements,
    proportion_ci,
    rank_values,
    ranks_from_scores,
    score_candidates,
)
from .scoring import PreparedBoot
from .spec import MetricSpec, record_metrics, specs
from .thresholds import THRESHOLDS

SEED_002 = "seed 002 (PBG offline evaluation)"
PYKEEN = "Hoyt et al. 2022; PyKEEN"
UNIT = "test edges"

SPECS = specs(
    MetricSpec("mean_rank", "Mean rank", "lower", r"\mathrm{MR} = \frac1B \sum_i r_i", SEED_002, range=(1, np.inf)),
    MetricSpec("mrr", "MRR", "higher", r"\mathrm{MRR} = \frac1B \sum_i 1/r_i", SEED_002, range=(0, 1)),
    MetricSpec("hits_at_1", "Hits@1", "higher", r"\frac1B \sum_i [r_i \le 1]", SEED_002, range=(0, 1)),
    MetricSpec("hits_at_10", "Hits@10", "higher", r"\frac1B \sum_i [r_i \le 10]", SEED_002, range=(0, 1)),
    MetricSpec("hits_at_50", "Hits@50", "higher", r"\frac1B \sum_i [r_i \le 50]", SEED_002, range=(0, 1)),
    MetricSpec("auc", "AUC (any positive vs any negative)", "higher", r"P(s^+ > s^-) + \tfrac12 P(s^+ = s^-)",
               f"{SEED_002}; verdict: checklist seed 000 §221.1 and rule §219.2", range=(0, 1),
               bands=THRESHOLDS["link_prediction_auc"], chance=0.5),
    MetricSpec("amri", "Adjusted mean rank index (AMRI)", "higher",
               r"1 - \frac{\mathrm{MR} - 1}{\mathbb{E}[\mathrm{MR}] - 1}", PYKEEN + " (AMRI)", chance=0.0),
    MetricSpec("adjusted_mrr", "Adjusted MRR", "higher",
               r"\frac{\mathrm{MRR} - \mathbb{E}[\mathrm{MRR}]}{1 - \mathbb{E}[\mathrm{MRR}]}", PYKEEN + " (adjusted MRR)",
               chance=0.0),
    MetricSpec("adjusted_hits_at_10", "Adjusted Hits@10", "higher",
               r"\frac{H_{10} - \mathbb{E}[H_{10}]}{1 - \mathbb{E}[H_{10}]}", PYKEEN + " (adjusted Hits@k)", chance=0.0),
    MetricSpec("probe_roc_auc", "Probe ROC-AUC (best operator)", "higher", r"P(f(u,v)^+ > f(u',v')^-)",
               "EvalNE edge operators + logistic regression; verdict: checklist seed 000 §221.1 and §219.2",
               range=(0, 1), bands=THRESHOLDS["link_prediction_auc"], chance=0.5),
    MetricSpec("probe_average_precision", "Probe average precision (best operator)", "higher",
               r"\sum_k (R_k - R_{k-1}) P_k", "seed 000 §218.1.3; verdict: checklist seed 000 §221.1 (1:1 negatives)",
               range=(0, 1), bands=THRESHOLDS["link_prediction_average_precision"], chance=0.5),
    MetricSpec("negative_score_cohens_d", "Cohen's d, positive vs negative scores", "higher",
               r"d = (\bar s_+ - \bar s_-) / s_p", "Cohen 1988; verdict: seed 000 §219.2 quality bands",
               bands=THRESHOLDS["negative_score_cohens_d"], chance=0.0),
    MetricSpec("false_negative_rate", "False-negative rate of the negatives", "lower",
               r"\#\{(u, v') \in \text{negatives} : (u, v') \in E\} / \#\text{negatives}",
               "seed 000 §219.2 (share of negatives that are edges of the graph)", range=(0, 1)),
    MetricSpec("negatives_above_most_positives", "Negatives scoring above most positives (suspected false negatives)", "lower",
               r"\#\{(u, v') : s(u, v') > Q_{0.9}(s_+)\} / \#\text{negatives}",
               "seed 000 §219.2 (suspected false negatives: above the 90th percentile of positive scores)",
               range=(0, 1), chance=1 - SUSPECT_QUANTILE),
)
#: the old name of :data:`SPECS` (iterates over the metric names)
METRICS = SPECS


# ---------------------------------------------------------------------------------------------
# Heuristic baselines on the training graph
# ---------------------------------------------------------------------------------------------

def heuristic_ranks(train: EdgeList, n: int, src, candidates, valid=None, names=tuple(HEURISTICS)) -> dict[str, Ranks]:
    """Ranks of each positive among its candidates when scored by graph heuristics on ``train``."""
    A = adjacency(train, n)
    src = np.asarray(src, np.int64)
    cand = np.asarray(candidates)
    u = np.repeat(src, cand.shape[1])
    v = cand.clip(min=0).ravel()
    v_ok = np.ones(cand.shape[0] * (cand.shape[1] - 1), bool) if valid is None else np.asarray(valid)
    out = {}
    for name in names:
        S = heuristic_scores(A, u, v, name).reshape(cand.shape)
        out[name] = ranks_from_scores(S, (cand[:, 1:] >= 0) & v_ok.reshape(cand.shape[0], -1))
    return out


def sample_rows(B: int, limit: int | None, seed: int) -> np.ndarray:
    """At most ``limit`` of ``B`` rows, a seeded sample in increasing order (all when ``limit`` is ``None``)."""
    if limit is None or B <= limit:
        return np.arange(B)
    return np.sort(np.random.default_rng([seed, 90, 6]).choice(B, limit, replace=False))


def baseline_table(data: LinkData, cs: CandidateScores, *, ties: str, filtered: bool, max_queries: int | None = 2000,
                   seed: int = 0, device="cpu", level: float = DEFAULT_LEVEL) -> tuple[pd.DataFrame, int]:
    """The embedding and each heuristic ranked on the same test edges (a sample of at most
    ``max_queries``) with the same negatives, ties and filter setting (``_mrr_ci``: the MRR interval)."""
    rows = sample_rows(len(data.test), max_queries, seed)
    keep = None if not filtered or cs.removed is None else ~cs.removed[rows]
    h = heuristic_ranks(data.train, data.n_entities, data.test.src[rows], data.candidates[rows], keep)
    out = []
    emb = cs.ranks(filtered).take(rows)
    for name, rk in [("embedding", emb)] + list(h.items()):
        v, e = rank_values(rk, ties)
        lo, hi, _ = mean_ci(1.0 / rk.get(ties), level, seed=seed, units=UNIT)
        out.append({"method": "embedding (this set)" if name == "embedding" else HEURISTIC_SHORT[name], "name": name,
                    "MRR": v["mrr"], "_mrr_ci": (lo, hi), "Hits@10": v["hits_at_10"],
                    "mean rank": v["mean_rank"], "AMRI": adjust("mean_rank", v["mean_rank"], e),
                    "ties in rank (share)": float((rk.optimistic != rk.pessimistic).mean())})
    return pd.DataFrame(out), len(rows)


# ---------------------------------------------------------------------------------------------
# The chapter's evaluation
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LinkPredictionResult:
    """Everything the link-prediction chapter shows."""

    values: dict
    metrics: dict
    protocol: dict
    tag: str
    expected: dict
    cs: CandidateScores
    ranks: np.ndarray
    n_candidates: np.ndarray
    tie_table: pd.DataFrame
    relation_table: pd.DataFrame
    quality: NegativeQuality
    probes: ProbeResult | None
    baselines: pd.DataFrame | None
    baseline_queries: int
    data: LinkData
    info: dict = field(default_factory=dict)
    hardness: pd.DataFrame | None = None        # negatives by rank among their edge's negatives (raw)
    suspects: SuspectedNegatives | None = None  # negatives above most positives (raw)


def negative_quality_tests(q) -> list[HypothesisTest]:
    """The negative-quality tests (positive vs negative edge scores), for the report-wide correction."""
    n = f"{q.test_sample:,} per side"
    return [HypothesisTest(name="positive vs negative scores: KS", test="two-sample Kolmogorov–Smirnov, two-sided",
                           p_value=q.ks_pvalue, statistic=q.ks_statistic, n=n,
                           null="positive and negative edge scores have the same distribution"),
            HypothesisTest(name="positive vs negative scores: Mann–Whitney",
                           test="Mann–Whitney U, one-sided (positives score higher); statistic U/(n₊n₋)",
                           p_value=q.mw_pvalue, statistic=q.mw_auc, n=n,
                           null="a positive edge scores no higher than a negative one")]


def edge_ids(test: EdgeList, ids) -> np.ndarray:
    """The unit id of each test edge: ``src→dst``, with the relation and an occurrence number when needed."""
    ids = np.asarray(ids, dtype=object)
    rel = test.relation if test.relation is not None else np.full(len(test.src), "", dtype=object)
    edge = [f"{ids[a]}→{ids[b]}" + (f" [{c}]" if c not in ("", None) else "") for a, b, c in zip(test.src, test.dst, rel)]
    edge = pd.Series(edge, dtype=object)
    return (edge + edge.groupby(edge).cumcount().map(lambda i: "" if i == 0 else f" #{i + 1}")).to_numpy(dtype=object)


def edge_table(edges, rk: Ranks, ties: str, pos, neg, *, prefix: str = "", device="cpu") -> pd.DataFrame:
    """One row per test edge: its id (column ``edge``), the headline rank (``mean_rank``) and the per-edge terms
    whose means are ``mrr`` and ``hits_at_k``, its candidate count (``n_candidates``, for the chance adjustment)
    and its positive's placement among the pooled negatives ``neg`` (``auc_placement``, whose mean is the AUC).
    ``prefix`` names the rank columns (the temporal chapter's ``temporal_mrr``, …)."""
    r = np.asarray(rk.get(ties), float)
    out = pd.DataFrame({"edge": edges, f"{prefix}mean_rank": r, f"{prefix}mrr": 1.0 / r})
    for k in KS:
        out[f"{prefix}hits_at_{k}"] = (r <= k).astype(float)
    out["n_candidates"] = rk.n_candidates
    out["auc_placement"] = positive_placements(pos, neg, device)
    return out


def adjusted(table: pd.DataFrame, name: str, prefix: str = "") -> float:
    """The chance-adjusted ``name`` (``mean_rank``: the AMRI; ``mrr``, ``hits_at_k``) of a table of test edges
    (:func:`edge_table`): the mean of the column against its expectation under the edges' candidate counts."""
    value = float(np.asarray(table[prefix + name], float).mean())
    return adjust(name, value, expected_metrics(np.asarray(table["n_candidates"], float)), warn=False)


def _adjusted_terms(table: pd.DataFrame, name: str, prefix: str = "") -> tuple[str, np.ndarray, np.ndarray]:
    return name, np.asarray(table[prefix + name], float), chance_terms(np.asarray(table["n_candidates"], float), name)


def _adjusted_of(terms: tuple[str, np.ndarray, np.ndarray], W: np.ndarray) -> np.ndarray:
    name, values, chance = terms
    total = W.sum(1)
    return adjusted_index(name, (W @ values) / total, (W @ chance) / total)


#: ``adjusted_weighted(table, W, name, prefix="")``: :func:`adjusted` under each row of unit weights ``W`` (resamples ×
#: test edges), the paired bootstrap's ``boot`` (a :class:`~.scoring.PreparedBoot`: the column and the edges' chance
#: terms read once per table)
adjusted_weighted = PreparedBoot(_adjusted_terms, _adjusted_of)


def placement_auc(table: pd.DataFrame) -> float:
    """The AUC of a table of test edges: the mean placement of the positives among the pooled negatives (a
    bootstrap over test edges keeps the negatives fixed, DeLong's positive-side variance)."""
    return float(np.asarray(pd.to_numeric(table["auc_placement"], errors="coerce"), float).mean())


@dataclass(frozen=True)
class LinkInputs:
    """The link-prediction scorers' inputs: the side data (``edges``, and ``test_edges`` / ``negatives`` when given),
    the set's size and ids, the score, and where to score (``device``: every device gives the same ranks)."""

    side: object
    n: int
    ids: np.ndarray
    score: str
    device: str = "auto"

    @classmethod
    def of(cls, es, side, settings) -> "LinkInputs":
        """From a loaded set, its side data and the run's settings."""
        return cls(side, es.n, es.ids, side.score or DEFAULT_SCORE, settings.device)


@dataclass(frozen=True)
class LinkPlan:
    """The protocol, fixed before any vector is read: the split, each test edge's negatives and the known edges
    (:class:`~.graph.LinkData`, from the edges and the seed), the unit id of each test edge, the score, the tie
    policy, raw or filtered ranks, and how the protocol adapted to the input (``notes``, in words)."""

    data: LinkData
    edges: np.ndarray
    score: str = "dot"
    ties: str = "realistic"
    filtered: bool = False
    notes: tuple = ()


@dataclass(frozen=True)
class EdgeRun:
    """One set of vectors ranked on a plan: the unit table (:func:`edge_table`) and every candidate's score."""

    per_edge: pd.DataFrame
    cs: CandidateScores


def run_link_prediction(X, plan: LinkPlan, *, device="auto") -> EdgeRun:
    """Score every test edge's candidates with ``X`` and rank its positive (:func:`~.ranks.score_candidates`)."""
    if plan.ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, not {plan.ties!r}")
    dev = resolve_device(device)
    data = plan.data
    cs = score_candidates(as_numpy(X), data.test.src, data.candidates, score=plan.score, known=data.known,
                          rel=data.test_rel, device=dev)
    return EdgeRun(edge_table(plan.edges, cs.ranks(plan.filtered), plan.ties, *cs.pooled(plan.filtered), device=dev),
                   cs)


#: the link-prediction headline metrics as aggregates of the unit table: the means of its rank columns (per unit),
#: the chance-adjusted ones and the AUC of the whole table
RANK_MEANS = ("mean_rank", "mrr", *(f"hits_at_{k}" for k in KS))


def protocol_tag(score: str, ties: str, filtered: bool, data: LinkData) -> str:
    """The short protocol label shown next to every number."""
    return f"{'filtered' if filtered else 'raw'}, {ties} ties, {data.n_negatives} negatives, {score}"


def rank_intervals(r: np.ndarray, expected: dict, level: float, seed: int, names=("mean_rank", "mrr", "hits_at_10"),
                   ks=KS) -> dict:
    """``name -> (low, high, method)`` for the rank metrics of ranks ``r`` and their chance adjustments:
    the mean-rank and MRR intervals from :func:`~embeval_report.stats.mean_ci`, Hits from Wilson, each
    adjusted metric the (affine) adjustment of its metric's interval."""
    cis = {"mean_rank": mean_ci(r, level, seed=seed, units=UNIT), "mrr": mean_ci(1.0 / r, level, seed=seed, units=UNIT)}
    for k in ks:
        cis[f"hits_at_{k}"] = proportion_ci(r <= k, level)
    for name in names:
        lo, hi, how = cis[name]
        a, b = adjust(name, lo, expected, warn=False), adjust(name, hi, expected, warn=False)
        cis["amri" if name == "mean_rank" else f"adjusted_{name}"] = (
            min(a, b), max(a, b), how + ", mapped through the (affine) chance adjustment")
    return cis


def evaluate_link_prediction(X, data: LinkData, *, score: str = "dot", ties: str = "realistic", filtered: bool = False,
                             probe: bool = True, heuristics: bool = True, max_probe_edges: int = 20_000,
                             max_heuristic_queries: int | None = 2000, level: float = DEFAULT_LEVEL, seed: int = 0,
                             device="auto", cs: CandidateScores | None = None) -> LinkPredictionResult:
    """Rank every test edge against its negatives and compute the chapter's metrics.

    ``filtered`` chooses the headline ranks (both raw and filtered are always computed and shown);
    ``ties`` the tie policy (``realistic`` default). The probe trains on up to ``max_probe_edges``
    training edges and tests on as many test edges; the heuristics rank at most
    ``max_heuristic_queries`` test edges (``None``: all). ``cs``: the candidates' scores when already computed
    (:func:`run_link_prediction` on the same data and score).
    """
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, not {ties!r}")
    dev = resolve_device(device)
    X = as_numpy(X)
    test = data.test
    if cs is None:
        cs = score_candidates(X, test.src, data.candidates, score=score, known=data.known, rel=data.test_rel,
                              device=dev)
    # the edge-operator probes (two threads) start now, the rest is computed meanwhile on the core they leave idle
    probes_done = (aside(_run_probes, X, data, score=score, max_edges=max_probe_edges, level=level, seed=seed)
                   if probe else lambda: None)
    rk = cs.ranks(filtered)
    r = rk.get(ties)
    values, expected = rank_values(rk, ties)
    pos, neg = cs.pooled(filtered)
    auc, alo, ahi = auc_delong(pos, neg, level, device=dev)
    values["auc"] = auc
    for name in ("mean_rank", "mrr", "hits_at_10"):
        values["amri" if name == "mean_rank" else f"adjusted_{name}"] = adjust(name, values[name], expected)
    cis = rank_intervals(r, expected, level, seed)
    cis["auc"] = (alo, ahi, f"{level:.0%} DeLong interval (positives vs pooled negatives)")
    # negative-sampling quality on the raw negatives (what the sampler produced)
    n_neg = int((data.candidates[:, 1:] >= 0).sum())
    n_false = int(cs.removed.sum()) if cs.removed is not None else 0
    qpos, qneg = cs.pooled(False)
    quality = negative_quality(qpos, qneg, n_false=n_false, n_negatives=n_neg, auc=auc,
                               sampled=data.strategy is not None, strategy=data.strategy, level=level, seed=seed)
    values["negative_score_cohens_d"] = quality.cohens_d
    values["false_negative_rate"] = quality.false_negative_rate
    cis["negative_score_cohens_d"] = (*quality.d_ci, f"{level:.0%} normal interval, Hedges & Olkin standard error")
    cis["false_negative_rate"] = (*quality.fnr_ci, f"{level:.0%} Wilson interval over the {n_neg:,} negatives")
    hardness = negative_hardness(cs.scores, cs.removed)
    suspects = suspected_false_negatives(cs.scores, cs.removed, level=level)
    values["negatives_above_most_positives"] = suspects.rate
    cis["negatives_above_most_positives"] = (*suspects.ci, f"{level:.0%} Wilson interval over the {n_neg:,} negatives")
    baselines, n_bq = (baseline_table(data, cs, ties=ties, filtered=filtered, max_queries=max_heuristic_queries,
                                      seed=seed, level=level) if heuristics else (None, 0))
    probes = probes_done()
    if probes is not None:
        b = probes.table.set_index("name").loc[probes.best]
        values["probe_roc_auc"], values["probe_average_precision"] = float(b["ROC-AUC"]), float(b["average precision"])
        cis["probe_roc_auc"] = (*b["_auc_ci"], probes.ci_method)
        cis["probe_average_precision"] = (*b["_ap_ci"], probes.ci_method)
    tag = protocol_tag(score, ties, filtered, data)
    settings = {"negative_score_cohens_d": f"{score} score, raw negatives",
                "false_negative_rate": f"{score} score, raw negatives",
                "negatives_above_most_positives": f"{score} score, raw negatives"}
    if probes is not None:
        settings.update(dict.fromkeys(("probe_roc_auc", "probe_average_precision"),
                                      f"{OPERATOR_LABELS[probes.best]}, 1:1"))
    metrics = record_metrics(SPECS, values, cis, tag, settings)
    protocol = dict(split=data.split, negatives=data.negatives, score=score, ties=ties, filtered=filtered,
                    n_test=len(test), n_train=len(data.train), n_negatives=data.n_negatives,
                    relations=data.relations, level=level, **data.notes)
    return LinkPredictionResult(
        values=values, metrics=metrics, protocol=protocol, tag=tag, expected=expected, cs=cs, ranks=r,
        n_candidates=rk.n_candidates, tie_table=tie_policy_table(cs), relation_table=relation_table(
            cs, data, ties=ties, filtered=filtered), quality=quality, probes=probes, baselines=baselines,
        baseline_queries=n_bq, data=data, info=dict(device=str(dev)), hardness=hardness, suspects=suspects)


#: training and test edges the edge-operator probes need at least
MIN_PROBE_EDGES = 10


def _run_probes(X, data: LinkData, *, score: str, max_edges: int, level: float, seed: int) -> ProbeResult | None:
    if len(data.train) < MIN_PROBE_EDGES or len(data.test) < MIN_PROBE_EDGES:
        return None
    tr = sample_rows(len(data.train), max_edges, seed)
    te = sample_rows(len(data.test), max_edges, seed + 1)
    nu, nv = sample_non_edges(data.known, data.n_entities, len(tr), rel=data.train_rel[tr], seed=seed)
    cand = data.candidates[te]
    first = np.argmax(cand[:, 1:] >= 0, axis=1)  # the first negative of each test edge
    neg_v = cand[np.arange(len(te)), 1 + first]
    return operator_probes(X, (data.train.src[tr], data.train.dst[tr]), (nu, nv),
                           (data.test.src[te], data.test.dst[te]), (data.test.src[te], neg_v), score=score,
                           level=level, seed=seed)


def tie_policy_table(cs: CandidateScores) -> pd.DataFrame:
    """MR, MRR, Hits@10 and AMRI under each tie policy, raw and filtered."""
    rows = []
    for filt in (False, True):
        for ties in TIES:
            v, e = rank_values(cs.ranks(filt), ties)
            rows.append({"ranks": "filtered" if filt else "raw", "ties": ties, "mean rank": v["mean_rank"],
                         "MRR": v["mrr"], "Hits@1": v["hits_at_1"], "Hits@10": v["hits_at_10"],
                         "AMRI": adjust("mean_rank", v["mean_rank"], e, warn=False),
                         "mean candidates": float(cs.ranks(filt).n_candidates.mean())})
    return pd.DataFrame(rows)


def relation_table(cs: CandidateScores, data: LinkData, *, ties: str, filtered: bool) -> pd.DataFrame:
    """The metrics within each relation, then over all test edges (PBG's count-weighted global
    average) and the unweighted mean over relations (macro)."""
    rows = []
    names = data.relations or ["(all edges)"]
    for code, name in enumerate(names):
        idx = np.flatnonzero(data.test_rel == code)
        if not len(idx):
            continue
        rows.append(_group_row(name, cs, idx, ties, filtered))
    if len(rows) > 1:
        t = pd.DataFrame(rows)
        rows.append(_group_row("all test edges (PBG global average)", cs, np.arange(len(data.test)), ties, filtered))
        macro = {"relation": "mean over relations (macro)", "test edges": int(t["test edges"].sum())}
        macro.update({c: float(t[c].mean()) for c in t.columns if c not in ("relation", "test edges")})
        rows.append(macro)
    return pd.DataFrame(rows)


def auc_value(pos, neg) -> float:
    """The AUC of :func:`~.ranks.auc_delong` without its interval, for tables that show none: the positives' mean
    placement among the negatives (the same value bit for bit, without searching every negative among the
    positives); NaN without positives or negatives."""
    return float(positive_placements(pos, neg).mean()) if len(pos) and len(neg) else float("nan")


def _group_row(name, cs: CandidateScores, idx, ties, filtered) -> dict:
    rk = cs.ranks(filtered).take(idx)
    v, e = rank_values(rk, ties)
    pos, neg = cs.pooled(filtered, idx)
    auc = auc_value(pos, neg)
    return {"relation": str(name), "test edges": len(idx), "mean rank": v["mean_rank"], "MRR": v["mrr"],
            "Hits@1": v["hits_at_1"], "Hits@10": v["hits_at_10"], "Hits@50": v["hits_at_50"], "AUC": auc,
            "AMRI": adjust("mean_rank", v["mean_rank"], e, warn=False)}
