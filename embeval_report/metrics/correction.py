r"""Anisotropy correction: what post-processing does to isotropy, uniformity and hubness.

Seed 000 §217.0.9 and §217.0.12 list the post-hoc corrections compared here:

* **centring** — subtract the mean vector (all-but-the-top with D = 0);
* **all-but-the-top** (Mu, Bhat & Viswanath 2018) — subtract the mean and project out the top
  D principal directions: :math:`\tilde e = (e - \mu) - \sum_{j \le D} (u_j^\top (e - \mu)) u_j`;
* **whitening** — ZCA, :math:`\tilde E = (E - \mu)\Sigma^{-1/2}` (seed 000 §217.0.12), or PCA
  whitening :math:`(E - \mu) V \Lambda^{-1/2}`. The two differ by the rotation :math:`V^\top`,
  so every rotation-invariant number here (cosines, distances, k-NN) is identical for both;
  one row stands for both.

Each corrected set is measured with the same functions as the intrinsic chapters
(:func:`~embeval_report.metrics.isotropy.measure_isotropy`,
:func:`~embeval_report.metrics.uniformity.uniformity`,
:func:`~embeval_report.metrics.hubness.measure_hubness`). The trade-off is made visible with two
neighbourhood checks: how many of each point's original k nearest neighbours survive
(``neighbour_overlap``) and, when labels exist, how often neighbours share the label
(``label_agreement``), a cheap proxy for downstream quality.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import UndefinedMetricWarning
from ..kernels import as_numpy, resolve_device
from ..kernels.prefetch import read_rows
from ..kernels.transforms import affine
from .hubness import label_agreement, measure_hubness, neighbour_overlap
from .hubness_sampled import sample_queries, sampled_lists, skewness_with_interval
from .isotropy import (PrincipalDirections, apply_rows, best_apcs_removal, measure_isotropy,
                       no_variance, spectral_metrics)
from .spec import MetricSpec, specs
from .uniformity import uniformity

#: automatic budget: above this many rows (and without ``--sample-size``) the hubness columns of every
#: setting come from :data:`AUTO_QUERIES` sampled queries, so the three corrected spaces cost
#: 3 x AUTO_QUERIES / n of a k-NN graph each instead of three graphs (stated with the table)
AUTO_LIMIT = 50_000
AUTO_QUERIES = 10_000
#: above this many rows the corrections are compared on a seeded sample of :data:`SAMPLE_ROWS` rows: each
#: setting is a transformed copy of the set, measured and searched, four times over
ROW_LIMIT = 500_000
SAMPLE_ROWS = 200_000
#: relative eigenvalue floor of whitening: λ is raised to at least ``WHITEN_FLOOR · λ1``
WHITEN_FLOOR = 1e-6
REFERENCE = "seed 000 §217.0.9/§217.0.12; Mu et al. 2018 (all-but-the-top); ZCA whitening"

#: compared quantities: column -> (label, direction)
COLUMNS = {
    "apcs": ("APCS", "lower"),
    "participation_ratio_fraction": ("PR / d", "higher"),
    "condition_number": ("κ", "lower"),
    "uniformity": ("uniformity", "lower"),
    "k_occurrence_skewness": ("N_k skewness", "lower"),
    "antihub_occurrence": ("antihubs", "lower"),
    "neighbour_overlap": ("k-NN kept", "higher"),
    "label_agreement": ("same-label k-NN", "higher"),
}
#: recorded settings: metric-name suffix -> (row of the comparison table, what it is)
WHAT_IF = {"abtt": (2, "all-but-the-top"), "whitening": (3, "whitening")}

#: the what-if metrics ``<column>_after_<abtt|whitening>``: no bands, no verdict (they describe a correction)
SPECS = specs(*(
    MetricSpec(f"{col}_after_{suffix}", f"{label} after {what}", direction,
               reference=f"{REFERENCE}; exact, as in the intrinsic chapters")
    for suffix, (_, what) in WHAT_IF.items() for col, (label, direction) in COLUMNS.items()))


def whiten(X, *, method: str = "zca", floor: float = WHITEN_FLOOR, device="auto") -> np.ndarray:
    """ZCA (``(X − μ) V Λ^{-1/2} V^T``) or PCA (``(X − μ) V Λ^{-1/2}``) whitening, float32.

    Eigenvalues are floored at ``floor · λ1`` (seed 000's code floors at the absolute 1e-6;
    a relative floor keeps the transform scale-free). The result has identity covariance on
    every direction above the floor. A set without variance (every row the same) cannot be
    whitened: it warns (:class:`~embeval_report.errors.UndefinedMetricWarning`) and returns the
    centred rows (all zero).
    """
    if method not in ("zca", "pca"):
        raise ValueError(f"method must be 'zca' or 'pca', not {method!r}")
    dev = resolve_device(device)
    X = as_numpy(X)
    pcs = PrincipalDirections.fit(X, device=dev)
    if no_variance(pcs.eigenvalues, float(pcs.mean @ pcs.mean)):
        warnings.warn("whitening is undefined: every vector is the same, so the covariance is zero (the centred, "
                      "all-zero rows are returned)", UndefinedMetricWarning, stacklevel=2)
        return apply_rows(X, pcs.remover(0, dev), device=dev)
    lam = np.maximum(pcs.eigenvalues, floor * max(pcs.eigenvalues[0], 1e-300))
    W = pcs.vectors / np.sqrt(lam)
    if method == "zca":
        W = W @ pcs.vectors.T
    return apply_rows(X, affine(pcs.mean, W, dev), device=dev)


@dataclass(frozen=True)
class CorrectionComparison:
    """One row per setting (original, centred, all-but-the-top, whitened)."""

    table: pd.DataFrame
    removed: int            # D used for all-but-the-top
    k: int
    metrics: dict           # recorded what-if metrics, name -> Metric (no verdicts)
    notes: dict = field(default_factory=dict)  # setting -> what is undefined there (UndefinedMetricWarning texts)
    sampling: str | None = None  # how the hubness columns were estimated from sampled queries (None: exact graphs)
    subsample: str | None = None  # the rows every setting was measured on, when not all (above ROW_LIMIT rows)
    intervals: dict = field(default_factory=dict)  # (setting, column) -> interval of a sampled estimate

    @property
    def undefined(self) -> list[str]:
        """The corrected settings left without any variance (all-zero vectors): their numbers are NaN."""
        cols = [c for c in ("apcs", "uniformity") if c in self.table]
        return [s for s, row in zip(self.table["setting"], self.table[cols].to_numpy()) if np.isnan(row).all()]


def compare_corrections(X, labels=None, *, k: int = 10, removed: int | None = None, sample_size: int | None = None,
                        level: float = 0.95, seed: int = 0, device="auto") -> CorrectionComparison:
    """Isotropy, uniformity and hubness of ``X`` before and after each correction.

    ``removed`` is all-but-the-top's D (default: the D whose corrected APCS is closest to 0,
    as in the isotropy chapter; 0 when no D leaves any variance). After all-but-the-top, PR/d and
    κ refer to the d − D directions it keeps, as in the isotropy chapter's table. Hubness uses the
    exact cosine k-NN graph of each setting, whose sweep also sums the all-pairs potential, so
    uniformity is exact too (sampled only in sampled mode). ``labels`` (optional) adds the
    same-label share of the k-NN lists. In sampled mode (``sample_size`` < n, or automatically with
    :data:`AUTO_QUERIES` queries above :data:`AUTO_LIMIT` rows) the hubness columns come from the exact
    lists of the seeded queries (:mod:`.hubness_sampled`: the skewness with its jackknife interval; the
    antihub share, which needs every point's N_k, is NaN with a note).

    A correction that leaves no variance (every row the same: the centred rows are all zero) has
    no directions to measure: its row is NaN, with an
    :class:`~embeval_report.errors.UndefinedMetricWarning`, and so are the neighbourhood checks
    when the original neighbour lists are all ties.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    total = len(X)
    if total > ROW_LIMIT:  # the what-if comparison on a seeded sample of rows (said in ``sampling``)
        subset = np.sort(np.random.default_rng(seed).choice(total, SAMPLE_ROWS, replace=False))
        X = read_rows(X, subset).astype(np.float32, copy=False)
        labels = None if labels is None else np.asarray(labels, dtype=object)[subset]
    pcs = PrincipalDirections.fit(X, device=dev)
    if removed is None:  # candidates that leave nothing are simply not chosen
        removed = best_apcs_removal(X, pcs=pcs, device=dev)  # APCS only: one pass
        removed = 0 if removed is None else removed
    d = X.shape[1]
    scale = float(pcs.mean @ pcs.mean) + float(pcs.eigenvalues.clip(0).sum())
    # setting -> (components removed after centring, or None for the original, or "whiten"; directions kept)
    settings = {"original": (None, d), "centred": (0, d), f"all-but-the-top (D = {removed})": (removed, d - removed),
                "whitened (ZCA ≡ PCA)": ("whiten", d)}
    n = len(X)
    m = (sample_size if sample_size is not None and 3 <= sample_size < n else
         AUTO_QUERIES if sample_size is None and n > AUTO_LIMIT else None)
    queries = sample_queries(n, m, seed) if m else None
    sampling = None if queries is None else (
        f"hubness from the exact k-NN lists of {m:,} of the {n:,} points (seeded queries against the full set"
        + (f"; automatic budget above {AUTO_LIMIT:,} rows, `--sample-size` sets it" if sample_size is None else "")
        + "): the skewness with its jackknife interval, k-NN kept and same-label share over those queries")
    subsample = (None if total == n else
                 f"Every setting is measured on a seeded sample of {n:,} of the {total:,} rows: above {ROW_LIMIT:,} "
                 "rows each corrected copy of the set would cost passes over the whole set per measure.")
    rows, notes, base, intervals = [], {}, None, {}
    for name, (how, kept) in settings.items():
        with _notes_for(name, notes):
            if how is not None and no_variance(pcs.eigenvalues[how:] if how != "whiten" else pcs.eigenvalues, scale):
                warnings.warn("no variance is left (every corrected vector is zero), so isotropy, uniformity and "
                              "hubness of this setting are undefined", UndefinedMetricWarning)
                rows.append(dict(setting=name, **{col: float("nan") for col in COLUMNS
                                                  if labels is not None or col != "label_agreement"}))
                continue
            Y = (X if how is None else whiten(X, device=dev) if how == "whiten"
                 else apply_rows(X, pcs.remover(how, dev), device=dev))
            iso = measure_isotropy(Y, n_boot=0, sample_size=1000, seed=seed, device=dev)
            spec = spectral_metrics(iso.eigenvalues[:kept], kept)  # over the directions a correction keeps
            if queries is None:  # first: its sweep also leaves the exact potential that uniformity reads
                hub = measure_hubness(Y, k, n_boot=0, seed=seed, device=dev)
            else:  # sampled mode: the exact lists of the sampled queries only
                hub = sampled_lists(Y, k, queries, device=dev)
                notes.setdefault(name, []).append(
                    f"hubness from {len(queries):,} sampled queries (skewness estimate; neighbour and label shares "
                    "over those queries); the antihub share needs every point's N_k and is not estimated")
            uni = uniformity(Y, sample_size=sample_size, seed=seed, device=dev)
            if uni.method == "sampled":
                intervals[name, "uniformity"] = (uni.ci_low, uni.ci_high)
                notes.setdefault(name, []).append(f"uniformity from {uni.n_pairs:,} sampled pairs ({uni.ci_method})")
        base = hub if base is None else base
        if queries is None:
            hubness = _hubness_columns(hub, base, labels)
        else:
            hubness, intervals[name, "k_occurrence_skewness"] = _sampled_hubness_columns(hub, base, n, labels, queries,
                                                                                       level, seed)
        rows.append(dict(setting=name, apcs=iso.values["apcs"],
                         participation_ratio_fraction=spec["participation_ratio_fraction"],
                         condition_number=spec["condition_number"], uniformity=uni.value, **hubness))
    table = pd.DataFrame(rows)
    return CorrectionComparison(table, removed, k, _metrics(table, notes, intervals), notes, sampling=sampling,
                                intervals=intervals, subsample=subsample)


def _hubness_columns(hub, base, labels) -> dict:
    """The hubness columns of a setting from its exact k-NN graph (``base``: the original's)."""
    ties = hub.all_ties or base.all_ties  # neighbour lists that are arbitrary ties say nothing
    cols = dict(k_occurrence_skewness=hub.values["k_occurrence_skewness"],
                antihub_occurrence=hub.values["antihub_occurrence"],
                neighbour_overlap=float("nan") if ties else neighbour_overlap(base.neighbors, hub.neighbors))
    if labels is not None:
        cols["label_agreement"] = float("nan") if hub.all_ties else label_agreement(hub.neighbors, labels)
    return cols


def _sampled_hubness_columns(lists, base, n: int, labels, queries, level: float, seed: int) -> tuple[dict, tuple]:
    """The hubness columns from the k-NN lists of the sampled queries only (``base``: the original's lists),
    and the skewness interval."""
    skewness, ci, _ = skewness_with_interval(lists, n, level=level, seed=seed)
    cols = dict(k_occurrence_skewness=skewness, antihub_occurrence=float("nan"),
                neighbour_overlap=neighbour_overlap(base, lists))
    if labels is not None:
        cols["label_agreement"] = label_agreement(lists, labels, rows=queries)
    return cols, ci


@contextmanager
def _notes_for(setting: str, notes: dict):
    """Collect the UndefinedMetricWarnings raised while measuring ``setting`` into ``notes[setting]`` and
    re-emit them prefixed with the setting's name (other warnings pass through unchanged)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UndefinedMetricWarning)
        yield
    for w in caught:
        if issubclass(w.category, UndefinedMetricWarning):
            notes.setdefault(setting, []).append(str(w.message))
            warnings.warn(f"{setting}: {w.message}", UndefinedMetricWarning, stacklevel=3)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


#: the columns computed from the sampled queries' lists in sampled mode
SAMPLED_COLUMNS = ("k_occurrence_skewness", "antihub_occurrence", "neighbour_overlap", "label_agreement")


def _metrics(table: pd.DataFrame, notes: dict | None = None, intervals: dict | None = None) -> dict:
    """What-if metrics ``<column>_after_<abtt|whitening>`` (no verdict: they describe a correction)."""
    out = {}
    for suffix, (i, _) in WHAT_IF.items():
        row = table.iloc[i]
        for col, (label, _) in COLUMNS.items():
            if col not in row:
                continue
            name = f"{col}_after_{suffix}"
            value = float(row[col])
            note = ""
            ci = (intervals or {}).get((row["setting"], col))
            if np.isinf(value):
                note = "infinite: the corrected covariance is singular"
            elif np.isnan(value):
                nothing_left = row.drop("setting").isna().all()
                note = ("undefined: no variance is left after this correction" if nothing_left else
                        "; ".join((notes or {}).get(row["setting"], [])) or "undefined for this set")
            elif ((col in SAMPLED_COLUMNS and any("sampled queries" in x for x in (notes or {}).get(row["setting"], [])))
                  or ci is not None):
                note = "; ".join(notes[row["setting"]])
            out[name] = SPECS[name].record(value, ci, verdict=False, label=f"{label} after {row['setting']}", note=note,
                                           **({"ci_method": "delete-a-group jackknife over the sampled queries"
                                               if col == "k_occurrence_skewness" else "sampled pairs"} if ci else {}))
    return out
