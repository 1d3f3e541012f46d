r"""Statistical rigor across a whole report (seed 001 §21.5): every hypothesis test the chapters ran,
adjusted together, and the power of every headline mean.

* **Multiple testing.** A report runs many tests (MMD and KS per snapshot, Kruskal–Wallis and pairwise
  Mann–Whitney per stratum, the negative-quality tests, ...). Each chapter records its tests
  (:class:`~embeval_report.stats.HypothesisTest`); :func:`adjust_tests` adjusts all of them together, with
  Holm's step-down procedure (family-wise error ≤ α, Holm 1979) and Benjamini–Hochberg (false-discovery
  rate ≤ α, Benjamini & Hochberg 1995), through statsmodels ``multipletests``.
* **Power.** For a metric that is a mean over units (queries, test edges, entities) with standard
  deviation s over n units, the minimum detectable effect at level α and power 1 − β is
  :math:`\mathrm{MDE} = d_{\alpha,\beta}(n)\, s`, with :math:`d` the effect size a two-sided one-sample
  (paired) t-test detects (statsmodels ``TTestPower``; → :math:`(z_{1-\alpha/2}+z_{1-\beta})/\sqrt n`
  for large n), and the units needed to detect a shift δ solve the same equation for n, with δ the effect
  that matters for that metric (``--mde``, :mod:`.effects`: by default 0.01 for a bounded metric, less
  near a bound, and 5 % of the value for an unbounded one such as mean rank). Seed 001's
  formulas use the two-sample z form :math:`2\sigma^2/n`; a mean over one set of units, or a paired
  comparison of two models on the same units, is the one-sample form.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..stats import POWER_TEST, adjust_pvalues, required_units
from .spec import MetricSpec, specs

ALPHA = 0.05
POWER = 0.8
REFERENCE = "Holm (1979); Benjamini & Hochberg (1995); statsmodels multipletests"

SPECS = specs(
    MetricSpec("tests_total", "Hypothesis tests run in the report", None, r"m", REFERENCE, range=(0, math.inf),
               unit="tests"),
    MetricSpec("tests_rejected_holm", "Tests rejected at α = 0.05 after Holm (family-wise, whole report)", None,
               r"\#\{i : p^{\mathrm{Holm}}_i \le \alpha\}", REFERENCE, range=(0, math.inf), unit="tests"),
    MetricSpec("tests_rejected_bh", "Tests rejected at α = 0.05 after Benjamini–Hochberg (FDR, whole report)",
               None, r"\#\{i : p^{\mathrm{BH}}_i \le \alpha\}", REFERENCE, range=(0, math.inf), unit="tests"),
)

TEST_COLUMNS = ("chapter", "name", "test", "statistic", "p_value", "n", "null", "family")


def collect_tests(records: dict[str, dict], order: list[str] | None = None) -> pd.DataFrame:
    """One row per recorded test (:data:`TEST_COLUMNS`), chapters in ``order`` (default: as given).

    ``records``: chapter name → its ``results/<chapter>.json`` document (``"tests"``: a list of records).
    """
    rows = []
    for chapter in order or list(records):
        for t in records.get(chapter, {}).get("tests", []):
            rows.append({"chapter": chapter, **{c: t.get(c) for c in TEST_COLUMNS if c != "chapter"}})
    frame = pd.DataFrame(rows, columns=list(TEST_COLUMNS))
    frame["p_value"] = pd.to_numeric(frame["p_value"], errors="coerce").astype(float)
    frame["statistic"] = pd.to_numeric(frame["statistic"], errors="coerce").astype(float)
    frame["family"] = frame["family"].fillna("").astype(str)
    return frame


def adjust_tests(tests: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """``tests`` with ``p_holm``, ``p_bh`` (adjusted over every test with a p-value) and ``rejected_holm``,
    ``rejected_bh`` (adjusted p ≤ ``alpha``); a missing p-value stays missing and is not counted."""
    out = tests.copy()
    rh, ph = adjust_pvalues(out["p_value"].to_numpy(float), "holm", alpha)
    rb, pb = adjust_pvalues(out["p_value"].to_numpy(float), "bh", alpha)
    out["p_holm"], out["p_bh"] = ph, pb
    out["rejected_holm"], out["rejected_bh"] = rh, rb
    return out


def rejection_counts(adjusted: pd.DataFrame) -> dict:
    """``tests_total`` (tests with a p-value), ``tests_rejected_holm``, ``tests_rejected_bh``."""
    ok = adjusted["p_value"].notna()
    return {"tests_total": int(ok.sum()), "tests_rejected_holm": int(adjusted["rejected_holm"][ok].sum()),
            "tests_rejected_bh": int(adjusted["rejected_bh"][ok].sum())}


def power_table(units: pd.DataFrame, effects, *, alpha: float = ALPHA, power: float = POWER) -> pd.DataFrame:
    """Per headline mean: ``n``, ``sd``, ``mde`` (at ``alpha``, ``power``), the effect that matters ``effect`` (E)
    with ``effect_rule`` (how it was set: ``effects``, an :class:`~.effects.Effects`, the ``--mde`` text or one
    absolute number; a relative E is a share of the metric's value), ``required_n``, the units needed to detect a
    shift of E (:func:`~embeval_report.stats.required_units`), and ``detects_effect`` (MDE ≤ E).

    ``units``: one row per metric with columns ``chapter``, ``metric``, ``label``, ``unit``, ``n``, ``sd``, ``mde``
    and ``value``.
    """
    from .effects import Effects

    effects = effects if isinstance(effects, Effects) else Effects.parse(effects)
    out = units.copy()
    eff = [effects.for_metric(c, m, None if v is None or pd.isna(v) else float(v))
           for c, m, v in zip(out["chapter"], out["metric"], out["value"])]
    out["effect"] = [e for e, _ in eff]
    out["effect_rule"] = [how for _, how in eff]
    out["required_n"] = [required_units(e, sd, alpha=alpha, power=power) if np.isfinite(sd) and n >= 2 else None
                         for e, sd, n in zip(out["effect"], out["sd"], out["n"])]
    out["detects_effect"] = [bool(np.isfinite(m) and m <= e) for m, e in zip(out["mde"], out["effect"])]
    return out


def unit_statistics(records: dict[str, dict]) -> pd.DataFrame:
    """One row per recorded ``mde_<metric>``: chapter, metric, label, unit, n, sd, mde and the metric's value,
    from what :meth:`~embeval_report.chapters.recorder.Recorder.units` noted (``info["units"]``) per chapter."""
    rows = []
    for chapter, doc in records.items():
        info, metrics = doc.get("info", {}).get("units"), doc.get("metrics", {})
        if not info:
            continue
        for name, st in info.get("stats", {}).items():
            mde = metrics.get(f"mde_{name}", {}).get("value")
            rows.append({"chapter": chapter, "metric": name, "label": metrics.get(name, {}).get("label", name),
                         "unit": info["unit"], "n": int(st["n"]), "sd": math.nan if st["sd"] is None else st["sd"],
                         "mde": math.nan if mde is None else mde, "value": metrics.get(name, {}).get("value")})
    return pd.DataFrame(rows, columns=["chapter", "metric", "label", "unit", "n", "sd", "mde", "value"])


__all__ = ["ALPHA", "POWER", "POWER_TEST", "SPECS", "TEST_COLUMNS", "adjust_tests", "collect_tests", "power_table",
           "rejection_counts", "unit_statistics"]
