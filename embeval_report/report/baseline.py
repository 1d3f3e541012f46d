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
from ..safe_files import portable_path
from .pairing import ModelReport, compare_reports, is_report_folder



def check_baseline(path) -> Path:
    """``path`` when it is an earlier report folder, else one line (exit 2) before anything runs."""
    folder = Path(path)
    if not folder.is_dir() or not is_report_folder(folder):
        raise InputError(f"--baseline {path}: not an embeval-report folder (expected an earlier report's folder with "
                         "results/ and the run.json embeval-report wrote)")
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
        "interval": r.interval, "effect": r.effect, "p_adjusted": r.p_adjusted, "verdict": r.verdict,
        **_recorded(this, r.chapter, r.metric)}) for r in table.itertuples()]
    values = []
    for chapter, doc in this.records.items():
        before = previous.records.get(chapter, {}).get("metrics", {})
        for name, m in doc.get("metrics", {}).items():
            if name in before and _finite(m.get("value")) and _finite(before[name].get("value")):
                values.append({"chapter": chapter, "metric": name, "label": m.get("label") or name,
                               "previous": before[name]["value"], "value": m["value"],
                               "change": m["value"] - before[name]["value"], "verdict": m.get("verdict"),
                               "previous_verdict": before[name].get("verdict")})
    doc = {"folder": portable_path(baseline, staging), "name": previous.name, "generated": previous.run.get("generated"),
           "comparisons": rows, "values": json_safe(values)}
    (staging / "results" / BASELINE_FILE).write_text(json.dumps(doc, indent=2, allow_nan=False))
    return doc


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _recorded(report: ModelReport, chapter: str, metric: str) -> dict:
    """This report's own value of a metric with its own interval (``this_value``, ``this_ci_low``, ``this_ci_high``:
    what the cover shows beside the change)."""
    m = report.records.get(chapter, {}).get("metrics", {}).get(metric, {})
    return {f"this_{k}": m.get(k) for k in ("value", "ci_low", "ci_high")}


def _size(c: dict) -> float:
    """How far a regression goes, in units of its effect that matters."""
    return abs(c["difference"]) / c["effect"] if _finite(c.get("effect")) and c["effect"] > 0 else abs(c["difference"])


def _change(c: dict) -> str:
    """``Precision@1 −0.06 [−0.106, −0.014]``: a regression's change with the interval its verdict used."""
    return f"{c['label']} {_signed(c['difference'])} [{_signed(c['ci_low'])}, {_signed(c['ci_high'])}]"


def _signed(x) -> str:
    return format(x, "+.3g").replace("-", "−") if _finite(x) else "—"


def _task_metric(spec, metric: str) -> bool:
    """Whether a compared metric measures the task (a regression is the model's) rather than the geometry (a
    silhouette, a diagnostic chapter's number: shown in the comparison, never a model finding)."""
    if spec is None or spec.kind == "diagnostic":
        return spec is None
    aggregates = {a.metric: a for a in (spec.scorer.aggregates if spec.scorer else ())}
    return aggregates[metric].task if metric in aggregates else True


def regression_findings(doc: dict | None) -> list[Finding]:
    """One problematic finding per chapter (task) in which task metrics are significantly worse than in the previous
    model (verdict "A better" after the correction) by at least the effect that matters (``--mde``): how many of
    the chapter's compared metrics regressed, the worst (largest in units of its effect) with its change and
    interval, and the others' changes."""
    from ..chapters.registry import discover

    specs = {c.name: c for c in discover()}
    titles = {name: c.title for name, c in specs.items()}
    compared: dict = {}
    for c in (doc or {}).get("comparisons", []):
        if _task_metric(specs.get(c["chapter"]), c["metric"]):
            compared.setdefault(c["chapter"], []).append(c)
    out = []
    for chapter, rows in compared.items():
        worse = sorted((c for c in rows if c["verdict"] == "A better" and _finite(c["difference"])
                        and abs(c["difference"]) >= (c["effect"] or 0)), key=_size, reverse=True)
        if not worse:
            continue
        w, title, name = worse[0], titles.get(chapter, chapter), doc["name"]
        others = "; also " + ", ".join(_change(c) for c in worse[1:5]) + (
            f" and {len(worse) - 5} more" if len(worse) > 5 else "") if len(worse) > 1 else ""
        out.append(Finding(
            "problematic", "model", chapter, f"{title} regressed on {len(worse)} of {len(rows)} metrics since {name}",
            f"Do not ship this model over {name} for {title.lower()}: {len(worse)} of the {len(rows)} metrics "
            f"compared on the same {w['unit']} are significantly worse, beyond the effect that matters. Worst, "
            f"{w['label']}: {w['previous']:.4g} → {w['value']:.4g} (change {_signed(w['difference'])}, "
            f"{w['interval']} 95 % interval {_signed(w['ci_low'])} to {_signed(w['ci_high'])}, effect that matters "
            f"±{w['effect']:.3g}; paired over {w['n']:,} {w['unit']}, Holm-adjusted p {w['p_adjusted']:.2g})"
            f"{others}.",
            metrics=tuple(c["metric"] for c in worse),
            evidence={"metric": w["metric"], "label": w["label"],
                      **({"value": w["this_value"], "ci_low": w.get("this_ci_low"), "ci_high": w.get("this_ci_high")}
                         if _finite(w.get("this_value")) else {"value": w["value"], "ci_low": None, "ci_high": None}),
                      "previous": w["previous"],
                      "difference": w["difference"], "difference_ci": [w["ci_low"], w["ci_high"]],
                      "effect": w["effect"], "p_adjusted": w["p_adjusted"], "baseline": name,
                      "regressed": len(worse), "compared": len(rows)},
            rule="comparison", effect=f"regression {chapter}"))
    return out
