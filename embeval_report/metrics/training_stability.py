r"""Stability over training time: checkpoints ("tranches") of one or more runs (seed 003 §3, §5).

Checkpoints are compared between consecutive tranches and with the final one, the same runs are
compared with each other at each tranche they share (with
:func:`~embeval_report.metrics.stability.measure_run_stability`), and each entity's movement
:math:`1 - \cos(v_{t-1}, v_t)` after alignment is grouped by the tranche in which the entity
first appears (its cohort).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import UndefinedMetricWarning
from ..io import EmbeddingSet
from ..io.runs import Checkpoint, shared_tranche_names
from ..kernels import knn, neighbour_sets_overlap, resolve_device
from ..stats import DEFAULT_LEVEL, mean_ci
from .pair_moments import similarity_correlation
from .procrustes import procrustes_align, row_cosines
from .spec import MetricSpec, specs
from .stability import K_DEFAULT, MIN_ENTITIES, dimension_note, first_ids, measure_run_stability, usable_k

__all__ = ["SPECS", "TRAINING_METRICS", "REF_TRANCHE", "REF_MOVEMENT", "Checkpoint", "TrainingResult", "compare_spaces", "measure_training_stability",
           "cohort_table", "largest_comparison", "shared_tranche_names"]

REF_TRANCHE = "seed 003 §3 (stability over training time)"
REF_MOVEMENT = "seed 003 §5 (word cohort movement), after Procrustes alignment"

SPECS = specs(
    MetricSpec("tranche_knn_overlap_last", "k-NN overlap, last two tranches", "higher",
               r"\frac1n\sum_i |N^{T-1}_k(i) \operatorname{\cap} N^{T}_k(i)| / k", REF_TRANCHE, range=(0.0, 1.0)),
    MetricSpec("tranche_movement_last", "Movement at the last tranche", "lower",
               r"\frac1n\sum_i \big(1 - \cos(R^{*\top} \tilde v^{T-1}_i, \tilde v^{T}_i)\big)",
               REF_MOVEMENT, range=(0.0, 2.0)),
    MetricSpec("tranche_knn_overlap_first_to_final", "k-NN overlap, first vs final tranche", "higher",
               r"\frac1n\sum_i |N^{1}_k(i) \operatorname{\cap} N^{T}_k(i)| / k", REF_TRANCHE, range=(0.0, 1.0)),
    MetricSpec("tranche_cross_run_knn_overlap_final", "k-NN overlap across runs at the final tranche", "higher",
               r"\frac{1}{|P|}\sum_{(r,s)}\frac1n\sum_i |N^{r,T}_k(i) \operatorname{\cap} "
               r"N^{s,T}_k(i)| / k", REF_TRANCHE, range=(0.0, 1.0)),
)

#: the old name of :data:`SPECS` (iterating gives the metric names)
TRAINING_METRICS = SPECS


def _rows_of(cp: Checkpoint, n_ref: int) -> np.ndarray:
    pos = np.full(n_ref, -1, dtype=np.int64)
    pos[cp.matched.index] = np.arange(len(cp.matched.index))
    return pos


def _comparisons(runs: dict[str, list[Checkpoint]], n_ref: int):
    """Every comparison the chapter makes, as ``(kind, run or name, j, rows in common)``."""
    for run, cps in runs.items():
        pos = [_rows_of(cp, n_ref) >= 0 for cp in cps]
        for j in range(1, len(cps)):
            yield "transition", run, j, np.flatnonzero(pos[j - 1] & pos[j])
        for j in range(len(cps) - 1):
            yield "to_final", run, j, np.flatnonzero(pos[j] & pos[-1])
    for name in shared_tranche_names(runs):
        present = np.ones(n_ref, dtype=bool)
        for cps in runs.values():
            for cp in cps:
                if cp.name == name:
                    present &= _rows_of(cp, n_ref) >= 0
        yield "cross_run", name, None, np.flatnonzero(present)


def largest_comparison(runs: dict[str, list[Checkpoint]], n_ref: int) -> int:
    """The most entities any two compared checkpoints share (consecutive, with the final, across runs)."""
    return max((len(rows) for *_, rows in _comparisons(runs, n_ref)), default=0)


def compare_spaces(A, B, k: int = K_DEFAULT, *, device="auto") -> tuple[np.ndarray, np.ndarray, float]:
    """Per-entity k-NN overlap and aligned cosine of ``B`` rotated onto ``A``, and their similarity correlation.
    Checkpoints of different dimensions share no space: their aligned cosine is NaN (the overlap and the
    correlation, within each space, are kept)."""
    dev = resolve_device(device)
    ov = neighbour_sets_overlap(knn(A, k, device=dev, desc=None)[0], knn(B, k, device=dev, desc=None)[0])
    if A.shape[1] != B.shape[1]:
        return ov, np.full(len(ov), np.nan), similarity_correlation(A, B, device=dev)
    fit = procrustes_align(A, B, device=dev)
    if math.isfinite(fit.disparity):
        cs = row_cosines(fit.target, fit.aligned)
    else:
        warnings.warn("A checkpoint has no spread after mean-centring (every entity has the same vector): aligned "
                      "cosine and movement are undefined there", UndefinedMetricWarning, stacklevel=2)
        cs = np.full(len(ov), np.nan)
    return ov, cs, similarity_correlation(A, B, device=dev)


@dataclass(frozen=True)
class TrainingResult:
    """Everything the training-time chapter shows."""

    k: int
    runs: list
    coverage: pd.DataFrame     # one row per checkpoint
    transitions: pd.DataFrame  # consecutive tranches, one row per (run, step)
    to_final: pd.DataFrame     # each tranche vs its run's final tranche
    cross_run: pd.DataFrame    # the runs compared with each other at each shared tranche name
    movement: pd.DataFrame     # long: run, row, cohort, cohort_step, tranche, step, movement, overlap
    cohorts: pd.DataFrame      # cohort x transition: n, mean movement, CI
    values: dict
    metrics: dict
    info: dict = field(default_factory=dict)


MOVEMENT_COLUMNS = ["run", "row", "cohort", "cohort_step", "tranche", "step", "movement", "overlap"]


def measure_training_stability(es: EmbeddingSet, runs: dict[str, list[Checkpoint]], k: int = K_DEFAULT,
                               *, n_boot: int = 200, level: float = DEFAULT_LEVEL, seed: int = 0,
                               device="auto") -> TrainingResult:
    r"""Stability over training time from the checkpoints ("tranches") of one or more runs.

    For each run, with its checkpoints in training order: k-NN overlap, aligned cosine and the
    similarity correlation between consecutive checkpoints (on the entities present in both) and
    between each checkpoint and the run's final one; the movement
    :math:`1 - \cos(R^{*\top}\tilde v^{t-1}_i, \tilde v^t_i)` of each entity between consecutive
    checkpoints after Procrustes alignment (mean-centred), grouped by its cohort, the checkpoint
    in which it first appears (seed 003 §5). Runs that share a tranche name are also compared with
    each other at that tranche (seed 003 §3) with :func:`measure_run_stability`. A comparison whose
    checkpoints share fewer than k + 2 entities is listed with its ``n`` and no values.
    """
    dev = resolve_device(device)
    n_ref = es.n
    cov_rows, trans_rows, final_rows, moves = [], [], [], []
    for run, cps in runs.items():
        first_seen = np.full(n_ref, -1)
        for j, cp in enumerate(cps):
            new = cp.matched.index[first_seen[cp.matched.index] < 0]
            first_seen[new] = j
            cov_rows.append({"run": run, "tranche": cp.name, "order": str(cp.order), "file": cp.file,
                             "entities": len(cp.matched.index), "new": len(new),
                             "not yet present": len(cp.matched.missing), "extra ids": len(cp.matched.extra),
                             "extra ids (first)": first_ids(cp.matched.extra)})
        pos = [_rows_of(cp, n_ref) for cp in cps]
        final = len(cps) - 1
        for j in range(1, len(cps)):
            common = np.flatnonzero((pos[j - 1] >= 0) & (pos[j] >= 0))
            row = {"run": run, "from": cps[j - 1].name, "to": cps[j].name, "step": j, "n": len(common)}
            if len(common) < k + 2:
                trans_rows.append(row)
                continue
            A, B = cps[j].matched.vectors[pos[j][common]], cps[j - 1].matched.vectors[pos[j - 1][common]]
            ov, cs, corr = compare_spaces(A, B, k, device=dev)
            trans_rows.append(dict(row, **{"k-NN overlap": float(ov.mean()), "aligned cosine": float(cs.mean()),
                                           "movement": float((1 - cs).mean()), "similarity correlation": corr}))
            moves.append(pd.DataFrame({"run": run, "row": common, "cohort": [cps[c].name for c in first_seen[common]],
                                       "cohort_step": first_seen[common], "tranche": cps[j].name, "step": j,
                                       "movement": 1.0 - cs, "overlap": ov}))
        for j in range(len(cps) - 1):
            common = np.flatnonzero((pos[j] >= 0) & (pos[final] >= 0))
            row = {"run": run, "tranche": cps[j].name, "step": j, "final": cps[final].name, "n": len(common)}
            if len(common) >= k + 2:
                A, B = cps[final].matched.vectors[pos[final][common]], cps[j].matched.vectors[pos[j][common]]
                ov, cs, corr = compare_spaces(A, B, k, device=dev)
                row.update({"k-NN overlap": float(ov.mean()), "aligned cosine": float(cs.mean()),
                            "similarity correlation": corr})
                if j == 0:
                    moves.append(pd.DataFrame({"run": run, "row": common, "cohort": None, "cohort_step": -1,
                                               "tranche": "first→final", "step": -1, "movement": 1.0 - cs,
                                               "overlap": ov}))
            final_rows.append(row)
    cross_rows = []
    for name in shared_tranche_names(runs):
        members = [(run, cp) for run, cps in runs.items() for cp in cps if cp.name == name]
        present = np.ones(n_ref, dtype=bool)
        for _, cp in members:
            present &= _rows_of(cp, n_ref) >= 0
        common = np.flatnonzero(present)
        row = {"tranche": name, "step": next(j for cps in runs.values() for j, cp in enumerate(cps) if cp.name == name),
               "runs": len(members), "n": len(common)}
        if len(common) >= k + 2:
            vecs = [cp.matched.vectors[_rows_of(cp, n_ref)[common]] for _, cp in members]
            r = measure_run_stability(vecs, k, labels=[run for run, _ in members], n_boot=n_boot, level=level,
                                      seed=seed, device=dev)
            m = r.metrics
            row.update({"k-NN overlap": m["knn_overlap"].value, "ci_low": m["knn_overlap"].ci_low,
                        "ci_high": m["knn_overlap"].ci_high, "aligned cosine": m["procrustes_aligned_cosine"].value,
                        "similarity correlation": m["pairwise_similarity_correlation"].value,
                        "verdict": m["pairwise_similarity_correlation"].verdict, "_metric": m["knn_overlap"]})
        cross_rows.append(row)
    movement = (pd.concat(moves, ignore_index=True) if moves else pd.DataFrame(columns=MOVEMENT_COLUMNS))
    cohorts = cohort_table(movement, level=level, seed=seed)
    cross = pd.DataFrame(cross_rows)
    mismatch = [{"name": cp.name if len(runs) == 1 else f"{run}: {cp.name}", "d": int(cp.matched.vectors.shape[1])}
                for run, cps in runs.items() for cp in cps if cp.matched.vectors.shape[1] != es.d]
    values, metrics = _training_metrics(movement, cross, level, seed,
                                        dimension_note(mismatch, es.d, "tranche") if mismatch else "")
    return TrainingResult(k=k, runs=list(runs), coverage=pd.DataFrame(cov_rows), transitions=pd.DataFrame(trans_rows),
                          to_final=pd.DataFrame(final_rows),
                          cross_run=cross.drop(columns=["_metric"], errors="ignore"), movement=movement,
                          cohorts=cohorts, values=values, metrics=metrics,
                          info=dict(level=level, device=str(dev), n_reference=n_ref,
                                    **({"dimension_mismatch": mismatch, "d_reference": es.d} if mismatch else {})))


COHORT_COLUMNS = ["cohort", "cohort_step", "tranche", "step", "n", "mean movement", "ci_low", "ci_high",
                  "median movement", "k-NN overlap"]


def cohort_table(movement: pd.DataFrame, *, level: float = DEFAULT_LEVEL, seed: int = 0) -> pd.DataFrame:
    """Mean movement per (cohort, transition), pooled over runs, with the interval of
    :func:`embeval_report.stats.mean_ci`."""
    mv = movement[movement["step"] >= 1]
    rows = []
    for (cs, step), grp in mv.groupby(["cohort_step", "step"], sort=True):
        _, lo, hi, _ = _mean_ci(grp["movement"].to_numpy(float), level, seed,
                                f"the movement of cohort {grp['cohort'].iloc[0]} into {grp['tranche'].iloc[0]}")
        rows.append({"cohort": grp["cohort"].iloc[0], "cohort_step": int(cs), "tranche": grp["tranche"].iloc[0],
                     "step": int(step), "n": len(grp), "mean movement": float(grp["movement"].mean()),
                     "ci_low": lo, "ci_high": hi, "median movement": float(grp["movement"].median()),
                     "k-NN overlap": float(grp["overlap"].mean())})
    return pd.DataFrame(rows, columns=COHORT_COLUMNS)


def _mean_ci(x: np.ndarray, level: float, seed: int, what: str) -> tuple[float, float, float, str]:
    """Mean of the defined values and their :func:`~embeval_report.stats.mean_ci` (NaN when none is defined;
    no interval, with an :class:`~embeval_report.errors.UndefinedMetricWarning` naming ``what``, for one value)."""
    x = x[np.isfinite(x)]
    if len(x) < 2:
        if len(x):
            warnings.warn(f"{what[:1].upper()}{what[1:]} rests on a single entity: no interval", UndefinedMetricWarning, stacklevel=3)
        return float(np.mean(x)) if len(x) else float("nan"), float("nan"), float("nan"), ""
    return (float(np.mean(x)), *mean_ci(x, level, seed=seed, units="entities"))


def _training_metrics(movement: pd.DataFrame, cross: pd.DataFrame, level: float, seed: int, mismatch: str = ""):
    """The headline metrics; ``mismatch`` says why the movement (aligned, so in one shared space) is null when some
    tranche has another dimension than the main set."""
    values, metrics = {}, {}

    def add(name, x):
        x = np.asarray(x, float)
        if name == "tranche_movement_last" and mismatch and np.isnan(x).any():  # some movement across dimensions
            metrics[name] = SPECS[name].record(None, note=mismatch)
            values[name] = float("nan")
            return
        mean, lo, hi, how = _mean_ci(x, level, seed, SPECS[name].label)
        metrics[name] = SPECS[name].record(mean, (lo, hi), ci_method=how,
                                           note="" if math.isfinite(mean) else "undefined for this input")
        values[name] = mean

    if len(movement):
        last = movement[movement["step"] >= 1]
        last_step = last.groupby("run")["step"].transform("max")
        last = last[last["step"] == last_step]
        if len(last):
            add("tranche_knn_overlap_last", last["overlap"].to_numpy())
            add("tranche_movement_last", last["movement"].to_numpy())
        ff = movement[movement["step"] == -1]
        if len(ff):
            add("tranche_knn_overlap_first_to_final", ff["overlap"].to_numpy())
    if len(cross) and "_metric" in cross and cross["_metric"].notna().any():
        m = cross[cross["_metric"].notna()].sort_values("step").iloc[-1]["_metric"]
        name = "tranche_cross_run_knn_overlap_final"
        metrics[name] = SPECS[name].record(m.value, (m.ci_low, m.ci_high), ci_method=m.ci_method,
                                           bias_corrected=m.bias_corrected, note=m.note)
        values[name] = m.value
    return values, metrics


def adapted_k(runs: dict[str, list[Checkpoint]], n_ref: int, k: int) -> int:
    """``k`` lowered so that the largest comparison can be made (0: no two checkpoints share
    :data:`~embeval_report.metrics.stability.MIN_ENTITIES` entities)."""
    most = largest_comparison(runs, n_ref)
    return usable_k(k, most) if most >= MIN_ENTITIES else 0
