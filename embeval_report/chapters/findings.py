"""Findings: what a reader of the report acts on, derived from the numbers each chapter recorded.

A :class:`Finding` is one sentence a reader can act on, with a ``severity`` (``problematic`` | ``concerning`` |
``note`` | ``healthy``), a ``kind`` (:data:`KINDS`: what it is about), a ``category`` (``model`` | ``evaluation
data`` | ``training process`` | ``protocol``: who acts on it), the ``metrics`` of ``metrics.json`` it rests on,
its ``evidence`` (value, interval, the baseline or group it is compared with, the test and its report-wide
adjusted p) and the ``section`` it links to.

Three kinds, and only the first sets the report's status:

* ``model`` — the vectors fail or lose at something the user does with them (a task below a free baseline or the
  previous model, unstable neighbours, drift, the evaluated run diverged);
* ``diagnostic`` — their geometry (anisotropy, hubness, uniformity, collapse): ``concerning`` only when a remedy
  measurably improves a task of the report (:mod:`.remedies`), otherwise a ``note``;
* ``evaluation`` — the evaluation data or protocol (raters, negatives, splits, the user's own detector, a
  training run that is not the evaluated one): "fix the evaluation", not the model's status.

Each chapter's :class:`~.declaration.ChapterSpec` declares how its results become findings:

* ``effects`` — :class:`Effect` groups of related metrics with literature thresholds: the flagged metrics of
  one effect make one finding ("APCS problematic; 3 related metrics"), worded by the effect. Every flagged
  metric not in a declared effect is a finding of its own (:func:`threshold_findings`).
* ``findings`` — a function ``(ChapterResults) -> list[Finding]`` for what thresholds cannot say: losing to
  a free baseline, an event (a diverged run, performance falling with the horizon, an alert level), the worst
  group or kind, the quality of the evaluation data. It reads only what the chapter recorded, and the tests'
  report-wide adjusted p-values, never names of a particular data set.

The runner derives every chapter's findings once every test of the report has been adjusted
(:func:`embeval_report.report.findings.derive_findings`); the Summary, the cover, ``metrics.json`` and
``--fail-on`` read them.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..metrics.thresholds import SEVERITY, THRESHOLDS
from ..present.format import interval, number, p_value

#: severities, mildest first ("note": a diagnostic whose remedy changes no task measurably)
SEVERITIES = ("healthy", "note", "concerning", "problematic")
#: what a finding is about (see the module docstring); only ``model`` findings set the status
KINDS = ("model", "diagnostic", "evaluation")
#: the categories whose findings are about the evaluation, not the model
EVALUATION_CATEGORIES = ("evaluation data", "protocol")
#: the status of a report in which no content chapter ran (every one skipped or failed): never healthy, and no
#: ``--fail-on`` gate passes it
NOT_EVALUATED = "not evaluated"
#: every status a report can have: a severity, or :data:`NOT_EVALUATED`
STATUSES = ("healthy", "concerning", "problematic", NOT_EVALUATED)
#: categories, in the order the Summary groups them
CATEGORIES = ("model", "training process", "evaluation data", "protocol")
#: report-wide adjusted p at or below which a test counts (the level of the report's Holm adjustment)
ALPHA = 0.05


@dataclass(frozen=True)
class Effect:
    """Related metrics that measure one effect, and how a finding about it reads.

    ``title``: what is wrong, in a few words ("A few directions carry most of the variance"); ``titles``: a
    title that names what a particular leading metric shows instead ("apcs": "The vectors crowd into a narrow
    cone"); ``action``: what to do about it; ``category``: who fixes it. The first metric of ``metrics`` among
    the worst flagged leads the finding."""

    name: str
    metrics: tuple[str, ...]
    title: str
    action: str = ""
    category: str = "model"
    titles: tuple[tuple[str, str], ...] = ()   # (metric, title): the title when that metric leads the finding
    cause: str = ""   # the underlying cause several chapters' effects share (their findings merge into one)


@dataclass(frozen=True)
class Finding:
    """One thing a reader acts on (see the module docstring)."""

    severity: str
    category: str
    chapter: str
    title: str
    sentence: str
    metrics: tuple[str, ...] = ()
    evidence: dict = field(default_factory=dict)
    section: str = ""
    rule: str = "threshold"     # threshold | baseline | event | worst group | data quality | comparison | run
    effect: str = ""
    kind: str = ""              # KINDS; default: "evaluation" for the evaluation categories, else "model"
    cause: str = ""             # findings of one cause merge into one (default: "<chapter>: <effect>")

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"finding severity must be one of {SEVERITIES}, not {self.severity!r}")
        if self.category not in CATEGORIES:
            raise ValueError(f"finding category must be one of {CATEGORIES}, not {self.category!r}")
        if not self.kind:
            object.__setattr__(self, "kind", "evaluation" if self.category in EVALUATION_CATEGORIES else "model")
        if self.kind not in KINDS:
            raise ValueError(f"finding kind must be one of {KINDS}, not {self.kind!r}")
        object.__setattr__(self, "metrics", tuple(self.metrics))
        if not self.section:
            object.__setattr__(self, "section", f"chapter-{self.chapter}")
        if not self.effect:
            object.__setattr__(self, "effect", self.metrics[0] if self.metrics else self.title)
        if not self.cause:  # an effect of one chapter; causes that several chapters share are named explicitly
            object.__setattr__(self, "cause", f"{self.chapter}: {self.effect}")

    def to_json(self) -> dict:
        """The ``findings`` entry of ``metrics.json`` (every number finite or null)."""
        return {"severity": self.severity, "kind": self.kind, "category": self.category, "chapter": self.chapter,
                "title": self.title, "sentence": self.sentence, "metrics": list(self.metrics),
                "evidence": json_safe(self.evidence), "section": self.section, "rule": self.rule,
                "effect": self.effect, "cause": self.cause}

    @property
    def rank(self) -> tuple:
        """Sort key: model findings first, then diagnostics, then the evaluation's; within a kind worst first,
        then by category (the chapter order is applied by the caller)."""
        return (KINDS.index(self.kind), -SEVERITY[self.severity], CATEGORIES.index(self.category))


def json_safe(value):
    """``value`` with every non-finite float as ``None`` (valid JSON: never NaN or Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return json_safe(value.item())
    return value


@dataclass
class ChapterResults:
    """What one chapter recorded (``results/<chapter>.json``) and its tests with the report-wide adjusted p."""

    name: str
    title: str
    metrics: dict
    info: dict
    tests: list = field(default_factory=list)   # records with p_value and, once adjusted, p_holm / rejected_holm

    def metric(self, name: str) -> dict | None:
        return self.metrics.get(name)

    def value(self, name: str) -> float | None:
        m = self.metrics.get(name)
        v = None if m is None else m.get("value")
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    def test(self, name: str) -> dict | None:
        return next((t for t in self.tests if t.get("name") == name), None)

    def adjusted_p(self, name: str) -> float | None:
        """The report-wide Holm-adjusted p of a recorded test (its raw p when the report was not adjusted)."""
        t = self.test(name)
        if t is None:
            return None
        p = t.get("p_holm", t.get("p_value"))
        return float(p) if isinstance(p, (int, float)) and math.isfinite(p) else None

    def significant(self, name: str) -> bool:
        """Whether a recorded test rejects its null after the report-wide Holm adjustment."""
        p = self.adjusted_p(name)
        return p is not None and p <= ALPHA


def metric_evidence(m: dict, name: str) -> dict:
    """The evidence fields of one recorded metric."""
    return {"metric": name, "label": m.get("label") or name, "value": m.get("value"), "ci_low": m.get("ci_low"),
            "ci_high": m.get("ci_high"), "verdict": m.get("verdict"), "reference": m.get("reference"),
            "direction": m.get("direction")}


def value_text(m: dict, fmt: str | None = None) -> str:
    """``value (95 % CI lo–hi)`` of a recorded metric, for a finding's sentence."""
    v = m.get("value")
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return "undefined"
    if fmt is None:
        fmt = ".3g" if abs(v) >= 1000 or (v != 0 and abs(v) < 0.001) else ".3f"
    lo, hi = m.get("ci_low"), m.get("ci_high")
    ci = f" (95 % CI {interval(lo, hi, fmt)})" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) \
        and math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{format(v, fmt)}{ci}"


def test_text(t: dict | None) -> str:
    """``Mann–Whitney U, report-wide Holm p = 0.003`` (empty without a test)."""
    if t is None:
        return ""
    p = t.get("p_holm", t.get("p_value"))
    which = "report-wide Holm-adjusted p" if "p_holm" in t else "p"
    return f"{t.get('test', 'test')}, {which} {p_value(p)}"


def _band_text(name: str, m: dict) -> str:
    """The table a verdict came from: the part of the metric's reference after "verdict" (all of it otherwise)."""
    ref = m.get("reference") or ""
    return re.split(r";\s*verdict:?\s*", ref)[-1] if re.search(r";\s*verdict", ref) else ref


def threshold_findings(r: ChapterResults, effects: tuple[Effect, ...] = ()) -> list[Finding]:
    """One finding per effect with flagged metrics (concerning or problematic verdicts), one per flagged metric
    outside the declared effects; the worst metric of an effect (its first in declaration order among the
    worst) leads, and the related metrics are named."""
    flagged = {k: m for k, m in r.metrics.items() if m.get("verdict") in ("concerning", "problematic")}
    out, used = [], set()
    for e in effects:
        members = [k for k in flagged if k in e.metrics or k.split("__")[0] in e.metrics]
        if not members:
            continue
        used.update(members)
        worst = max(SEVERITY[flagged[k]["verdict"]] for k in members)
        lead = next(k for k in sorted(members, key=lambda k: _position(e, k)) if SEVERITY[flagged[k]["verdict"]] == worst)
        out.append(_threshold_finding(r, lead, members, dict(e.titles).get(lead, e.title), e.action, e.category,
                                      e.name, e.cause))
    for k in flagged:
        if k not in used:
            m = flagged[k]
            out.append(_threshold_finding(r, k, [k], f"{m.get('label') or k} is {m['verdict']}", "", "model", k))
    return out


def _position(e: Effect, name: str) -> int:
    base = name.split("__")[0]
    return e.metrics.index(name) if name in e.metrics else e.metrics.index(base)


def _threshold_finding(r: ChapterResults, lead: str, members: list[str], title: str, action: str, category: str,
                       effect: str, cause: str = "") -> Finding:
    m = r.metrics[lead]
    others = [k for k in members if k != lead]
    related = (f"; {len(others)} related metric{'s' if len(others) > 1 else ''} agree"
               f"{'s' if len(others) == 1 else ''} ({', '.join(r.metrics[k].get('label') or k for k in others)})"
               if others else "")
    sentence = (f"{action + ' ' if action else ''}{m.get('label') or lead} is {value_text(m)}: "
                f"{m['verdict']} by {_band_text(lead, m)}{related}.")
    return Finding(m["verdict"], category, r.name, title, sentence.strip(), metrics=(lead, *others),
                   evidence=metric_evidence(m, lead), rule="threshold", effect=effect, cause=cause)


#: the findings of a report, in its results folder (written by the runner once every test is adjusted)
FINDINGS_FILE = "findings.json"


def read_findings(results_dir) -> dict:
    """``{"status", "findings"}`` of a report's results folder (``{"status": None, "findings": []}`` before any)."""
    import json
    from pathlib import Path

    path = Path(results_dir) / FINDINGS_FILE
    if not path.exists():
        return {"status": None, "findings": []}
    return json.loads(path.read_text())


def worst(findings: list[Finding]) -> str:
    """The worst severity among ``findings`` (``healthy`` when there are none; a note counts as healthy)."""
    s = max((f.severity for f in findings), key=SEVERITY.get, default="healthy")
    return "healthy" if s == "note" else s


__all__ = ["ALPHA", "CATEGORIES", "ChapterResults", "Effect", "Finding", "KINDS", "NOT_EVALUATED", "SEVERITIES",
           "STATUSES",
           "THRESHOLDS",
           "json_safe", "metric_evidence", "number", "test_text", "threshold_findings", "value_text", "worst"]


def baseline_finding(r: ChapterResults, comparisons: list[dict], *, subject: str, action: str, plural: bool = True,
                     category: str = "model", effect: str = "baselines") -> Finding | None:
    """One finding on how the embeddings fare against free baselines, from the paired comparisons a chapter ran.

    Each comparison: ``baseline``, ``metric`` (its label), ``model`` and ``baseline_value``, the paired
    ``difference`` (model − baseline, higher better) with ``ci_low``/``ci_high``, and the recorded ``test``'s
    name (its report-wide adjusted p decides; without a test, the interval alone). *Loses* (problematic): the
    difference is below 0 and the test rejects; *beats*: above 0 and rejects; otherwise *does not beat*
    (concerning). ``None`` when the embeddings beat every baseline."""
    verdicts = []
    for c in comparisons:
        test = c.get("test")
        rejects = r.significant(test) if test and r.test(test) is not None else True
        lo, hi = c.get("ci_low"), c.get("ci_high")
        if hi is not None and hi < 0 and rejects:
            verdicts.append(("problematic", "lose to" if plural else "loses to", c))
        elif not (lo is not None and lo > 0 and rejects):
            verdicts.append(("concerning", "do not beat" if plural else "does not beat", c))
    if not verdicts:
        return None
    severity = max((v[0] for v in verdicts), key=SEVERITY.get)
    parts = []
    for _, how, c in verdicts:
        t = r.test(c["test"]) if c.get("test") else None
        parts.append(f"{how} {c['baseline']} ({c['metric']} {number(c['model'], 3)} vs {number(c['baseline_value'], 3)}; "
                     f"difference {number(c['difference'], 3)}, 95 % CI {interval(c.get('ci_low'), c.get('ci_high'), '.3f')}"
                     + (f"; {test_text(t)}" if t else "") + ")")
    worst_c, how = next((c, h) for s, h, c in verdicts if s == severity)
    title = f"{subject[:1].upper() + subject[1:]} {how} {worst_c['baseline']}"
    sentence = f"{action} {subject} " + "; ".join(parts) + "."
    evidence = {"value": worst_c["model"], "ci_low": None, "ci_high": None, "baseline": worst_c["baseline"],
                "baseline_value": worst_c["baseline_value"], "difference": worst_c["difference"],
                "difference_ci": [worst_c.get("ci_low"), worst_c.get("ci_high")],
                "test": worst_c.get("test"), "p_adjusted": r.adjusted_p(worst_c["test"]) if worst_c.get("test") else None}
    return Finding(severity, category, r.name, title, sentence, metrics=tuple(c.get("metric_name", "") for _, _, c in
                                                                               verdicts if c.get("metric_name")),
                   evidence=evidence, rule="baseline", effect=effect)
