"""The report's figure style: seaborn theme, palette and column width.

Each chapter module draws its own figures with these (a figure function takes a result and
returns a matplotlib Figure, shown with :func:`embeval_report.present.display.show_figure`).
"""
from __future__ import annotations

import numpy as np
import seaborn as sns

from .escape import mathtext

PALETTE = {"data": "#3b6ea8", "reference": "#c2542d", "accent": "#6a8f3a", "muted": "#8a8a8a",
           "healthy": "#2e7d32", "concerning": "#b7791f", "problematic": "#c62828"}
WIDTH = 10.0  # inches; the report column


def use_style() -> None:
    """Apply the report's seaborn theme (call once per notebook)."""
    sns.set_theme(context="notebook", style="whitegrid", font_scale=0.95,
                  rc={"figure.dpi": 110, "savefig.dpi": 150, "axes.titleweight": "bold",
                      "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
                      "figure.constrained_layout.use": True})


def share_heatmap(ax, counts: np.ndarray, rows, cols, *, annotate: bool, cmap: str = "Blues"):
    """Counts drawn as row shares (each row sums to 1), labelled with ``rows`` and ``cols``; returns the image."""
    share = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    im = ax.imshow(share, cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(cols)), [mathtext(c) for c in cols], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [mathtext(c) for c in rows], fontsize=8)
    ax.grid(False)
    if annotate:
        for i in range(share.shape[0]):
            for j in range(share.shape[1]):
                if counts[i, j]:
                    ax.text(j, i, f"{share[i, j]:.0%}", ha="center", va="center", fontsize=7,
                            color="white" if share[i, j] > 0.55 else "#222")
    return im
