"""Recorded numbers: the :class:`Metric` record and the :class:`Recorder` notebooks call.

Every number a chapter shows is recorded, so ``metrics.json`` holds exactly what the
report says. A chapter's records go to ``results/<chapter>.json`` as soon as they are
added, so a chapter that fails half-way still keeps what it computed.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: the keys each metric has in metrics.json (a contract read by other tools)
METRIC_KEYS = ("value", "ci_low", "ci_high", "verdict", "direction", "reference")


def _clean(x):
    """JSON-safe number: python float/int, ``None`` for NaN/inf."""
    if x is None:
        return None
    if isinstance(x, (bool,)):
        return x
    x = float(x) if not isinstance(x, int) else x
    return None if isinstance(x, float) and not math.isfinite(x) else x


def format_with_ci(value, lo, hi, fmt: str, what: str = "95 % CI") -> str:
    """``value (95 % CI lo–hi)`` formatted with ``fmt``; just the value when the interval is missing or not finite."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return format(value, fmt)
    return f"{format(value, fmt)} ({what} {format(lo, fmt)}–{format(hi, fmt)})"


@dataclass(frozen=True)
class Metric:
    """One reported number with its uncertainty, verdict and provenance.

    ``direction`` is ``"higher"`` or ``"lower"`` (which way is better); ``reference`` names the
    formula's source or the threshold table the verdict came from; ``label`` and ``formula``
    (LaTeX) are shown next to the number in the report; ``ci_method`` says how the interval
    was obtained.
    """

    name: str
    value: float | None
    direction: str
    reference: str
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None
    label: str = ""
    formula: str = ""
    ci_method: str = ""

    def __post_init__(self):
        if self.direction not in ("higher", "lower"):
            raise ValueError(f"metric {self.name}: direction must be 'higher' or 'lower'")
        if self.verdict not in (None, "healthy", "concerning", "problematic"):
            raise ValueError(f"metric {self.name}: unknown verdict {self.verdict!r}")

    def text(self, fmt: str, what: str = "95 % CI") -> str:
        """``value (95 % CI lo–hi)`` for narrative (see :func:`format_with_ci`)."""
        return format_with_ci(self.value, self.ci_low, self.ci_high, fmt, what)

    def to_json(self) -> dict:
        """The metrics.json entry (exactly :data:`METRIC_KEYS`)."""
        d = {k: getattr(self, k) for k in METRIC_KEYS}
        for k in ("value", "ci_low", "ci_high"):
            d[k] = _clean(d[k])
        return d

    def to_record(self) -> dict:
        """The full record kept in ``results/<chapter>.json``."""
        d = asdict(self)
        for k in ("value", "ci_low", "ci_high"):
            d[k] = _clean(d[k])
        return d


@dataclass
class Recorder:
    """Collects a chapter's metrics and notes and writes them to ``results_dir/<chapter>.json``."""

    chapter: str
    results_dir: str | os.PathLike | None = None
    metrics: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def add(self, *metrics: Metric) -> None:
        """Record metrics (a later record of the same name replaces the earlier one)."""
        for m in metrics:
            self.metrics[m.name] = m.to_record()
        self.save()

    def note(self, **info) -> None:
        """Record JSON-serialisable context (parameters used, sample sizes, ...)."""
        self.info.update(info)
        self.save()

    def save(self) -> None:
        if self.results_dir is None:
            return
        path = Path(self.results_dir) / f"{self.chapter}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"chapter": self.chapter, "metrics": self.metrics, "info": self.info},
                                  indent=2, default=str))
        tmp.replace(path)


def read_results(results_dir) -> dict[str, dict]:
    """All chapter records in ``results_dir`` keyed by chapter name."""
    out = {}
    for p in sorted(Path(results_dir).glob("*.json")):
        out[p.stem] = json.loads(p.read_text())
    return out


def _num(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "∞" if x is not None and x > 0 else "—"
    if isinstance(x, int) or float(x).is_integer() and abs(x) >= 1:
        return f"{int(x):,}"
    return f"{x:.{digits}g}"


def metrics_table(metrics: dict[str, "Metric"]):
    """The table a chapter shows for its metrics: value, CI, verdict, direction, reference."""
    import pandas as pd

    rows = [{"metric": m.label or m.name, "name": m.name, "value": _num(m.value),
             "95 % CI": "—" if m.ci_low is None else f"{_num(m.ci_low)} – {_num(m.ci_high)}",
             "better": m.direction, "verdict": m.verdict, "reference": m.reference} for m in metrics.values()]
    return pd.DataFrame(rows)


def definitions_markdown(metrics: dict[str, "Metric"]) -> str:
    """A bullet list giving each metric's formula, direction and reference."""
    lines = [f"- **{m.label or m.name}** (`{m.name}`): ${m.formula}$ — {m.direction} is better; {m.reference}."
             for m in metrics.values() if m.formula]
    return "\n".join(lines)
