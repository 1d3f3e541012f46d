"""The report's figure style: seaborn theme, palette and column width.

Each chapter module draws its own figures with these (a figure function takes a result and
returns a matplotlib Figure, shown with :func:`embeval_report.present.display.show_figure`).
"""
from __future__ import annotations

import seaborn as sns

PALETTE = {"data": "#3b6ea8", "reference": "#c2542d", "accent": "#6a8f3a", "muted": "#8a8a8a",
           "healthy": "#2e7d32", "concerning": "#b7791f", "problematic": "#c62828"}
WIDTH = 10.0  # inches; the report column


def use_style() -> None:
    """Apply the report's seaborn theme (call once per notebook)."""
    sns.set_theme(context="notebook", style="whitegrid", font_scale=0.95,
                  rc={"figure.dpi": 110, "savefig.dpi": 150, "axes.titleweight": "bold",
                      "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
                      "figure.constrained_layout.use": True})
