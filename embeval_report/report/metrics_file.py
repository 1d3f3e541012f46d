"""``metrics.json``: every number of the report in one fixed schema, assembled from the chapters' records."""
from __future__ import annotations

import math
import re

from ..chapters.findings import read_findings
from ..chapters.recorder import read_results, read_units
from ..metrics.spec import METRIC_KEYS
from ..present.format import outside
from .render.references import citations

#: what ``metrics.json`` holds per metric besides :data:`~embeval_report.metrics.spec.METRIC_KEYS`: how the
#: interval was made, over how many units, whether it excludes the value (then the bias-corrected estimate is
#: the better guide), the sub-key of a metric recorded per snapshot, group or run (``mean_drift__2024_02``:
#: ``2024_02``), and the reference as citations resolvable outside the project
EXTRA_KEYS = ("ci_method", "n", "outside_ci", "bias_corrected", "slice", "citations")
#: "over the 400 queries", "over 1,200 entities": the count an interval's method names
_OVER = re.compile(r"\bover (?:the |all )?(\d[\d,]*) [a-z]")


def metric_entry(name: str, m: dict, counts: dict) -> dict:
    """One metric of ``metrics.json``: :data:`METRIC_KEYS` and :data:`EXTRA_KEYS` (``counts``: the number of units
    with a value per column of the chapter's unit table)."""
    entry = {f: m.get(f) for f in METRIC_KEYS}
    value, lo, hi = m.get("value"), m.get("ci_low"), m.get("ci_high")
    out = bool(outside(value, lo, hi)) if _finite(value) and _finite(lo) and _finite(hi) else None
    entry.update(ci_method=m.get("ci_method") or None, n=metric_n(name, m, counts), outside_ci=out,
                 bias_corrected=m.get("bias_corrected") if _finite(m.get("bias_corrected")) else None,
                 slice=name.split("__", 1)[1] if "__" in name else None,
                 citations=citations(m.get("reference") or ""))
    return entry


def metric_n(name: str, m: dict, counts: dict) -> int | None:
    """The units a metric is over: its column's count in the chapter's unit table (a mean over queries, test
    edges, entities or users, or that mean's ``mde_``), else the count its interval's method names ("over the 400
    queries"), else None."""
    for column in (name, name.removeprefix("mde_")):  # a mean's minimum detectable effect: over its units
        if column in counts:
            return counts[column]
    found = _OVER.search(m.get("ci_method") or "")
    return int(found.group(1).replace(",", "")) if found else None


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def unit_counts(results_dir, chapter: str, record: dict) -> dict:
    """Per mean column of a chapter's unit table, how many units have a value (empty without a table)."""
    info = (record.get("info") or {}).get("units")
    table = read_units(results_dir, chapter, info) if info else None
    if table is None:
        return {}
    return {c: int(table[c].notna().sum()) for c in info.get("means", []) if c in table.columns}


def metrics_document(results_dir, chapters: list[dict], *, version: str, source: str, seed: int,
                     device: str) -> dict:
    """``metrics.json`` in its fixed schema from the recorded results.

    ``chapters``: ``{"name", "status", "reason"}`` per chapter in report order; a skipped chapter
    contributes no metrics. ``status`` and ``findings`` come from the report's findings (worst first).
    """
    recorded = read_results(results_dir)
    out = {}
    for ch in chapters:
        record = recorded.get(ch["name"], {}) if ch["status"] != "skipped" else {}
        counts = unit_counts(results_dir, ch["name"], record) if record else {}
        out[ch["name"]] = dict(status=ch["status"], reason=ch.get("reason") or None,
                               metrics={k: metric_entry(k, m, counts) for k, m in record.get("metrics", {}).items()})
    found = read_findings(results_dir)
    scope = {k: found[k] for k in ("scope", "scope_text") if found.get(k)}  # "geometry only" when no task ran
    return dict(version=version, source=source, seed=seed, device=device, status=found["status"], **scope,
                findings=found["findings"], chapters=out)
