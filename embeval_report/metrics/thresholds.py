"""The seeds' threshold tables as data: every verdict band, written once.

A verdict is ``"healthy"``, ``"concerning"`` or ``"problematic"``; ``None`` where no table
applies. Each :class:`Bands` row cites the table it comes from. Metric specs
(:mod:`embeval_report.metrics.spec`) point at these bands; captions and figures read their
edges and wording from here, so no threshold number is written twice.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

VERDICTS = ("healthy", "concerning", "problematic")
#: the rank of a verdict or a finding's severity ("note": a diagnostic finding that costs nothing measured)
SEVERITY = {None: 0, "healthy": 0, "note": 0, "concerning": 1, "problematic": 2}

TABLE_217_2 = "Table 217.2 (seed 000 §217.0.7)"
BOX_21_1_1 = "Isotropy Benchmarks box (seed 001 §21.1.1)"
BOX_21_1_2 = "Alignment vs Uniformity Trade-off box (seed 001 §21.1.2)"
TABLE_217_3 = "Table 217.3 (seed 000 §217.2.3.4)"


@dataclass(frozen=True)
class Bands:
    """Three bands on one quantity.

    ``direction="lower"``: value < ``healthy`` is healthy, value > ``problematic`` is
    problematic, anything between (edges included) is concerning. ``"higher"`` mirrors it.
    """

    direction: str
    healthy: float
    problematic: float
    table: str
    text: str  # the row as the table prints it, shown next to the verdict
    min_d: int = 1             # the table holds for spaces of at least this many dimensions ...
    min_n_per_d: float = 0.0   # ... and at least this many vectors per dimension
    why: str = ""              # why outside those conditions the table says nothing, in words

    def applies(self, n: int | None, d: int | None) -> str:
        """Why the table does not apply to a set of ``n`` vectors in ``d`` dimensions ("" when it does)."""
        if d is not None and d < self.min_d:
            return f"the threshold holds for d ≥ {self.min_d} (here d = {d}): {self.why}"
        if n is not None and d is not None and n < self.min_n_per_d * d:
            return (f"the threshold needs n ≥ {self.min_n_per_d:g}·d vectors (here n = {n:,}, d = {d:,}): with fewer, "
                    "the sample covariance's spectrum spreads even for isotropic vectors (Marchenko & Pastur 1967)")
        return ""

    @property
    def edges(self) -> str:
        """The healthy edge as a comparison, e.g. ``< 0.1`` or ``> 50 %`` (for captions and legends)."""
        return f"{'<' if self.direction == 'lower' else '>'} {self.healthy:g}"

    def verdict(self, value: float | None) -> str | None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        sign = 1.0 if self.direction == "lower" else -1.0
        if sign * value < sign * self.healthy:
            return "healthy"
        if sign * value > sign * self.problematic:
            return "problematic"
        return "concerning"


#: quantity -> bands. Quantities expressed as a fraction of d are named ``*_fraction``.
#: vectors per dimension a spectral threshold needs: at d/n = 0.1 the sample covariance of isotropic vectors has
#: κ ≈ ((1 + √0.1)/(1 − √0.1))² ≈ 3.7 and PR/d ≈ 0.91 (Marchenko–Pastur), inside every healthy band
SPECTRAL_N_PER_D = 10.0
THRESHOLDS: dict[str, Bands] = {
    "apcs": Bands("lower", 0.1, 0.3, TABLE_217_2, "healthy < 0.1, concerning 0.1–0.3, problematic > 0.3"),
    "participation_ratio_fraction": Bands(
        "higher", 0.5, 0.2, TABLE_217_2, "healthy > 50 %, concerning 20–50 %, problematic < 20 % of d",
        min_n_per_d=SPECTRAL_N_PER_D),
    "condition_number": Bands("lower", 10.0, 100.0, TABLE_217_2, "healthy < 10, concerning 10–100, problematic > 100",
                              min_n_per_d=SPECTRAL_N_PER_D),
    "dims_for_90pct_variance_fraction": Bands(
        "higher", 0.3, 0.1, TABLE_217_2, "healthy > 30 %, concerning 10–30 %, problematic < 10 % of d",
        min_n_per_d=SPECTRAL_N_PER_D),
    # the box is written for 768-dimensional models; below 100 dimensions the top 10 hold at least 10/d of the
    # variance of isotropic vectors (24 dimensions: 42 %), half the healthy edge or more, so it says nothing
    "top10_variance_ratio": Bands(
        "lower", 0.2, 0.5, BOX_21_1_1, "good < 20 %, warning sign > 50 % of variance in the top 10 components",
        min_d=100, why="in fewer dimensions the top 10 components hold ≥ 10/d of the variance of even isotropic "
                       "vectors"),
    # seed 000 §217.1, diagnose_hubness (line 619): < 0.5 low, 0.5 <= s < 1.5 moderate, >= 1.5 severe.
    # (Bands puts exactly 1.5 in the middle band; the seed calls it severe.)
    "k_occurrence_skewness": Bands(
        "lower", 0.5, 1.5, "diagnose_hubness bands (seed 000 §217.1, line 619)",
        "low < 0.5, moderate 0.5–1.5, severe ≥ 1.5"),
    # seed 001 §21.1.3 detect_dimension_collapse: collapse_detected = dead_ratio > 0.1 or effective_rank < 0.3 d.
    # One cut each, no middle band (a value exactly on the cut reads as concerning).
    "effective_rank_fraction": Bands(
        "higher", 0.3, 0.3, "collapse rule (seed 001 §21.1.3)", "collapse when effective rank < 30 % of d"),
    "dead_dimension_fraction": Bands(
        "lower", 0.1, 0.1, "collapse rule (seed 001 §21.1.3)", "collapse when > 10 % of dimensions are dead"),
    # the box gives only "typical good values", no warning level: never problematic
    "uniformity": Bands("lower", -2.0, math.inf, BOX_21_1_2, "typical good < −2.0 (t = 2); no warning level given"),
    "alignment": Bands("lower", 0.5, math.inf, BOX_21_1_2, "typical good < 0.5 (α = 2); no warning level given"),
    # seed 000 §219.2 quality table (COHENS_D_QUALITY): d > 1.0 moderate or better (also the §221.1 checklist
    # pass), 0.5 < d <= 1.0 poor, d <= 0.5 very poor. (Bands puts exactly 1.0 and 0.5 in the middle band.)
    "negative_score_cohens_d": Bands(
        "higher", 1.0, 0.5, "seed 000 §219.2 quality table and §221.1 checklist",
        "excellent > 2.0, good > 1.5, moderate > 1.0 (healthy); poor 0.5–1.0 (concerning); very poor ≤ 0.5"),
    # seed 000 §221.1 checklist "Link prediction: AUC > 0.9" and §219.2 rule "AUC < 0.8: poor discriminative power"
    "link_prediction_auc": Bands(
        "higher", 0.9, 0.8, "seed 000 §221.1 checklist and §219.2 rule",
        "pass > 0.9 (checklist); below 0.8 poor discriminative power (§219.2)"),
    # seed 000 §221.1 checklist "AP > 0.8 on held-out edges" (one cut; the seed's AP uses 1:1 negatives)
    "link_prediction_average_precision": Bands(
        "higher", 0.8, 0.8, "seed 000 §221.1 checklist", "pass > 0.8 with 1:1 negatives"),
    # seed 000 §217.2.2 stability guidelines (first bullet from line 619): > 0.95 excellent,
    # 0.85–0.95 acceptable (consider averaging across seeds), < 0.85 problematic
    "pairwise_similarity_correlation": Bands(
        "higher", 0.95, 0.85, "stability guidelines (seed 000 §217.2.2)",
        "excellent > 0.95, acceptable 0.85–0.95 (consider averaging seeds), problematic < 0.85"),
    # Table 217.3, temporal stability monitoring: warning -> concerning, critical -> problematic.
    # (A value exactly on a Table 217.3 edge, e.g. a ratio of 1.5, reads as concerning here.)
    "drift_mean_ratio": Bands("lower", 1.5, 2.5, TABLE_217_3,
                              "mean drift: warning > 1.5× baseline, critical > 2.5× baseline"),
    "drift_pairwise_correlation": Bands("higher", 0.95, 0.90, TABLE_217_3,
                                        "pairwise correlation: warning < 0.95, critical < 0.90"),
    "drift_anomalous_fraction": Bands("lower", 0.05, 0.10, TABLE_217_3,
                                      "anomalous fraction: warning > 5 %, critical > 10 %"),
    "drift_procrustes_sigma": Bands("lower", 2.0, 3.0, TABLE_217_3,
                                    "Procrustes distance: warning > 2σ above trend, critical > 3σ above trend"),
}

#: Table 217.1 (seed 000 §217.0.5.2.1): interpretation of the condition number, upper edges.
TABLE_217_1 = (
    (5.0, "healthy, minor differences across dimensions"),
    (20.0, "mild anisotropy, probably fine"),
    (100.0, "moderate anisotropy, worth investigating"),
    (1000.0, "severe anisotropy, likely problematic"),
    (math.inf, "extreme: some dimensions essentially unused"),
)

#: seed 000 §219.2 quality table for Cohen's d of positive vs negative scores, checked top-down with strict ">".
COHENS_D_QUALITY = ((2.0, "excellent"), (1.5, "good"), (1.0, "moderate"), (0.5, "poor"), (-math.inf, "very_poor"))


def cohens_d_quality(d: float) -> str:
    """The §219.2 quality word for Cohen's d (``excellent`` … ``very_poor``; NaN reads ``very_poor``)."""
    for edge, word in COHENS_D_QUALITY:
        if d > edge:
            return word
    return COHENS_D_QUALITY[-1][1]


def verdict(quantity: str, value: float | None) -> str | None:
    """Verdict for ``value`` of ``quantity`` from :data:`THRESHOLDS` (``None`` if no table)."""
    bands = THRESHOLDS.get(quantity)
    return bands.verdict(value) if bands else None


def condition_number_reading(kappa: float) -> str:
    """Table 217.1's interpretation of a condition number."""
    for edge, text in TABLE_217_1:
        if kappa < edge:
            return text
    return TABLE_217_1[-1][1]


def worst(verdicts) -> str | None:
    """The most severe verdict among ``verdicts`` (``None`` when none is set)."""
    vs = [v for v in verdicts if v]
    return max(vs, key=SEVERITY.__getitem__) if vs else None
