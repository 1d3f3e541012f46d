r"""The effect that matters, per metric (``--mde``): the smallest change of a metric a user cares about.

``--mde`` takes comma-separated entries (and may be repeated):

* ``0.02`` — an absolute change, in every metric's own units, for every metric without an entry of its own;
* ``2%`` — a change relative to the metric's value (a comparison's model A; the report's own value in the
  Statistical rigor chapter): :math:`E = 0.02\,|v|`;
* ``link_prediction.mean_rank=1``, ``mrr=3%`` — for one metric of one chapter, or for a metric of that name
  in every chapter (a drift metric ``mean_drift`` covers its per-snapshot copies ``mean_drift__<snapshot>``);
* ``auto`` (the default) — each metric's kind decides, from its :class:`~.spec.MetricSpec`'s range:

  - **bounded** (both ends of the range finite: rates, shares, cosines, nDCG, MRR): an absolute
    :data:`ABSOLUTE` (0.01, one percentage point), but never more than :data:`NEAR_BOUND` (10 %) of the
    value's distance to the nearer end of its range: a hit rate of 0.015 gets 0.0015, since one point would
    be a change of two thirds (a value on the bound itself keeps 0.01);
  - **unbounded** (a range open on one side: ranks, distances, ratios): :data:`RELATIVE` (5 %) of the value,
    as a scale-free metric has no absolute unit (a mean rank of 40 gets 2 ranks); 0.01 when the value is 0;
  - **unknown** (no spec declares the metric, e.g. a report from an older version): 0.01.

The most specific entry wins: ``chapter.metric``, then ``metric``, then a bare value, then ``auto``.
Bad entries raise :class:`ValueError` with one line naming the entry and what was expected.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

#: defaults of ``auto`` (see the module docstring)
ABSOLUTE = 0.01
RELATIVE = 0.05
NEAR_BOUND = 0.10
AUTO = "auto"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
#: separates a per-snapshot (or per-setting) copy of a metric from its spec's name (``mean_drift__2024_02``)
SUFFIX = "__"


@dataclass(frozen=True)
class Effect:
    """An absolute change (``relative=False``) or a share of the metric's value (``relative=True``)."""

    value: float
    relative: bool = False

    def resolve(self, base: float | None) -> float:
        """The effect in the metric's units for a metric at ``base`` (NaN for a relative effect without base)."""
        if not self.relative:
            return self.value
        return self.value * abs(base) if base is not None and math.isfinite(base) else math.nan

    def text(self) -> str:
        return f"{100 * self.value:g}%" if self.relative else f"{self.value:g}"

    @classmethod
    def parse(cls, text: str, entry: str) -> "Effect":
        t = text.strip()
        relative = t.endswith("%")
        try:
            v = float(t[:-1] if relative else t)
        except ValueError:
            raise ValueError(f"--mde {entry!r}: {t!r} is not a number; expected e.g. 0.01, 2% or "
                             "link_prediction.mean_rank=1") from None
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"--mde {entry!r}: expected a positive effect, got {t}")
        return cls(v / 100 if relative else v, relative)


@dataclass(frozen=True)
class Effects:
    """The parsed ``--mde`` (see the module docstring)."""

    default: Effect | None = None                  # a bare value; None: each metric's kind decides
    per_metric: dict = field(default_factory=dict)  # "chapter.metric" or "metric" -> Effect

    @classmethod
    def parse(cls, text) -> "Effects":
        """Parse ``--mde`` text (entries separated by commas; a number is an absolute bare value)."""
        if text is None:
            return cls()
        if isinstance(text, bool):
            raise ValueError(f"--mde: expected an effect such as 0.01, 2% or link_prediction.mean_rank=1, got {text!r}")
        if isinstance(text, (int, float)):
            text = repr(float(text))
        default, per = None, {}
        entries = [e.strip() for e in str(text).split(",")]
        if not any(entries):
            raise ValueError("--mde: empty; expected e.g. 0.01, 2% or link_prediction.mean_rank=1")
        for entry in entries:
            if not entry:
                raise ValueError(f"--mde {text!r}: an empty entry between commas")
            if entry == AUTO:
                continue
            name, sep, value = entry.partition("=")
            if not sep:
                if default is not None:
                    raise ValueError(f"--mde: two values for every metric ({default.text()} and {entry}); give one, "
                                     "and name the metric of the other (chapter.metric=VALUE)")
                default = Effect.parse(entry, entry)
                continue
            name = name.strip()
            if not _NAME.match(name):
                raise ValueError(f"--mde {entry!r}: {name!r} is not a metric name; expected metric=VALUE or "
                                 "chapter.metric=VALUE (letters, digits and _)")
            if name in per:
                raise ValueError(f"--mde: {name} is given twice")
            per[name] = Effect.parse(value, entry)
        return cls(default, per)

    def canonical(self) -> str:
        """The entries as one string (what the settings keep and the reports show)."""
        parts = [self.default.text()] if self.default else []
        parts += [f"{k}={e.text()}" for k, e in self.per_metric.items()]
        return ",".join(parts) or AUTO

    def entry(self, chapter: str, metric: str) -> tuple[Effect | None, str]:
        """The user's entry for ``chapter.metric`` (most specific first) and how it was given, or ``(None, "")``."""
        base = metric.split(SUFFIX)[0]
        for key in (f"{chapter}.{metric}", f"{chapter}.{base}", metric, base):
            if key in self.per_metric:
                return self.per_metric[key], f"--mde {key}={self.per_metric[key].text()}"
        if self.default is not None:
            return self.default, f"--mde {self.default.text()}"
        return None, ""

    def for_metric(self, chapter: str, metric: str, base: float | None) -> tuple[float, str]:
        """``(E, rule)``: the effect that matters for ``chapter.metric`` at value ``base``, and how it was set."""
        eff, how = self.entry(chapter, metric)
        if eff is not None:
            e = eff.resolve(base)
            if eff.relative and not (math.isfinite(e) and e > 0):
                return ABSOLUTE, f"{how}, but the value is 0 or missing: {ABSOLUTE:g}"
            return e, how + (f" of {_short(base)}" if eff.relative else "")
        return default_effect(metric_kind(chapter, metric), base)

    def unmatched(self, names) -> list[str]:
        """The per-metric entries that name none of ``names`` (``chapter.metric`` strings)."""
        names = list(names)
        keys = set()
        for n in names:
            chapter, metric = n.split(".", 1)
            base = metric.split(SUFFIX)[0]
            keys |= {n, f"{chapter}.{base}", metric, base}
        return [k for k in self.per_metric if k not in keys]


def _short(x) -> str:
    return f"{x:.4g}"


def default_effect(kind: tuple, base: float | None) -> tuple[float, str]:
    """``(E, rule)`` of ``auto`` for a metric of ``kind`` (:func:`metric_kind`) at value ``base``."""
    name, lo, hi = kind
    if name == "bounded" and base is not None and math.isfinite(base):
        room = min(base - lo, hi - base)
        if 0 < room and NEAR_BOUND * room < ABSOLUTE:
            return NEAR_BOUND * room, (f"{100 * NEAR_BOUND:g}% of the distance from {_short(base)} to the bound "
                                       f"{_short(lo if base - lo <= hi - base else hi)} (default, near a bound)")
        return ABSOLUTE, f"{ABSOLUTE:g} (default for a bounded metric)"
    if name == "unbounded" and base is not None and math.isfinite(base) and base != 0:
        return RELATIVE * abs(base), f"{100 * RELATIVE:g}% of {_short(base)} (default for an unbounded metric)"
    return ABSOLUTE, f"{ABSOLUTE:g} (default)"


def metric_kind(chapter: str, metric: str) -> tuple[str, float, float]:
    """``(kind, low, high)`` of a metric from its spec's range: ``bounded`` (both ends finite), ``unbounded``,
    or ``unknown`` (no spec, or specs of that name that disagree on the range)."""
    ranges = _spec_ranges().get(metric.split(SUFFIX)[0], set())
    if len(ranges) != 1:
        return ("unknown", -math.inf, math.inf)
    lo, hi = next(iter(ranges))
    return ("bounded" if math.isfinite(lo) and math.isfinite(hi) else "unbounded", float(lo), float(hi))


@lru_cache(maxsize=1)
def _spec_ranges() -> dict:
    """Metric name -> the set of ranges its :class:`~.spec.MetricSpec` declarations give (every metric module)."""
    import importlib
    import pkgutil
    from pathlib import Path

    from .spec import Specs

    out: dict = {}
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        mod = importlib.import_module(f"{__package__}.{info.name}")
        for obj in vars(mod).values():
            if isinstance(obj, Specs):
                for s in obj.values():
                    out.setdefault(s.name, set()).add(tuple(s.range))
    return out


def check(value) -> str:
    """The ``mde`` option's value made canonical, or :class:`ValueError` (for :mod:`embeval_report.settings`)."""
    return Effects.parse(value).canonical()


def declared_metrics() -> set:
    """The names of every metric a :class:`~.spec.MetricSpec` declares."""
    return set(_spec_ranges())


__all__ = ["ABSOLUTE", "AUTO", "Effect", "Effects", "NEAR_BOUND", "RELATIVE", "check", "declared_metrics",
           "default_effect", "metric_kind"]
