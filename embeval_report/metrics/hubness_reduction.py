r"""Hubness reduction: CSLS and mutual proximity, exact and chunked, and their effect on :math:`N_k`.

Two standard re-scorings of all pairs are computed exactly, block by block (never an n x n
matrix), and the k-occurrence recomputed from their neighbour lists:

* CSLS (Conneau, Lample, Ranzato, Denoyer & Jégou 2018):
  :math:`\mathrm{CSLS}(x,y) = 2\cos(x,y) - r(x) - r(y)`, with :math:`r(x)` the mean cosine of
  :math:`x` to its :math:`K` nearest neighbours;
* mutual proximity, Gaussian variant (Schnitzer, Flexer, Schedl & Widmer 2012):
  :math:`\mathrm{MP}(x,y) = \Phi\big(\tfrac{s_{xy}-\mu_x}{\sigma_x}\big)\,\Phi\big(\tfrac{s_{xy}-\mu_y}{\sigma_y}\big)`,
  the probability that :math:`y` is closer to :math:`x` than a random point is, and vice versa,
  where :math:`\mu_x, \sigma_x` are the mean and standard deviation of the cosine of :math:`x` to
  all other points (exact, from the sum and Gram matrix of the unit vectors).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..kernels import as_numpy, block_moments, knn, resolve_device, self_sweep, unit_rows
from ..kernels.pairs import cosine_mean_sd_rows
from ..kernels.rescoring import Csls as _Csls
from ..kernels.rescoring import MutualProximity as _MutualProximity
from ..kernels.rescoring import SweptCsls as _SweptCsls
from ..kernels.rescoring import csls_key as _csls_key
from .hubness_measures import (K_DEFAULT, check_k, k_occurrence, label_agreement, neighbour_overlap, occurrence_cis,
                               occurrence_measures, top_slot_share)
from .hubness_measures import SPECS as MEASURE_SPECS
from .spec import Metric, MetricSpec, specs

if TYPE_CHECKING:  # pragma: no cover
    from .hubness import HubnessResult

#: method -> (label, reference of the re-scoring)
REDUCTIONS = {
    "csls": ("CSLS", "Conneau et al. 2018: 2 cos(x, y) − r(x) − r(y), r = mean cosine to the k nearest neighbours"),
    "mutual_proximity": ("Mutual proximity (Gaussian)",
                         "Schnitzer et al. 2012: Φ(z_x) Φ(z_y), z = standardised cosine"),
}

#: the skewness after each reduction, recorded without a verdict (a what-if, not the set)
SPECS = specs(*(
    MetricSpec(f"k_occurrence_skewness_{method}", f"k-occurrence skewness after {name}", "lower",
               r"S_{N_k}\ \text{of the re-scored k-NN graph}", f"{ref}; skewness as k_occurrence_skewness")
    for method, (name, ref) in REDUCTIONS.items()))


def csls_knn(X, k: int = K_DEFAULT, *, neighborhood: int = K_DEFAULT, r=None, device="auto"
             ) -> tuple[np.ndarray, np.ndarray]:
    r"""Exact k nearest neighbours under CSLS (Conneau et al. 2018), all pairs, chunked.

    :math:`\mathrm{CSLS}(x, y) = 2\cos(x, y) - r(x) - r(y)`, where :math:`r(x)` is the mean cosine of
    ``x`` to its ``neighborhood`` nearest neighbours (self excluded). ``r`` may be passed when
    already known (e.g. the means of a cosine k-NN pass). Returns ``(indices (n, k), CSLS scores)``.
    """
    return reduced_knn(X, k, ("csls",), neighborhood=neighborhood, r=r, device=device)["csls"]


def mutual_proximity_knn(X, k: int = K_DEFAULT, *, device="auto") -> tuple[np.ndarray, np.ndarray]:
    r"""Exact k nearest neighbours under Gaussian mutual proximity (Schnitzer et al. 2012).

    :math:`\mathrm{MP}(x, y) = \Phi(z_x)\,\Phi(z_y)`, :math:`z_x = (\cos(x,y) - \mu_x)/\sigma_x`, with
    :math:`\mu_x, \sigma_x` the mean and sd of the cosine of ``x`` to all other rows
    (:func:`cosine_mean_sd`). Ranked by :math:`\log\Phi(z_x) + \log\Phi(z_y)` (no saturation at 1),
    in float64 for the float32 candidates. Returns ``(indices (n, k), MP values)``.
    """
    return reduced_knn(X, k, ("mutual_proximity",), device=device)["mutual_proximity"]


def reduced_knn(X, k: int, methods=tuple(REDUCTIONS), *, neighborhood: int = K_DEFAULT, r=None, with_cosine=False,
                device="auto", desc: str | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The k-NN graphs of ``X`` under each hubness reduction (``"csls"``, ``"mutual_proximity"``), from one
    sweep over the cosine Gram (:func:`~embeval_report.kernels.self_sweep`); graphs of this space already
    computed in the run are read from its cache. ``with_cosine`` adds the plain cosine graph (``"cosine"``)
    to the same sweep; CSLS without ``r`` then takes r of that graph (its first ``neighborhood`` similarities, as
    :func:`hubness_reduction_effect` takes them) and is ranked only where the sweep can rank it itself
    (:class:`~embeval_report.kernels.rescoring.SweptCsls`: the collected sweep of a large set), else left out of the
    result (a later call with that r computes it). Returns method -> ``(indices (n, k), scores)``."""
    dev = resolve_device(device)
    X = as_numpy(X)
    n = len(X)
    k = check_k(k, n - 1)
    unknown = set(methods) - set(REDUCTIONS)
    if unknown:
        raise ValueError(f"unknown hubness reduction {sorted(unknown)[0]!r}; expected one of {', '.join(REDUCTIONS)}")
    graphs, names = {"cosine": (k, None)} if with_cosine else {}, {}
    if "csls" in methods and r is None and with_cosine:
        if not 1 <= neighborhood <= k:
            raise ValueError(f"CSLS's neighbourhood must be 1 to k = {k} (r from the cosine graph), not {neighborhood}")
        names["csls"] = "csls"
        graphs["csls"] = (k, _SweptCsls(neighborhood))
    elif "csls" in methods:
        if r is None:
            _, sims = knn(X, check_k(neighborhood, n - 1), metric="cosine", device=dev, desc="k-NN for CSLS r(x)")
            r = sims.astype(np.float64).mean(1)
        r = np.asarray(r, dtype=np.float64)
        names["csls"] = _csls_key(r)
        graphs[names["csls"]] = (k, _Csls(r, dev))
    if "mutual_proximity" in methods:
        names["mutual_proximity"] = "mutual_proximity"
        graphs["mutual_proximity"] = (k, _MutualProximity(lambda: cosine_mean_sd(X, device=dev), dev))
    label = ", ".join(["cosine"] * with_cosine + [REDUCTIONS[m][0] for m in names])
    found = self_sweep(X, graphs, device=dev, desc=desc or f"k-NN ({label})")
    out = {"cosine": found["cosine"]} if with_cosine else {}
    if names.get("csls") in found:
        idx, val = found[names["csls"]]
        r = graphs[names["csls"]][1].r if r is None else r
        out["csls"] = idx, (val - r[:, None]).astype(np.float32)
    if "mutual_proximity" in names:
        idx, logmp = found["mutual_proximity"]
        out["mutual_proximity"] = idx, np.exp(logmp.astype(np.float64)).clip(np.finfo(np.float32).tiny, 1
                                                                                ).astype(np.float32)
    return out


def cosine_mean_sd(X, *, device="auto") -> tuple[np.ndarray, np.ndarray]:
    r"""Mean and standard deviation of the cosine of each row to all *other* rows, exact.

    From the sum :math:`s` and Gram :math:`G` of the unit vectors :math:`u`:
    :math:`\mu_x = (u_x \cdot s - 1)/(n-1)`, :math:`\overline{c^2}_x = (u_x^\top G u_x - 1)/(n-1)`.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    N, s, G = block_moments(X, transform=unit_rows, device=dev).total()
    return cosine_mean_sd_rows(X, s, G, device=dev)


@dataclass(frozen=True)
class ReductionEffect:
    """Hubness before and after each reduction: one table row per setting, and the N_k vectors."""

    table: pd.DataFrame      # setting, method, measures, CI of the skewness, overlap, label agreement
    k_occurrence: dict       # setting label -> N_k
    neighbors: dict          # setting label -> (n, k) neighbour lists
    ci_method: str


def hubness_reduction_effect(X, base: HubnessResult, methods=("csls", "mutual_proximity"), *, labels=None,
                             n_boot: int = 1000, level: float = 0.95, seed: int = 0, device="auto"
                             ) -> ReductionEffect:
    """Re-score all pairs with each hubness reduction and recompute N_k and its measures.

    ``base`` is the :func:`~embeval_report.metrics.hubness.measure_hubness` result of the same ``X``
    (its k and hub size are used; CSLS re-uses its neighbour similarities for r(x)). ``labels``
    (optional) adds the share of neighbours with the same label, a check that the reduction keeps
    meaningful neighbours.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    k = base.k
    settings = {"cosine (original)": (None, base.neighbors)}
    graphs = reduced_knn(X, k, methods, r=base.similarities.astype(np.float64).mean(1), device=dev)
    for m in methods:
        settings[REDUCTIONS[m][0]] = (m, graphs[m][0])
    skew = MEASURE_SPECS["k_occurrence_skewness"]
    rows, nks, nbs, method_text = [], {}, {}, ""
    for label, (m, idx) in settings.items():
        nk = base.k_occurrence if m is None else k_occurrence(idx, len(X))
        vals = occurrence_measures(nk, k, base.hub_size)
        cis, method_text = occurrence_cis(nk, k, hub_size=base.hub_size, n_boot=n_boot, level=level, seed=seed)
        lo, hi = cis.get("k_occurrence_skewness", (None, None))
        row = dict(setting=label, method=m or "cosine", skewness=vals["k_occurrence_skewness"], skew_ci_low=lo,
                   skew_ci_high=hi, verdict=skew.verdict(vals["k_occurrence_skewness"]),
                   robin_hood_index=vals["robin_hood_index"], gini=vals["k_occurrence_gini"],
                   hub_occurrence=vals["hub_occurrence"], antihub_occurrence=vals["antihub_occurrence"],
                   max_k_occurrence=int(vals["max_k_occurrence"]), top1pct_share=top_slot_share(nk),
                   neighbour_overlap=neighbour_overlap(base.neighbors, idx))
        if labels is not None:
            row["label_agreement"] = label_agreement(idx, labels)
        rows.append(row)
        nks[label], nbs[label] = nk, idx
    return ReductionEffect(pd.DataFrame(rows), nks, nbs, method_text)


def reduction_metrics(effect: ReductionEffect) -> list[Metric]:
    """The skewness after each reduction as recorded metrics (``k_occurrence_skewness_<method>``),
    without a verdict: they describe a what-if, not the set."""
    return [SPECS[f"k_occurrence_skewness_{x['method']}"].record(
                x["skewness"], (x["skew_ci_low"], x["skew_ci_high"]), ci_method=effect.ci_method)
            for _, x in effect.table.iloc[1:].iterrows()]
