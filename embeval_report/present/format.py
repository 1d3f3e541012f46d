"""The one place numbers and intervals become text.

Every table cell, narrative number with its interval and scorecard value is written by a
function here, so a value reads the same way in every chapter:

* :func:`number` — a table cell (ints as ints, 4 significant digits, ∞, — for missing);
* :func:`interval` — ``lo–hi`` (or ``—`` when missing), for an interval column;
* :func:`value_with_ci` — ``value (95 % CI lo–hi)`` in narrative;
* :func:`percent` — a share as a percentage (``< 0.01 %`` for tiny non-zero shares);
* :func:`scorecard_value` — ``value [lo, hi]`` with the bias-corrected estimate where the
  interval is a basic one that excludes the plug-in value;
* :func:`marked_value` — a table's value cell, marked :data:`MARK` where its interval excludes it.

A value outside its own interval is always marked: † in tables and the scorecard (a caption carries
:data:`MARK_NOTE`, the Summary its own note), the bias-corrected estimate beside it in narrative.
"""
from __future__ import annotations

import math
import numbers
from typing import Any

MISSING = "—"
#: marks a value that its interval does not contain (see :data:`MARK_NOTE`)
MARK = "†"
#: what :data:`MARK` means, for the caption of a table that uses it
MARK_NOTE = (f"{MARK} The interval does not contain the value: it is a bootstrap interval that corrects the "
             "estimate's finite-sample bias, so the bias-corrected estimate (2 × value − mean of the bootstrap "
             "replicates), shown beside the value where it was recorded, and the interval are the better guide.")


def is_missing(v: Any) -> bool:
    """``None``, NaN, ``pd.NA`` / ``NaT``."""
    if v is None:
        return True
    try:
        import pandas as pd
        if v is pd.NA or v is pd.NaT:
            return True
    except ImportError:  # pragma: no cover
        pass
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral):
        try:
            return math.isnan(float(v))
        except (TypeError, ValueError):
            return False
    return False


def _finite(*xs) -> bool:
    return all(x is not None and not is_missing(x) and math.isfinite(float(x)) for x in xs)


def number(v: Any, digits: int = 4) -> str:
    """Format a number: ints as ints, floats to ``digits`` significant digits (no exponent for
    large values), NaN/None as an em dash, infinities as ∞."""
    if is_missing(v):
        return MISSING
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        return str(bool(v))
    if isinstance(v, numbers.Integral):
        return str(int(v))
    f = float(v)
    if math.isinf(f):
        return "∞" if f > 0 else "−∞"
    if f == 0:
        return "0"
    if 10 ** digits <= abs(f) < 1e15:
        return f"{f:.0f}"
    s = f"{f:.{digits}g}"
    if "e" in s:
        mant, exp = s.split("e")
        s = f"{mant}e{int(exp)}"
    return s


def _fmt(x, fmt: str | None, digits: int) -> str:
    return format(x, fmt) if fmt else number(x, digits)


def interval(lo, hi, fmt: str | None = None, *, sep: str = "–", digits: int = 4) -> str:
    """``lo–hi`` with ``fmt`` (a format spec such as ``".3f"`` or ``".1%"``; default :func:`number`),
    or an em dash when either end is missing or not finite. An end below zero joins with `` to ``
    (``−0.05 to −0.01`` reads better than ``−0.05–−0.01``)."""
    if not _finite(lo, hi):
        return MISSING
    if float(lo) < 0 or float(hi) < 0:
        sep = " to "
    return f"{_fmt(lo, fmt, digits)}{sep}{_fmt(hi, fmt, digits)}"


def outside(value, lo, hi) -> bool:
    """Whether ``value`` lies outside its interval ``[lo, hi]`` (False when any of them is missing)."""
    return _finite(value, lo, hi) and not float(lo) <= float(value) <= float(hi)


def value_with_ci(value, lo, hi, fmt: str, what: str = "95 % CI", bias_corrected=None) -> str:
    """``value (95 % CI lo–hi)`` formatted with ``fmt``; just the value when the interval is missing.

    When the interval excludes the value, the ``bias_corrected`` estimate (a basic bootstrap interval is
    centred on it) is named first: ``156.5 (bias-corrected 124.1; 95 % CI 100.7–140.0)``; without one, the
    interval says that it excludes the value: ``0.119 (95 % CI 0.12–0.129, which excludes the value)``.
    """
    if not _finite(lo, hi):
        return format(value, fmt)
    if outside(value, lo, hi):
        if _finite(bias_corrected):
            return (f"{format(value, fmt)} (bias-corrected {format(bias_corrected, fmt)}; {what} "
                    f"{interval(lo, hi, fmt)})")
        return f"{format(value, fmt)} ({what} {interval(lo, hi, fmt)}, which excludes the value)"
    return f"{format(value, fmt)} ({what} {interval(lo, hi, fmt)})"


def marked_value(value, lo=None, hi=None, bias_corrected=None, text: str | None = None) -> str:
    """A table's value cell: ``text`` (default :func:`number` of ``value``), followed where the interval excludes
    the value by the bias-corrected estimate and :data:`MARK`: ``0.119, bias-corrected 0.1246 †``."""
    text = number(value) if text is None else text
    if not outside(value, lo, hi):
        return text
    if _finite(bias_corrected):
        text += f", bias-corrected {number(bias_corrected)}"
    return f"{text} {MARK}"


def ci_suffix(lo, hi, fmt: str, what: str = "95 % CI") -> str:
    """`` (95 % CI lo–hi)`` to append after a value already written, or ``""`` without an interval."""
    return f" ({what} {interval(lo, hi, fmt)})" if _finite(lo, hi) else ""


def percent(p, digits: int = 2) -> str:
    """A share as a percentage; ``< 0.01 %`` for tiny non-zero shares, — when missing."""
    if not _finite(p):
        return MISSING
    p = float(p)
    floor = 10 ** -(digits + 2)
    return f"< {floor:.{digits}%}" if 0 < p < floor else f"{p:.{digits}%}"


def p_value(p) -> str:
    """A p-value for tables and narrative: ``< 0.0001``, 4 decimals below 0.01, else 3; "—" when missing."""
    if is_missing(p) or not math.isfinite(float(p)):
        return "—"
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


def _short(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def scorecard_value(m: dict) -> str:
    """``value [lo, hi]`` for the scorecard, from a recorded metric (``results/*.json`` entry).

    When the interval excludes the plug-in value (a basic bootstrap interval corrects the
    finite-sample bias of spectral statistics), the bias-corrected estimate is shown too:
    ``156.5, bias-corrected 121.3 [100.7, 140] †``.
    """
    v = m.get("value")
    if v is None:
        return "∞" if m.get("name") == "condition_number" else MISSING
    text = _short(v)
    lo, hi = m.get("ci_low"), m.get("ci_high")
    if lo is not None and hi is not None:
        out = outside(v, lo, hi)
        bc = m.get("bias_corrected")
        if out and bc is not None:
            text += f", bias-corrected {_short(bc)}"
        text += f" [{_short(lo)}, {_short(hi)}]" + (f" {MARK}" if out else "")
    elif m.get("note"):
        text += f" (no interval: {m['note']})"
    return text


def metric_text(m, fmt: str, what: str = "95 % CI") -> str:
    """``value (95 % CI lo–hi)`` of a :class:`~embeval_report.metrics.spec.Metric` for narrative (its
    bias-corrected estimate beside it where the interval excludes the value: :func:`value_with_ci`)."""
    return value_with_ci(m.value, m.ci_low, m.ci_high, fmt, what, m.bias_corrected)


def decimals(effect) -> int:
    """Decimals that resolve a tenth of E (E = 0.01: 3; E = 2.3: 1), so a difference reads against ±E."""
    if effect is None or not math.isfinite(effect) or effect <= 0:
        return 4
    return int(min(max(1 - math.floor(math.log10(effect)), 0), 8))


def fixed_text(x: float | None, fmt: str = ".2f") -> str:
    """``x`` with ``fmt``, or "undefined" (NaN skewness, constant correlations).

    >>> fixed_text(1.23456), fixed_text(float("nan"))
    ('1.23', 'undefined')
    """
    return format(x, fmt) if x is not None and math.isfinite(x) else "undefined"
