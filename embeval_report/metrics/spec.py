r"""One declaration per metric, and the record every reported number becomes.

A :class:`MetricSpec` knows everything about a metric that does not depend on the data: its
name in ``metrics.json``, label, direction, LaTeX formula, reference, value range, verdict
bands (from :mod:`.thresholds`, with the table they come from), its expected value under chance
where one is defined, and its unit. :meth:`MetricSpec.record` turns a computed value (and
interval) into a :class:`Metric`, the record the chapters show and ``metrics.json`` holds. The
definitions text, the verdicts, the scorecard and every caption that names a threshold read the
spec, so nothing about a metric is written twice (after PyKEEN's metric classes and ranx's
one-module-per-metric layout, kept small).

Adding a metric: one spec in its concern's ``SPECS``, one function that computes it, one test.

>>> from embeval_report.metrics.thresholds import THRESHOLDS
>>> apcs = MetricSpec("apcs", "Mean pairwise cosine", "lower", r"\mathbb{E}[\cos]", "seed 000",
...                   range=(-1, 1), bands=THRESHOLDS["apcs"])
>>> m = apcs.record(0.42, (0.40, 0.44), ci_method="bootstrap")
>>> m.verdict, m.to_json()["ci_high"]
('problematic', 0.44)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .thresholds import VERDICTS, Bands

#: the keys each metric has in metrics.json (a contract read by other tools)
METRIC_KEYS = ("value", "ci_low", "ci_high", "verdict", "direction", "reference")
#: fewest independent values (runs, folds, final checks) an interval over them is computed from: an interval from
#: 3 or fewer says nothing (a t interval from 3 runs spans several times their range)
MIN_INTERVAL_N = 4

#: the note of a metric whose bands assume more vectors than dimensions, on a set with n <= d
NOT_ESTIMABLE = "not estimable: n ≤ d"

#: which way is better; ``None`` for a count that describes the input or the protocol (tests run, entities
#: matched), where neither way is better
DIRECTIONS = ("higher", "lower", None)


def json_number(x):
    """JSON-safe number: python float/int, ``None`` for NaN/inf."""
    if x is None or isinstance(x, bool):
        return x
    x = float(x) if not isinstance(x, int) else x
    return None if isinstance(x, float) and not math.isfinite(x) else x


@dataclass(frozen=True)
class Metric:
    """One reported number with its uncertainty, verdict and provenance.

    ``direction`` is ``"higher"`` or ``"lower"`` (which way is better), or ``None`` for a count with no better
    way (:data:`DIRECTIONS`); ``reference`` names the
    formula's source or the threshold table the verdict came from; ``label`` and ``formula``
    (LaTeX) are shown next to the number; ``ci_method`` says how the interval was obtained.
    ``bias_corrected`` is the bootstrap bias-corrected estimate shown beside the plug-in value
    when the interval is a basic (bias-correcting) one; ``note`` says why the value or its
    interval is missing, when it is.
    """

    name: str
    value: float | None
    direction: str | None
    reference: str
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None
    label: str = ""
    formula: str = ""
    ci_method: str = ""
    bias_corrected: float | None = None
    note: str = ""

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name}: direction must be 'higher', 'lower' or None (a count)")
        if self.verdict not in (None, *VERDICTS):
            raise ValueError(f"metric {self.name}: unknown verdict {self.verdict!r}")

    @property
    def has_ci(self) -> bool:
        return (self.ci_low is not None and self.ci_high is not None
                and math.isfinite(self.ci_low) and math.isfinite(self.ci_high))

    def to_json(self) -> dict:
        """The metrics.json entry (exactly :data:`METRIC_KEYS`)."""
        d = {k: getattr(self, k) for k in METRIC_KEYS}
        for k in ("value", "ci_low", "ci_high"):
            d[k] = json_number(d[k])
        return d

    def to_record(self) -> dict:
        """The full record kept in ``results/<chapter>.json``."""
        d = asdict(self)
        for k in ("value", "ci_low", "ci_high", "bias_corrected"):
            d[k] = json_number(d[k])
        return d


@dataclass(frozen=True)
class MetricSpec:
    """Everything about a metric that does not depend on the data.

    ``range`` clips interval ends; ``bands`` (from :mod:`.thresholds`) give the verdict, applied
    to ``value / d`` when ``per_d`` (bands stated as a fraction of the dimension); ``chance`` is the
    expected value under random ranking or random vectors where defined; ``unit`` is shown
    after the value ("", "fraction of d", "dimensions", ...). ``full_rank``: the bands assume a sample
    covariance of full rank, n > d (a condition number, shares of d); on a set with n ≤ d the value is
    still recorded but carries no verdict, its note says :data:`NOT_ESTIMABLE`.
    """

    name: str
    label: str
    direction: str | None
    formula: str = ""
    reference: str = ""
    range: tuple[float, float] = (-math.inf, math.inf)
    bands: Bands | None = None
    per_d: bool = False
    chance: float | None = None
    unit: str = ""
    full_rank: bool = False

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric spec {self.name}: direction must be 'higher', 'lower' or None (a count)")

    def verdict(self, value: float | None, d: int | None = None) -> str | None:
        """The verdict for ``value`` (``None`` without bands or value)."""
        if self.bands is None or value is None:
            return None
        if self.per_d:
            if not d:
                raise ValueError(f"metric {self.name}: its bands are per dimension; pass d")
            value = value / d
        return self.bands.verdict(value)

    def clip(self, lo: float | None, hi: float | None) -> tuple[float | None, float | None]:
        """Interval ends clipped to the metric's range (``None`` stays ``None``)."""
        a, b = self.range
        return (None if lo is None else min(max(lo, a), b), None if hi is None else min(max(hi, a), b))

    def estimable(self, n: int | None, d: int | None) -> bool:
        """Whether the bands apply to a set of ``n`` vectors in ``d`` dimensions (``full_rank`` specs: n > d)."""
        return not (self.full_rank and n is not None and d is not None and n <= d)

    def record(self, value, ci=None, *, ci_method: str = "", d: int | None = None, name: str | None = None,
               label: str | None = None, reference: str | None = None, verdict: bool = True,
               bias_corrected: float | None = None, note: str = "", n: int | None = None) -> Metric:
        """The :class:`Metric` for a computed ``value`` with interval ``ci = (low, high)``.

        ``name``/``label``/``reference`` override the spec's for a variant of the metric (a
        per-snapshot copy, a suffixed setting); ``verdict=False`` records no verdict (a what-if
        number that the bands do not judge). ``n`` (with ``d``): the set's size; a ``full_rank``
        spec on n ≤ d gets no verdict and :data:`NOT_ESTIMABLE` in its note.
        """
        if self.bands is not None and verdict and not self.estimable(n, d):
            verdict = False
            note = f"{NOT_ESTIMABLE} (n = {n:,}, d = {d:,}): the sample covariance has rank below d, so the " \
                   "threshold does not apply" + (f"; {note}" if note else "")
        elif self.bands is not None and verdict and self.bands.applies(n, d):
            verdict = False
            note = "no verdict: " + self.bands.applies(n, d) + (f"; {note}" if note else "")
        elif self.bands is not None and verdict and isinstance(value, float) and not math.isfinite(value):
            verdict = False  # an undefined value is reported by its cause, never judged
            note = note or "undefined (not finite), so no verdict"
        lo, hi = (None, None) if ci is None else ci
        lo, hi = _finite_or_none(lo), _finite_or_none(hi)
        return Metric(name=name or self.name, value=value, direction=self.direction,
                      reference=self.reference if reference is None else reference, ci_low=lo, ci_high=hi,
                      verdict=self.verdict(value, d) if verdict else None, label=label or self.label,
                      formula=self.formula, ci_method=ci_method if lo is not None else "",
                      bias_corrected=bias_corrected, note=note)


def _finite_or_none(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Specs:
    """The specs of one concern, by name (iteration keeps declaration order)."""

    items: tuple[MetricSpec, ...]
    _by_name: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        by_name = {s.name: s for s in self.items}
        if len(by_name) != len(self.items):
            raise ValueError("duplicate metric names in one Specs")
        object.__setattr__(self, "_by_name", by_name)

    def __getitem__(self, name: str) -> MetricSpec:
        return self._by_name[name]

    def __contains__(self, name) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self.items)

    def values(self):
        return self.items


def specs(*items: MetricSpec) -> Specs:
    """Declare the metrics of one concern (see the module docstring)."""
    return Specs(tuple(items))


def record_metrics(all_specs, values: dict, cis: dict, tag: str, settings: dict | None = None) -> dict:
    """``name -> Metric`` for every spec with a value, its interval ``cis[name] = (low, high, method)``
    and its label followed by ``[tag]`` (or by ``[settings[name]]`` where given)."""
    settings = settings or {}
    metrics = {}
    for spec in all_specs.values():
        if spec.name in values:
            lo, hi, how = cis.get(spec.name, (None, None, ""))
            metrics[spec.name] = spec.record(values[spec.name], (lo, hi), ci_method=how,
                                             label=f"{spec.label} [{settings.get(spec.name, tag)}]")
    return metrics
