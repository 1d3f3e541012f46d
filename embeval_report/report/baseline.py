"""The previous model beside this one: ``--baseline DIR``, an earlier report of the previous model on the same inputs.

Once every chapter of this report has run, the metrics both reports recorded per unit (queries, test edges,
entities, users) are paired on the units both share and compared as ``embeval-report compare`` compares two
models (:func:`embeval_report.report.pairing.compare_reports`: paired differences, Holm over every metric,
verdicts against each metric's effect that matters, ``--mde``), the previous model as A and this one as B. The
comparison and every other metric's previous value go to ``results/baseline.json``; the Summary shows them, and
a significant regression larger than the metric's effect is a finding (:func:`regression_findings`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..chapters.findings import Finding, json_safe
from ..chapters.recorder import BASELINE_FILE
from ..errors import InputError
from .pairing import ModelReport, compare_reports, is_report_folder



def check_baseline(path) -> Path:
    """``path`` when it is an earlier report folder, else one line (exit 2) before anything runs."""
    folder = Path(path)
    if not folder.is_dir() or not is_report_folder(folder):
        raise InputError(f"--baseline {path}: not an embeval-report folder (expected an earlier report's folder with "
                         "run.json and results/)")
    return folder.resolve()


def compare_with_baseline(staging: Path, baseline: Path, *, mde, level: float, seed: int) -> dict:
    """Compare this report (``staging``, once its chapters ran) with the ``baseline`` report; write and return
    :data:`BASELINE_FILE`."""
    previous = ModelReport.open(baseline)
    this = ModelReport.open(staging, name="this model" if previous.name != "this model" else "this report")
    table, _ = compare_reports([previous, this], effects=mde, level=level, seed=seed)
    rows = [] if not len(table) else [json_safe({
        "chapter": r.chapter, "metric": r.metric, "label": r.label, "direction": r.direction, "unit": r.unit, "n": r.n,
        "previous": r.mean_a, "value": r.mean_b, "difference": r.diff, "ci_low": r.sim_low, "ci_high": r.sim_high,
        "interval": r.interval, "effect": r.effect, "p_adjusted": r.p_adjusted, "verdict": r.verdict})
        for r in table.itertuples()]
    values = []
    for chapter, doc in this.records.items():
        before = previous.records.get(chapter, {}).get("metrics", {})
        for name, m in doc.get("metrics", {}).items():
            if name in before and _finite(m.get("value")) and _finite(before[name].get("value")):
                values.append({"chapter": chapter, "metric": name, "label": m.get("label") or name,
                               "previous": before[name]["value"], "value": m["value"],
                               "change": m["value"] - before[name]["value"], "verdict": m.get("verdict"),
                               "previous_verdict": before[name].get("verdict")})
    doc = {"folder": str(baseline), "name": previous.name, "generated": previous.run.get("generated"),
           "comparisons": rows, "values": json_safe(values)}
    (staging / "results" / BASELINE_FILE).write_text(json.dumps(doc, indent=2, allow_nan=False))
    return doc


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def regression_findings(doc: dict | None) -> list[Finding]:
    """A metric significantly worse than in the previous model (verdict "A better" after the correction) by at
    least the effect that matters (``--mde``) is a problematic finding of its chapter."""
    out = []
    for c in (doc or {}).get("comparisons", []):
        if c["verdict"] != "A better" or not _finite(c["difference"]) or abs(c["difference"]) < (c["effect"] or 0):
            continue
        out.append(Finding(
            "problematic", "model", c["chapter"], f"{c['label']} regressed since {doc['name']}",
            f"Do not ship this model over {doc['name']} for this use: {c['label']} moved from {c['previous']:.4g} to "
            f"{c['value']:.4g} (change {c['difference']:+.4g}, {c['interval']} 95 % interval "
            f"{c['ci_low']:+.4g} to {c['ci_high']:+.4g}, beyond the effect that matters, ±{c['effect']:.3g}; paired "
            f"over {c['n']:,} {c['unit']}, Holm-adjusted p {c['p_adjusted']:.2g}).",
            metrics=(c["metric"],), evidence={"value": c["value"], "previous": c["previous"],
                                              "difference": c["difference"], "ci_low": c["ci_low"],
                                              "ci_high": c["ci_high"], "effect": c["effect"],
                                              "p_adjusted": c["p_adjusted"], "baseline": doc["name"]},
            rule="comparison", effect=f"regression {c['chapter']}.{c['metric']}"))
    return out
