"""Reading drift over time: Table 217.3's alert rules (seed 000 §217.2.3.4: σ above the trend of the earlier
Procrustes distances, the response patterns, the reference text each headline check carries) and who moved
(drift by metadata group).

The per-snapshot measurements are :mod:`.drift`'s (which re-exports these names); this module reads them.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..io import GROUP_COLUMNS, category_column, iter_groups
from .thresholds import SEVERITY, THRESHOLDS, verdict

#: per-entity cosine drift at or below this is numerical noise (an angle of about 0.08°)
DRIFT_FLOOR = 1e-6
#: a spread of earlier Procrustes distances below this is numerical noise
SIGMA_FLOOR = 1e-6
#: fewest earlier values σ above trend is computed from (an sd of two points says nothing: +204σ from a flat start)
MIN_TREND_POINTS = 3
#: the note of a σ above trend that has too few earlier values
TOO_FEW_POINTS = f"n/a (fewer than {MIN_TREND_POINTS} earlier snapshots)"
#: the snapshots before the first alert count as flat when their mean drift is within this multiple of the first's
FLAT_RATIO = 1.25
#: the Table 217.3 checks: metric -> its bands in :data:`embeval_report.metrics.thresholds.THRESHOLDS` (the
#: mean drift is judged by its ratio to the first interval's, the Procrustes distance by σ above its trend)
ALERT_CHECKS = {"mean_drift": "drift_mean_ratio", "pairwise_similarity_correlation": "drift_pairwise_correlation",
                "anomalous_fraction": "drift_anomalous_fraction", "procrustes_distance": "drift_procrustes_sigma"}


def sigma_above_trend(series, floor: float = SIGMA_FLOOR, min_points: int = MIN_TREND_POINTS) -> list[float | None]:
    """z of each value against the mean and sd (ddof 1) of all earlier values; None with fewer than ``min_points``
    (:data:`MIN_TREND_POINTS`, 3) earlier values.

    The seed's ``detect_drift_events`` rule (trailing mean and sd). An sd below ``floor`` is taken
    as ``floor``: Procrustes distances that differ by less are numerical noise. A value (or an
    earlier value) that is undefined gives None.
    """
    out = []
    for t, x in enumerate(series):
        prev = np.asarray(series[:t], float)
        if len(prev) < max(min_points, 2) or not np.isfinite(x) or not np.isfinite(prev).all():
            out.append(None)
            continue
        out.append(float((x - prev.mean()) / max(float(prev.std(ddof=1)), floor)))
    return out


def trend_sigma(z: float | None, earlier: int) -> float | None:
    r"""The σ of a long stable history that is as rare as ``z`` σ above the mean and sd of only ``earlier`` values.

    Table 217.3's "2σ / 3σ above trend" assume a trend known from a long history (a one-sided false-alarm rate of
    2.3 % and 0.13 %). With m earlier values the sd is itself estimated: under stable conditions a new value is
    :math:`z = t\sqrt{1 + 1/m}` with t Student's t on m − 1 df (a prediction interval), so the seed's rule on
    z alone alarms about 11 % of the time at m = 3. The bands are read on the σ of the same tail probability,
    :math:`\Phi^{-1}(F_{t,m-1}(z/\sqrt{1+1/m}))`: at m = 3, 5.2σ above the trend reads as 2σ, 22σ as 3σ."""
    if z is None or earlier < 2:
        return None
    from scipy import stats

    tail = float(stats.t.sf(z / math.sqrt(1 + 1 / earlier), earlier - 1))
    return float(stats.norm.isf(tail)) if tail > 0 else math.inf


def anomalous_check(fraction: float, ci_low: float | None) -> str | None:
    r"""The Table 217.3 verdict of an anomalous fraction, read on the low end of its interval.

    The rule :math:`d_i > \mu_d + 2\sigma_d` (the seed's k = 2) flags a share of the entities under natural variation too (seed 000
    §217.2.3.2: "a baseline anomaly rate around 2-5 % is expected"; 4-5 % for the right-skewed drift of noise),
    right at the table's 5 % warning edge: judged on its value, a snapshot without drift is a warning about every
    other time. A warning needs a share above the edge beyond its sampling error."""
    value = ci_low if ci_low is not None and math.isfinite(ci_low) else fraction
    return verdict("drift_anomalous_fraction", value)


def drift_pattern(levels: list[str | None], ratios: list[float]) -> str:
    """The seed's response patterns (§217.2.3.4) from the per-snapshot alert levels and mean-drift ratios.

    ``"stable"``: no alert. ``"isolated spike"``: an alert followed by a snapshot without one.
    Alerts that persist to the latest snapshot are a ``"regime shift"`` when the snapshots before
    the first alert were flat (mean drift within :data:`FLAT_RATIO` = 1.25x the first interval's)
    and a ``"gradual trend"`` when the drift was already rising before it.
    """
    alert = [SEVERITY[v] > 0 for v in levels]
    if not any(alert):
        return "stable"
    first = alert.index(True)
    if not all(alert[first:]):
        return "isolated spike"
    before = [r for r in ratios[:first] if r is not None and np.isfinite(r)]
    return "regime shift" if all(r < FLAT_RATIO for r in before) else "gradual trend"


def alert_level(x) -> str | None:
    """A verdict read back from a DataFrame cell (pandas may turn ``None`` into NaN)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def alert_reference(name: str, row: pd.Series, n_snapshots: int) -> str:
    """The reference a headline check carries: its Table 217.3 band, and here its ratio or σ, or why it does not
    apply (one snapshot; σ with fewer than :data:`MIN_TREND_POINTS` earlier values; an undefined distance)."""
    bands = THRESHOLDS[ALERT_CHECKS[name]]
    text = f"{bands.table}: {bands.text}"
    if name == "mean_drift":
        if row["mean_drift_ratio"] is None or pd.isna(row["mean_drift_ratio"]):
            return text + "; not applicable with one snapshot (the first interval is the baseline)"
        return text + f"; here {row['mean_drift_ratio']:.2f}× the first interval's drift"
    if name == "procrustes_distance":
        if row["procrustes_sigma"] is None or pd.isna(row["procrustes_sigma"]):
            if not math.isfinite(row["procrustes_distance"]) or n_snapshots > MIN_TREND_POINTS:
                return text + "; not applicable: the Procrustes distance is undefined for this snapshot or an " \
                              "earlier one"
            return text + (f"; not applicable with {n_snapshots} snapshot(s): σ above trend is "
                           f"{TOO_FEW_POINTS} (needs ≥ {MIN_TREND_POINTS + 1} snapshots)")
        calibrated = row.get("procrustes_trend_sigma")
        return text + (f"; here {row['procrustes_sigma']:.1f}σ above the earlier snapshots"
                       + (f", as rare as {calibrated:.1f}σ above a trend known from a long history (Student's t "
                          "prediction interval over the earlier values): the bands are read on that"
                          if calibrated is not None and not pd.isna(calibrated) else ""))
    if name == "anomalous_fraction" and row.get("anomalous_ci_low") is not None \
            and not pd.isna(row["anomalous_ci_low"]):
        return text + (f"; read on the low end of its 95 % interval, {row['anomalous_ci_low']:.1%} (the rule flags "
                       "2-5 % of the entities under natural variation)")
    return text


# ---------------------------------------------------------------------------------------------
# Who moved: drift by metadata group (``result``: a :class:`~.drift.DriftResult`)
# ---------------------------------------------------------------------------------------------

def group_columns(metadata: pd.DataFrame | None, max_groups: int = 12) -> list[str]:
    """Metadata columns to break drift down by: those of ``GROUP_COLUMNS`` with 2..``max_groups`` values."""
    return [c for c in GROUP_COLUMNS if category_column(metadata, (c,), max_groups)]


def drift_by_group(result, metadata: pd.DataFrame | None, *, snapshot: int = -1) -> pd.DataFrame:
    """Per value of each group column: entities, mean drift, anomalous share and k-NN overlap in one snapshot."""
    r = result.snapshots[snapshot]
    rows = []
    for col in group_columns(metadata):
        for name, m in iter_groups(metadata[col].to_numpy()[r.index]):
            rows.append({"column": col, "group": name, "entities": len(m), "mean drift": float(r.drift[m].mean()),
                         "anomalous %": 100 * float(r.anomalous[m].mean()),
                         "share of anomalies %": 100 * float(r.anomalous[m].sum() / max(r.anomalous.sum(), 1)),
                         "k-NN overlap": float(r.overlap[m].mean())})
    return pd.DataFrame(rows, columns=["column", "group", "entities", "mean drift", "anomalous %",
                                       "share of anomalies %", "k-NN overlap"])


def group_drift_series(result, metadata: pd.DataFrame | None) -> tuple[str, pd.DataFrame] | None:
    """Mean drift per group and snapshot for the group column whose groups differ most (None without one)."""
    best = None
    for col in group_columns(metadata):
        g = metadata[col].astype(object).where(metadata[col].notna(), "(missing)").astype(str).to_numpy()
        table = pd.DataFrame({r.name: pd.Series(r.drift).groupby(g[r.index]).mean() for r in result.snapshots})
        spread = float((table.max(0) / table.mean(0).clip(lower=DRIFT_FLOOR)).max())
        if best is None or spread > best[0]:
            best = (spread, col, table)
    return None if best is None else (best[1], best[2])
