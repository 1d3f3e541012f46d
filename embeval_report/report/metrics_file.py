"""``metrics.json``: every number of the report in one fixed schema, assembled from the chapters' records."""
from __future__ import annotations

from ..chapters.findings import read_findings
from ..chapters.recorder import read_results
from ..metrics.spec import METRIC_KEYS


def metrics_document(results_dir, chapters: list[dict], *, version: str, source: str, seed: int,
                     device: str) -> dict:
    """``metrics.json`` in its fixed schema from the recorded results.

    ``chapters``: ``{"name", "status", "reason"}`` per chapter in report order; a skipped chapter
    contributes no metrics. ``status`` and ``findings`` come from the report's findings (worst first).
    """
    recorded = read_results(results_dir)
    out = {}
    for ch in chapters:
        metrics = recorded.get(ch["name"], {}).get("metrics", {}) if ch["status"] != "skipped" else {}
        out[ch["name"]] = dict(status=ch["status"], reason=ch.get("reason") or None,
                               metrics={k: {f: m.get(f) for f in METRIC_KEYS} for k, m in metrics.items()})
    found = read_findings(results_dir)
    return dict(version=version, source=source, seed=seed, device=device, status=found["status"],
                **{k: found[k] for k in ("scope", "scope_text") if k in found},
                findings=found["findings"], chapters=out)
