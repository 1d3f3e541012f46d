r"""Temporal link prediction (seed 000 §218.2): train strictly before a cut, test after it, by horizon.

* the cut is the time of the ``train_fraction`` quantile edge (seed 000 §218.2.3); test edges are
  binned into equal-width horizons (time since the cut), and a sample of training edges is scored
  the same way as a "before the cut" reference;
* the same protocol at several cuts (seed 000 §218.2.1, multiple horizons);
* a seeded random split with the same test share, for the leakage comparison (§218.2.2).

Each test edge is ranked against its negatives exactly as in :mod:`.linkpred` (same scores, ties,
filter and intervals). The vectors are fixed; only the structural heuristic is re-fitted on the
graph before each cut.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..errors import InputError, UndefinedMetricWarning
from ..io.graph import EdgeList
from ..kernels import as_numpy, resolve_device
from ..stats import DEFAULT_LEVEL, mean_ci, normal_ci
from .graph import LinkData, build_link_data, format_time
from .linkpred import (
    PYKEEN,
    SEED_002,
    UNIT,
    auc_value,
    edge_ids,
    edge_table,
    heuristic_ranks,
    protocol_tag,
    rank_intervals,
    sample_rows,
)
from .ranks import CandidateScores, Ranks, adjust, auc_delong, rank_metrics, rank_values, score_candidates
from .scoring import PreparedBoot
from .spec import MetricSpec, record_metrics, specs

SPECS = specs(
    MetricSpec("temporal_mrr", "MRR after the cut", "higher", r"\frac1B \sum_{(u,v,t) : t \ge t_c} 1/r",
               SEED_002 + "; seed 000 §218.2", range=(0, 1)),
    MetricSpec("temporal_hits_at_10", "Hits@10 after the cut", "higher", r"\frac1B \sum [r \le 10]", SEED_002,
               range=(0, 1)),
    MetricSpec("temporal_auc", "AUC after the cut", "higher", r"P(s^+ > s^-) + \tfrac12 P(s^+ = s^-)", SEED_002,
               range=(0, 1), chance=0.5),
    MetricSpec("temporal_amri", "AMRI after the cut", "higher", r"1 - \frac{\mathrm{MR} - 1}{\mathbb{E}[\mathrm{MR}] - 1}",
               PYKEEN, chance=0.0),
    MetricSpec("mrr_change_over_horizon", "MRR change, first to last horizon", "higher",
               r"\mathrm{MRR}_{\text{last bin}} - \mathrm{MRR}_{\text{first bin}}",
               "seed 000 §218.2.5 (stability across horizons)"),
    MetricSpec("random_split_mrr_gap", "MRR gap, random split − temporal split", "lower",
               r"\mathrm{MRR}_{\text{random}} - \mathrm{MRR}_{\text{temporal}}",
               "seed 000 §218.2.5 (comparison to random splits)"),
)
#: the old name of :data:`SPECS` (iterates over the metric names)
TEMPORAL_METRICS = SPECS


@dataclass(frozen=True)
class TemporalResult:
    """Everything the temporal chapter shows."""

    values: dict
    metrics: dict
    tag: str
    cut: float
    is_date: bool
    horizon: pd.DataFrame
    cuts: pd.DataFrame
    leakage: pd.DataFrame
    times: np.ndarray
    bin_edges: np.ndarray
    data: LinkData
    heuristic: str
    info: dict = field(default_factory=dict)


def _unit(is_date: bool, span: float) -> tuple[float, str]:
    if not is_date:
        return 1.0, "time units"
    return (86400.0, "days") if span >= 2 * 86400 else (3600.0, "hours")


def _bin_label(lo: float, hi: float, unit: str) -> str:
    """``lo–hi unit``, whole numbers unless the bins are narrower than that."""
    fmt = ".0f" if hi - lo >= 1 else ".3g"
    return f"{lo:{fmt}}–{hi:{fmt}} {unit}"


def _bin_row(label, idx, cs: CandidateScores, ties, filtered, h: Ranks | None, hidx, level, seed) -> dict:
    rk = cs.ranks(filtered).take(idx)
    v, e = rank_values(rk, ties)
    lo, hi, _ = mean_ci(1.0 / rk.get(ties), level, seed=seed, units=UNIT)
    pos, neg = cs.pooled(filtered, idx)
    row = {"horizon": label, "test edges": len(idx), "MRR": v["mrr"], "MRR low": lo, "MRR high": hi,
           "Hits@10": v["hits_at_10"], "AUC": auc_value(pos, neg),
           "AMRI": adjust("mean_rank", v["mean_rank"], e, warn=False), "chance MRR": e["mrr"]}
    if h is not None:
        row["heuristic MRR"] = rank_metrics(h.take(hidx).get(ties))["mrr"] if len(hidx) else float("nan")
    return row


def _gap_se(a: np.ndarray, b: np.ndarray) -> float:
    """Standard error of the difference of the means of two independent samples (NaN, with a warning,
    when either has fewer than two values)."""
    if len(a) < 2 or len(b) < 2:
        warnings.warn(f"interval of the random-split MRR gap undefined: it needs at least 2 test edges on each side "
                      f"(here {len(a)} and {len(b)})", UndefinedMetricWarning, stacklevel=2)
        return float("nan")
    return math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))


@dataclass(frozen=True)
class TemporalPlan:
    """The protocol at the cut, fixed before any vector is read: the split and each test edge's negatives
    (:class:`~.graph.LinkData`), the unit id of each test edge, its horizon (``bins``: the equal-width bin of its
    time since the cut, ``horizons`` each bin's label, ``bin_edges`` relative to the cut, ``scale`` / ``unit``
    the time unit of the labels), the score, the tie policy and raw or filtered ranks."""

    data: LinkData
    edges: np.ndarray
    bins: np.ndarray
    horizons: tuple
    bin_edges: np.ndarray
    scale: float
    unit: str
    score: str = "dot"
    ties: str = "realistic"
    filtered: bool = False


def temporal_plan(edges: EdgeList, n_entities: int, ids=None, *, train_fraction: float = 0.8, n_bins: int = 5,
                  score: str = "dot", ties: str = "realistic", filtered: bool = False, n_negatives: int = 100,
                  strategy: str = "uniform", pool: str = "entities", seed: int = 0) -> TemporalPlan:
    """The split at the ``train_fraction`` cut, its negatives and the horizon of each test edge (``ids``: the
    set's ids, for the edges' unit ids; row numbers when ``None``). Raises
    :class:`~embeval_report.errors.InputError` when no cut separates past from future."""
    if not edges.has_time:
        raise ValueError("a temporal plan needs timestamps")
    data = build_link_data(edges, n_entities, split="temporal", test_fraction=1 - train_fraction,
                           n_negatives=n_negatives, strategy=strategy, pool=pool, seed=seed)
    dt = data.test.time - data.cut
    span = float(dt.max()) if len(dt) else 0.0
    scale, unit = _unit(edges.time_is_date, span)
    bin_edges = np.linspace(0, span, n_bins + 1) if span > 0 else np.array([0.0, 1.0])
    which = np.clip(np.searchsorted(bin_edges, dt, side="right") - 1, 0, len(bin_edges) - 2)
    labels = tuple(_bin_label(bin_edges[b] / scale, bin_edges[b + 1] / scale, unit) for b in range(len(bin_edges) - 1))
    unit_ids = edge_ids(data.test, np.arange(n_entities).astype(str) if ids is None else ids)
    return TemporalPlan(data, unit_ids, which, labels, bin_edges, scale, unit, score, ties, filtered)


@dataclass(frozen=True)
class TemporalRun:
    """One set of vectors ranked on a plan: the unit table (:func:`~.linkpred.edge_table` with ``temporal_``
    rank columns, each test edge's ``bin`` and ``horizon``) and every candidate's score."""

    per_edge: pd.DataFrame
    cs: CandidateScores


def run_temporal(X, plan: TemporalPlan, *, device="auto") -> TemporalRun:
    """Score every test edge after the cut against its negatives with ``X`` and rank its positive."""
    dev = resolve_device(device)
    d = plan.data
    cs = score_candidates(as_numpy(X), d.test.src, d.candidates, score=plan.score, known=d.known, rel=d.test_rel,
                          device=dev)
    table = edge_table(plan.edges, cs.ranks(plan.filtered), plan.ties, *cs.pooled(plan.filtered), prefix=PREFIX,
                       device=dev)
    table["bin"] = plan.bins
    table["horizon"] = np.asarray(plan.horizons, dtype=object)[plan.bins]
    return TemporalRun(table, cs)


#: the rank columns of the temporal unit table: ``temporal_mrr``, ``temporal_hits_at_10``, …
PREFIX = "temporal_"


def horizon_change(table: pd.DataFrame) -> float:
    """``mrr_change_over_horizon`` of a unit table: the MRR of the last horizon with test edges minus that of the
    first (NaN with fewer than two)."""
    b = np.asarray(pd.to_numeric(table["bin"]), np.int64)
    rr = np.asarray(table[PREFIX + "mrr"], float)
    present = np.unique(b)
    if len(present) < 2:
        return float("nan")
    return float(float(rr[b == present[-1]].mean()) - float(rr[b == present[0]].mean()))


def _horizon_terms(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, int]:
    """What :data:`horizon_change_weighted` reads of a unit table, once: each test edge's horizon as a one-hot (test
    edges × horizons present), the same times its reciprocal rank, and the number of horizons."""
    b = np.asarray(pd.to_numeric(table["bin"]), np.int64)
    rr = np.asarray(table[PREFIX + "mrr"], float)
    bins = np.unique(b)
    onehot = (b[:, None] == bins[None, :]).astype(float)          # test edges × bins
    return onehot, onehot * rr[:, None], len(bins)


def _horizon_change_of(terms: tuple[np.ndarray, np.ndarray, int], W: np.ndarray) -> np.ndarray:
    onehot, weighted_rr, n_bins = terms
    count = W @ onehot
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = (W @ weighted_rr) / count                          # resamples × bins; NaN where a bin is empty
    present = count > 0
    first = np.argmax(present, axis=1)
    last = n_bins - 1 - np.argmax(present[:, ::-1], axis=1)
    rows = np.arange(len(W))
    return np.where(present.sum(1) >= 2, mean[rows, last] - mean[rows, first], np.nan)


#: ``horizon_change_weighted(table, W)``: :func:`horizon_change` under each row of unit weights ``W`` (resamples ×
#: test edges), the paired bootstrap's ``boot`` (a :class:`~.scoring.PreparedBoot`: the one-hots made once per table)
horizon_change_weighted = PreparedBoot(_horizon_terms, _horizon_change_of)


def _same_split(a: LinkData, b: LinkData) -> bool:
    """Whether two splits hold the same training edges, test edges and candidates (a cut fraction that is the
    plan's own: its ranks and heuristic are the plan's, already computed)."""
    return (len(a.test) == len(b.test) and len(a.train) == len(b.train) and a.candidates.shape == b.candidates.shape
            and all(np.array_equal(x, y) for x, y in ((a.test.src, b.test.src), (a.test.dst, b.test.dst),
                                                      (a.train.src, b.train.src), (a.train.dst, b.train.dst),
                                                      (a.candidates, b.candidates), (a.test_rel, b.test_rel))))


def evaluate_temporal(X, edges: EdgeList, n_entities: int, *, train_fraction: float = 0.8, n_bins: int = 5,
                      cut_fractions=(0.5, 0.6, 0.7, 0.8, 0.9), score: str = "dot", ties: str = "realistic",
                      filtered: bool = False, n_negatives: int = 100, strategy: str = "uniform",
                      pool: str = "entities", heuristic: str = "adamic_adar", max_heuristic_queries: int | None = 2000,
                      level: float = DEFAULT_LEVEL, seed: int = 0, device="auto", plan: TemporalPlan | None = None,
                      cs: CandidateScores | None = None) -> TemporalResult:
    """Temporal link prediction: train strictly before a cut, test after it, by horizon.

    * the cut is the time of the ``train_fraction`` quantile edge (seed 000 §218.2.3); test edges are
      binned into ``n_bins`` equal-width horizons (time since the cut), and a sample of training
      edges is scored the same way as a "before the cut" reference;
    * the same protocol at each of ``cut_fractions`` (seed 000 §218.2.1, multiple horizons; a cut
      that leaves one side empty is left out);
    * a seeded random split with the same test share, for the leakage comparison (§218.2.2).

    The vectors are fixed; only ``heuristic`` (on the graph before the cut) is re-fitted per split.
    Raises :class:`~embeval_report.errors.InputError` when no cut separates past from future (every
    edge at one time). ``plan`` (:func:`temporal_plan`) and ``cs`` (:func:`run_temporal`): the protocol at the
    cut and its candidates' scores when already made with the same arguments.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    if not edges.has_time:
        raise ValueError("evaluate_temporal needs timestamps")

    def run(data: LinkData, cs=None):
        if cs is None:  # another cut or the random split: their known edges only filter, so raw ranks skip them
            cs = score_candidates(X, data.test.src, data.candidates, score=score,
                                  known=data.known if filtered else None, rel=data.test_rel, device=dev)
        rows = sample_rows(len(data.test), max_heuristic_queries, seed)
        keep = None if not filtered or cs.removed is None else ~cs.removed[rows]
        h = heuristic_ranks(data.train, n_entities, data.test.src[rows], data.candidates[rows], keep, (heuristic,))
        return cs, rows, h[heuristic]

    kw = dict(n_negatives=n_negatives, strategy=strategy, pool=pool, seed=seed)
    if plan is None:
        plan = temporal_plan(edges, n_entities, train_fraction=train_fraction, n_bins=n_bins, score=score, ties=ties,
                             filtered=filtered, **kw)
    data = plan.data
    cs, hrows, hr = run(data, cs)
    cut = data.cut
    scale, unit, bin_edges, which = plan.scale, plan.unit, plan.bin_edges, plan.bins
    hwhich = which[hrows]
    # a "before the cut" reference: training edges scored by the same protocol
    tr_rows = sample_rows(len(data.train), len(data.test), seed + 2)
    ref = build_link_data(edges, n_entities, test=data.train.take(tr_rows), **kw)
    ref = replace(ref, train=data.train, train_rel=data.train_rel, known=data.known,
                  split="training edges before the cut")
    ref_cs = score_candidates(X, ref.test.src, ref.candidates, score=score, known=data.known if filtered else None,
                              rel=ref.test_rel, device=dev)
    rows = [_bin_row("before the cut (training edges)", np.arange(len(ref.test)), ref_cs, ties, filtered, None, [],
                     level, seed)]
    for b in range(len(bin_edges) - 1):
        idx = np.flatnonzero(which == b)
        if not len(idx):
            continue
        row = _bin_row(plan.horizons[b], idx, cs, ties, filtered, hr, np.flatnonzero(hwhich == b), level, seed)
        row["mid"] = (bin_edges[b] + bin_edges[b + 1]) / 2 / scale
        rows.append(row)
    horizon = pd.DataFrame(rows)
    heur = heuristic.replace("_", "–")
    # several cuts
    cut_rows = []
    for f in cut_fractions:
        try:
            d_f = build_link_data(edges, n_entities, split="temporal", test_fraction=1 - f, **kw)
        except InputError:
            continue
        c_f, r_f, h_f = (cs, hrows, hr) if _same_split(d_f, data) else run(d_f)  # the plan's own cut: scored above
        v, e = rank_values(c_f.ranks(filtered), ties)
        cut_rows.append({"train share": f, "cut": format_time(d_f.cut, edges.time_is_date), "train edges": len(d_f.train),
                         "test edges": len(d_f.test), "MRR (embedding)": v["mrr"], "Hits@10": v["hits_at_10"],
                         "AUC": auc_value(*c_f.pooled(filtered)),
                         f"MRR ({heur}, graph before cut)": rank_metrics(h_f.get(ties))["mrr"]})
    # random split with the same test share (leakage comparison)
    rnd = build_link_data(edges, n_entities, split="random", test_fraction=1 - train_fraction, **kw)
    rcs, rrows, rh = run(rnd)
    rv, _ = rank_values(rcs.ranks(filtered), ties)
    tv, te = rank_values(cs.ranks(filtered), ties)
    h_t, h_r = rank_metrics(hr.get(ties))["mrr"], rank_metrics(rh.get(ties))["mrr"]
    leakage = pd.DataFrame([
        {"split": "temporal (train before the cut)", "test edges": len(data.test), "MRR (embedding)": tv["mrr"],
         f"MRR ({heur} on train graph)": h_t},
        {"split": f"random {train_fraction:.0%}/{1 - train_fraction:.0%} (seed {seed})", "test edges": len(rnd.test),
         "MRR (embedding)": rv["mrr"], f"MRR ({heur} on train graph)": h_r}])
    # metrics
    r = cs.ranks(filtered).get(ties)
    values = {"temporal_mrr": tv["mrr"], "temporal_hits_at_10": tv["hits_at_10"]}
    auc, alo, ahi = auc_delong(*cs.pooled(filtered), level, device=dev)
    values["temporal_auc"] = auc
    values["temporal_amri"] = adjust("mean_rank", tv["mean_rank"], te)
    ci = rank_intervals(r, te, level, seed, names=("mean_rank",), ks=(10,))
    cis = {"temporal_mrr": ci["mrr"], "temporal_hits_at_10": ci["hits_at_10"],
           "temporal_auc": (alo, ahi, f"{level:.0%} DeLong interval"), "temporal_amri": ci["amri"]}
    bins = horizon.iloc[1:]
    if len(bins) >= 2:
        first, last = bins.iloc[0], bins.iloc[-1]
        values["mrr_change_over_horizon"] = float(last.MRR - first.MRR)
        se = math.hypot((first["MRR high"] - first["MRR low"]) / (2 * 1.959964),
                        (last["MRR high"] - last["MRR low"]) / (2 * 1.959964))
        cis["mrr_change_over_horizon"] = (*normal_ci(values["mrr_change_over_horizon"], se, level),
                                          f"{level:.0%} normal interval from the two bins' independent intervals")
    rr = rcs.ranks(filtered).get(ties)
    values["random_split_mrr_gap"] = float(rv["mrr"] - tv["mrr"])
    cis["random_split_mrr_gap"] = (*normal_ci(values["random_split_mrr_gap"], _gap_se(1 / r, 1 / rr), level),
                                   f"{level:.0%} normal interval (independent samples)")
    tag = protocol_tag(score, ties, filtered, data)
    metrics = record_metrics(SPECS, values, cis, tag)
    return TemporalResult(values=values, metrics=metrics, tag=tag, cut=cut, is_date=edges.time_is_date,
                          horizon=horizon, cuts=pd.DataFrame(cut_rows), leakage=leakage, times=edges.time,
                          bin_edges=cut + bin_edges, data=data, heuristic=heuristic,
                          info=dict(unit=unit, scale=scale, heuristic_queries=len(hrows), device=str(dev)))
