"""Recorded numbers: what a chapter writes (``results/<chapter>.json``), and how they are read back.

Every number a chapter shows is recorded, so ``metrics.json`` holds exactly what the report
says. A chapter's records go to ``results/<chapter>.json`` as soon as they are added, so a
chapter that fails half-way still keeps what it computed.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..metrics.spec import Metric


def json_safe(obj):
    """``obj`` with every non-finite float (NaN, ±inf, numpy's too) as ``None`` and numpy scalars and arrays as
    Python numbers and lists, so that it serialises as strict JSON (RFC 8259 has no NaN)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is pd.NaT or obj is pd.NA:
        return None
    return obj


def json_text(obj, **kw) -> str:
    """Strict JSON of ``obj`` (:func:`json_safe`; other objects, e.g. timestamps, as their text): what every JSON
    file of a report is written with (``results/*.json``, ``run.json``, ``metrics.json``, ``comparison.json``)."""
    return json.dumps(json_safe(obj), allow_nan=False, default=str, **kw)


@dataclass
class Recorder:
    """Collects a chapter's metrics and notes and writes them to ``results_dir/<chapter>.json``."""

    chapter: str
    results_dir: str | os.PathLike | None = None
    metrics: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    tests: dict = field(default_factory=dict)

    def add(self, *metrics: Metric) -> None:
        """Record metrics (a later record of the same name replaces the earlier one)."""
        for m in metrics:
            self.metrics[m.name] = m.to_record()
        self.save()

    def test(self, *tests) -> None:
        """Record hypothesis tests (:class:`~embeval_report.stats.HypothesisTest`; a later record of the same
        name replaces the earlier one). The rigor chapter adjusts every recorded p-value of the report."""
        for t in tests:
            self.tests[t.name] = t.to_record()
        self.save()

    def scored(self, scorer, table, plan=None) -> None:
        """Record a task scorer's unit table (:class:`~embeval_report.metrics.scoring.TaskScorer`): every column it
        declares, its mean aggregates as :meth:`units` records means, the names of its whole-table aggregates
        (paired by a bootstrap over units) and the fingerprint of the plan it was scored on."""
        from ..metrics.scoring import plan_fingerprint

        self.units(table, key=scorer.key, unit=scorer.unit, means=[a.metric for a in scorer.aggregates if a.is_mean],
                   aggregates=[a.metric for a in scorer.aggregates if not a.is_mean], columns=scorer.columns,
                   plan=None if plan is None else plan_fingerprint(plan))

    def units(self, frame, *, key: str, unit: str, means, labels: dict | None = None, aggregates=(), columns=(),
              plan: str | None = None) -> None:
        """Record per-unit values (one row per query, test edge, entity, ...; ``key`` the unit id column) to
        ``results/units/<chapter>.csv`` for the rigor chapter and ``embeval-report compare`` (which pairs
        two models' units by id), and record ``mde_<metric>`` for each column in ``means`` whose recorded
        metric is the mean of that column: the minimum detectable effect at α = 0.05 and power 0.8
        (:func:`~embeval_report.stats.minimum_detectable_effect`, a one-sample/paired t-test)."""
        import warnings

        import numpy as np

        from ..errors import UndefinedMetricWarning
        from ..metrics.spec import Metric
        from ..stats import POWER_TEST, minimum_detectable_effect

        columns = [key, *means, *[c for c in columns if c not in means and c != key]]
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ValueError(f"units of {self.chapter}: no column(s) {', '.join(missing)}")
        stats = {}
        for name in means:
            x = np.asarray(frame[name], float)
            x = x[np.isfinite(x)]
            sd = float(x.std(ddof=1)) if len(x) > 1 else float("nan")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UndefinedMetricWarning)
                mde = minimum_detectable_effect(sd, len(x)) if np.isfinite(sd) else float("nan")
            stats[name] = {"n": len(x), "sd": sd if np.isfinite(sd) else None}
            label = (labels or {}).get(name) or self.metrics.get(name, {}).get("label") or name
            direction = self.metrics.get(name, {}).get("direction", "higher")
            self.add(Metric(name=f"mde_{name}", value=mde, direction="lower", reference=POWER_TEST,
                            label=f"smallest detectable change of {label}",
                            formula=r"d_{0.05,\,0.8}(n)\cdot s", ci_method="",
                            note=f"n = {len(x):,} {unit}, sd = {sd:.4g}; {direction} is better for the metric"))
        if self.results_dir is not None:
            folder = Path(self.results_dir) / "units"
            folder.mkdir(parents=True, exist_ok=True)
            frame[columns].to_csv(folder / f"{self.chapter}.csv", index=False)
        self.note(units=dict(key=key, unit=unit, means=list(means), stats=stats,
                             **({"aggregates": list(aggregates)} if aggregates else {}),
                             **({"plan": plan} if plan else {})))

    def note(self, **info) -> None:
        """Record JSON-serialisable context (parameters used, sample sizes, ...)."""
        self.info.update(info)
        self.save()

    def append(self, key: str, item) -> None:
        """Append ``item`` to the list ``info[key]`` (warnings, tests, ...)."""
        self.info.setdefault(key, []).append(item)
        self.save()

    def save(self) -> None:
        if self.results_dir is None:
            return
        path = Path(self.results_dir) / f"{self.chapter}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json_text({"chapter": self.chapter, "metrics": self.metrics, "info": self.info,
                                  "tests": list(self.tests.values())}, indent=2))
        tmp.replace(path)


#: the report-wide adjusted tests of a run, in its results folder (written after every content chapter)
TESTS_FILE = "rigor_tests.csv"


def read_adjusted(results_dir) -> pd.DataFrame | None:
    """The adjusted tests written by :func:`adjust_report` (``None`` when the run has not written them)."""
    path = Path(results_dir) / TESTS_FILE
    if not path.exists():
        return None
    frame = pd.read_csv(path, dtype={"n": str, "null": str, "family": str, "name": str, "test": str},
                        keep_default_na=False, na_values={"p_value": [""], "statistic": [""], "p_holm": [""],
                                                          "p_bh": [""]})
    for c in ("rejected_holm", "rejected_bh"):
        frame[c] = frame[c].astype(str).str.lower().eq("true")
    return frame


#: the comparison with the previous model's report (``--baseline``), in the results folder
BASELINE_FILE = "baseline.json"


def read_baseline(results_dir) -> dict | None:
    """The comparison with the previous model (:mod:`embeval_report.report.baseline`), or None without one."""
    path = Path(results_dir) / BASELINE_FILE
    return json.loads(path.read_text()) if path.exists() else None


def read_units(results_dir, chapter: str, info: dict | None = None) -> pd.DataFrame | None:
    """A chapter's per-unit table (``results/units/<chapter>.csv``, as :meth:`Recorder.units` wrote it; ``info``:
    its record's ``info["units"]``, read from ``results/<chapter>.json`` when ``None``), the unit ids as text;
    ``None`` when the chapter recorded no units."""
    if info is None:
        info = read_results(results_dir).get(chapter, {}).get("info", {}).get("units")
    path = Path(results_dir) / "units" / f"{chapter}.csv"
    if not info or not path.exists():
        return None
    key = info["key"]
    columns = pd.read_csv(path, nrows=0).columns
    return pd.read_csv(path, dtype={key: str}, keep_default_na=False,
                       na_values={c: ["", "nan", "NaN"] for c in columns if c != key})


def read_results(results_dir) -> dict[str, dict]:
    """All chapter records in ``results_dir`` keyed by chapter name (the report-level files beside them, the
    findings and the baseline comparison, are not chapter records)."""
    out = {}
    for p in sorted(Path(results_dir).glob("*.json")):
        doc = json.loads(p.read_text())
        if isinstance(doc, dict) and "chapter" in doc:
            out[p.stem] = doc
    return out
