"""Shared plotting style (seaborn) and the figures of each chapter.

Figure functions take a result object and return a matplotlib Figure; notebooks show them
with :func:`embeval_report.display.show_figure`.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

PALETTE = {"data": "#3b6ea8", "reference": "#c2542d", "accent": "#6a8f3a", "muted": "#8a8a8a",
           "healthy": "#2e7d32", "concerning": "#b7791f", "problematic": "#c62828"}
WIDTH = 10.0  # inches; the report column


def use_style() -> None:
    """Apply the report's seaborn theme (call once per notebook)."""
    sns.set_theme(context="notebook", style="whitegrid", font_scale=0.95,
                  rc={"figure.dpi": 110, "savefig.dpi": 150, "axes.titleweight": "semibold",
                      "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
                      "figure.constrained_layout.use": True})


def eigenvalue_spectrum(result) -> plt.Figure:
    """Covariance spectrum on a log scale, and cumulative variance with the 90 % line."""
    lam = np.clip(result.eigenvalues, 0, None)
    k = np.arange(1, len(lam) + 1)
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    pos = lam > 0
    a.semilogy(k[pos], lam[pos], color=PALETTE["data"], lw=1.8, label="this embedding set")
    a.axhline(lam.mean(), color=PALETTE["reference"], ls="--", lw=1.2,
              label="isotropic (all equal, same total)")
    a.set(xlabel="Principal component (rank)", ylabel="Eigenvalue (variance, log scale)",
          title="Eigenvalue spectrum")
    a.legend(loc="upper right")
    cum = np.cumsum(lam) / lam.sum()
    b.plot(k, cum, color=PALETTE["data"], lw=1.8, label="this embedding set")
    b.plot(k, k / len(k), color=PALETTE["reference"], ls="--", lw=1.2, label="isotropic")
    b.axhline(0.9, color=PALETTE["muted"], ls=":", lw=1)
    d90 = result.values["dims_for_90pct_variance"]
    b.axvline(d90, color=PALETTE["muted"], ls=":", lw=1)
    b.annotate(f"90 % at {d90} of {len(lam)}", (d90, 0.9), xytext=(8, -18), textcoords="offset points",
               fontsize=9, color="#333")
    b.set(xlabel="Number of components", ylabel="Cumulative variance explained",
          title="Cumulative variance", ylim=(0, 1.02))
    b.legend(loc="lower right")
    return fig


def cosine_histogram(samples: dict[str, np.ndarray], d: int, *, exact_means: dict[str, float] | None = None
                     ) -> plt.Figure:
    """Histogram of sampled pairwise cosines against the isotropic reference N(0, 1/d)."""
    fig, ax = plt.subplots(figsize=(WIDTH, 3.6))
    colors = [PALETTE["data"], PALETTE["accent"], "#7b4ea3", "#2b8a8a"]
    for (name, x), c in zip(samples.items(), colors):
        ax.hist(x, bins=120, range=(-1, 1), density=True, alpha=0.55, color=c, label=name)
        mean = (exact_means or {}).get(name, float(np.mean(x)))
        ax.axvline(mean, color=c, ls="--", lw=1.2)
    grid = np.linspace(-1, 1, 801)
    sd = 1 / math.sqrt(d)
    ax.plot(grid, np.exp(-grid ** 2 / (2 * sd * sd)) / (sd * math.sqrt(2 * math.pi)),
            color=PALETTE["reference"], lw=1.6, label=f"isotropic reference N(0, 1/d), d = {d}")
    ax.set(xlabel="Cosine similarity of a random pair", ylabel="Density", xlim=(-1, 1),
           title="Pairwise cosine similarity (dashed: mean over all pairs)")
    ax.legend(loc="upper left", fontsize=8.5)
    return fig


def all_but_the_top_figure(table) -> plt.Figure:
    """APCS and PR/d against the number of removed principal components."""
    t = table[table["removed"].notna()]
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.4))
    orig = table.iloc[0]
    a.plot(t["removed"], t["apcs"], "o-", color=PALETTE["data"])
    a.axhline(orig["apcs"], color=PALETTE["muted"], ls=":", label="original")
    a.axhspan(-0.1, 0.1, color=PALETTE["healthy"], alpha=0.08, label="healthy band (< 0.1)")
    a.set(xlabel="Components removed after centring (D)", ylabel="APCS", title="Mean pairwise cosine")
    a.legend(fontsize=8.5)
    b.plot(t["removed"], t["participation_ratio_fraction"], "o-", color=PALETTE["data"])
    b.axhline(orig["participation_ratio_fraction"], color=PALETTE["muted"], ls=":", label="original")
    b.axhspan(0.5, 1.0, color=PALETTE["healthy"], alpha=0.08, label="healthy band (> 50 %)")
    b.set(xlabel="Components removed after centring (D)", ylabel="PR / d", ylim=(0, 1.02),
          title="Participation ratio (fraction of remaining d)")
    b.legend(fontsize=8.5)
    return fig
