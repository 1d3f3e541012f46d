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
(:func:`~embeval_report.isotropy.measure_isotropy`, :func:`~embeval_report.uniformity.uniformity`,
:func:`~embeval_report.hubness.measure_hubness`). The trade-off is made visible with two
neighbourhood checks: how many of each point's original k nearest neighbours survive
(``neighbour_overlap``) and, when labels exist, how often neighbours share the label
(``label_agreement``), a cheap proxy for downstream quality.
"""
from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .display import escape
from .hubness import label_agreement, measure_hubness, neighbour_overlap
from .isotropy import PrincipalDirections, all_but_the_top_effect, best_removal, measure_isotropy, spectral_metrics
from .kernels import as_numpy, iter_chunks, resolve_device
from .plotting import PALETTE, WIDTH
from .results import Metric
from .uniformity import uniformity

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


def whiten(X, *, method: str = "zca", floor: float = WHITEN_FLOOR, device="auto") -> np.ndarray:
    """ZCA (``(X − μ) V Λ^{-1/2} V^T``) or PCA (``(X − μ) V Λ^{-1/2}``) whitening, float32.

    Eigenvalues are floored at ``floor · λ1`` (seed 000's code floors at the absolute 1e-6;
    a relative floor keeps the transform scale-free). The result has identity covariance on
    every direction above the floor.
    """
    if method not in ("zca", "pca"):
        raise ValueError(f"method must be 'zca' or 'pca', not {method!r}")
    import torch

    dev = resolve_device(device)
    X = as_numpy(X)
    pcs = PrincipalDirections.fit(X, device=dev)
    lam = np.maximum(pcs.eigenvalues, floor * max(pcs.eigenvalues[0], 1e-300))
    W = pcs.vectors / np.sqrt(lam)
    if method == "zca":
        W = W @ pcs.vectors.T
    W_t, mu = torch.as_tensor(W, device=dev), torch.as_tensor(pcs.mean, device=dev)
    out = np.empty(X.shape, dtype=np.float32)
    for s, x in iter_chunks(X, device=dev):
        out[s:s + len(x)] = ((x - mu) @ W_t).cpu().numpy()
    return out


@dataclass(frozen=True)
class CorrectionComparison:
    """One row per setting (original, centred, all-but-the-top, whitened)."""

    table: pd.DataFrame
    removed: int            # D used for all-but-the-top
    k: int
    metrics: dict           # recorded what-if metrics, name -> Metric (no verdicts)


def compare_corrections(X, labels=None, *, k: int = 10, removed: int | None = None, sample_size: int | None = None,
                        seed: int = 0, device="auto") -> CorrectionComparison:
    """Isotropy, uniformity and hubness of ``X`` before and after each correction.

    ``removed`` is all-but-the-top's D (default: the D whose corrected APCS is closest to 0,
    as in the isotropy chapter). After all-but-the-top, PR/d and κ refer to the d − D
    directions it keeps, as in the isotropy chapter's table. Uniformity is exact over all pairs within the budget of
    :func:`~embeval_report.uniformity.uniformity` and sampled beyond it; hubness uses the exact
    cosine k-NN graph. ``labels`` (optional) adds the same-label share of the k-NN lists.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    if removed is None:
        removed = best_removal(all_but_the_top_effect(X, sample_size=1000, seed=seed, device=dev)[0])
    pcs = PrincipalDirections.fit(X, device=dev)
    settings = {"original": X, "centred": _apply(X, pcs.remover(0, dev), dev),
                f"all-but-the-top (D = {removed})": _apply(X, pcs.remover(removed, dev), dev),
                "whitened (ZCA ≡ PCA)": whiten(X, device=dev)}
    rows, base_neighbors = [], None
    d = X.shape[1]
    for (name, Y), kept in zip(settings.items(), (d, d, d - removed, d)):
        iso = measure_isotropy(Y, n_boot=0, sample_size=1000, seed=seed, device=dev)
        spec = spectral_metrics(iso.eigenvalues[:kept], kept)  # over the directions a correction keeps
        uni = uniformity(Y, sample_size=sample_size, seed=seed, device=dev)
        hub = measure_hubness(Y, k, n_boot=0, seed=seed, device=dev)
        base_neighbors = hub.neighbors if base_neighbors is None else base_neighbors
        row = dict(setting=name, apcs=iso.values["apcs"],
                   participation_ratio_fraction=spec["participation_ratio_fraction"],
                   condition_number=spec["condition_number"], uniformity=uni.value,
                   k_occurrence_skewness=hub.values["k_occurrence_skewness"],
                   antihub_occurrence=hub.values["antihub_occurrence"],
                   neighbour_overlap=neighbour_overlap(base_neighbors, hub.neighbors))
        if labels is not None:
            row["label_agreement"] = label_agreement(hub.neighbors, labels)
        rows.append(row)
    table = pd.DataFrame(rows)
    return CorrectionComparison(table, removed, k, _metrics(table))


def _apply(X, transform, dev) -> np.ndarray:
    out = np.empty(X.shape, dtype=np.float32)
    for s, x in iter_chunks(X, device=dev):
        out[s:s + len(x)] = transform(x).cpu().numpy()
    return out


def _metrics(table: pd.DataFrame) -> dict:
    """What-if metrics ``<column>_after_<abtt|whitening>`` (no verdict: they describe a correction)."""
    out = {}
    for suffix, row in (("abtt", table.iloc[2]), ("whitening", table.iloc[3])):
        for col, (label, direction) in COLUMNS.items():
            if col not in row:
                continue
            name = f"{col}_after_{suffix}"
            out[name] = Metric(name=name, value=float(row[col]), direction=direction,
                               reference=f"{REFERENCE}; exact, as in the intrinsic chapters",
                               label=f"{label} after {row['setting']}")
    return out


def display_table(c: CorrectionComparison) -> pd.DataFrame:
    """The comparison as the report shows it (percentages for shares)."""
    t = c.table.rename(columns={k: v[0] for k, v in COLUMNS.items()})
    for col in ("antihubs", "k-NN kept", "same-label k-NN", "PR / d"):
        if col in t:
            t[col] = (100 * t[col]).round(1).astype(str) + " %"
    return t


def narrative(c: CorrectionComparison) -> str:
    """What each correction buys and costs on this set."""
    t = c.table.set_index("setting")
    o, ab, wh = t.iloc[0], t.iloc[2], t.iloc[3]
    abn = escape(t.index[2])
    parts = [
        f"On this set, {abn} moves APCS from {o['apcs']:.3f} to {ab['apcs']:.3f} and PR/d from "
        f"{o['participation_ratio_fraction']:.1%} to {ab['participation_ratio_fraction']:.1%}; whitening gives "
        f"APCS {wh['apcs']:.3f} and PR/d {wh['participation_ratio_fraction']:.1%} (by construction every direction "
        "then has the same variance, so the isotropy metrics say nothing more about quality).",
        f"Uniformity goes from {o['uniformity']:.3f} to {ab['uniformity']:.3f} ({abn}) and {wh['uniformity']:.3f} "
        f"(whitened); the k-occurrence skewness from {o['k_occurrence_skewness']:.2f} to "
        f"{ab['k_occurrence_skewness']:.2f} and {wh['k_occurrence_skewness']:.2f}.",
    ]
    cost = (f"The price is the neighbourhoods: {ab['neighbour_overlap']:.0%} of each point's {c.k} nearest "
            f"neighbours survive {abn}, {wh['neighbour_overlap']:.0%} survive whitening")
    if "label_agreement" in t:
        cost += (f", and the share of neighbours with the same label goes from {o['label_agreement']:.1%} to "
                 f"{ab['label_agreement']:.1%} and {wh['label_agreement']:.1%}")
        best = t["label_agreement"].idxmax()
        cost += (f". On this proxy the best setting is **{escape(best)}**" + (
            "; whitening amplifies low-variance (often noise) directions as much as the informative ones, "
            "which is why it can hurt neighbour quality even while it perfects the isotropy numbers."
            if wh["label_agreement"] < o["label_agreement"] else "."))
    else:
        cost += ". Without labels the report cannot tell whether the changed neighbours are better or worse: " \
                "check a downstream task before adopting a correction."
    parts.append(cost)
    advice = ("All-but-the-top is the gentler correction (seed 000: it \"often works better than full "
              "whitening\"): it removes only the few dominant directions that frequency or popularity effects "
              "put into every vector.")
    if "label_agreement" in t and ab["label_agreement"] < t.iloc[1]["label_agreement"] - 0.02:
        advice += (f" Here, though, those top directions also carry the label structure: removing them costs "
                   f"{100 * (t.iloc[1]['label_agreement'] - ab['label_agreement']):.1f} points of same-label "
                   "neighbours against centring alone, so they are signal, not only a common direction.")
    parts.append(advice + " Whichever you adopt, fit the transform on the training set and apply it to queries "
                          "and index alike.")
    return "\n\n".join(parts)


def comparison_figure(c: CorrectionComparison) -> plt.Figure:
    """Small multiples: each compared quantity as bars per setting."""
    cols = [col for col in COLUMNS if col in c.table and col != "condition_number"]
    fig, axes = plt.subplots(1, len(cols), figsize=(WIDTH, 3.0))
    colors = [PALETTE["muted"], PALETTE["data"], PALETTE["accent"], PALETTE["reference"]]
    short = ["original", "centred", f"ABTT D={c.removed}", "whitened"]
    for ax, col in zip(np.atleast_1d(axes), cols):
        ax.bar(range(len(c.table)), c.table[col], color=colors[:len(c.table)])
        label, direction = COLUMNS[col]
        ax.set_title(f"{label}\n({direction} is better)", fontsize=9)
        ax.set_xticks(range(len(c.table)), short, rotation=60, ha="right", fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
    return fig
