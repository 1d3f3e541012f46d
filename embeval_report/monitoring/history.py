"""The monitoring history: one JSON line per scored batch (``monitor --history FILE``), read back by the
monitoring chapter (manifest field ``monitor_history``).

Each line is a JSON object::

    {"format": "embeval-report monitoring history", "version": 1, "batch": "2024-05 a",
     "timestamp": "2024-05-01T00:00:00", "file": "batch.npy", "profile": "baseline", "level": "warning",
     "n": 1250, "d": 64, "alpha": 0.05, "seconds": 0.8,
     "signals": {"mean_shift": {"value": ..., "ratio": ..., "p_value": ..., "p_adjusted": ..., "level": ...,
                                "ci_low": ..., "ci_high": ..., "rule": ..., "detail": {...}}, ...}}

Lines are appended (never rewritten), so an interrupted run loses at most its own line; blank lines are
ignored. :func:`read_history` validates every line and names the file, line and field of the first problem.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import InputError
from .score import LEVELS, BatchScore

HISTORY_FORMAT = "embeval-report monitoring history"
HISTORY_VERSION = 1
_REQUIRED = ("batch", "timestamp", "level", "n", "signals")


def history_record(score: BatchScore, *, batch: str, timestamp: str, file: str = "") -> dict:
    """The JSON object of one history line."""
    return {"format": HISTORY_FORMAT, "version": HISTORY_VERSION, "batch": batch, "timestamp": timestamp,
            "file": file, **score.to_json()}


def append_history(path, record: dict) -> Path:
    """Append ``record`` (from :func:`history_record`) as one line to the JSONL file ``path`` (created)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise InputError(f"--history {path}: exists and is not a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    return path


@dataclass(frozen=True)
class MonitorHistory:
    """A read history: the raw records in file order, and one tidy row per batch and signal."""

    records: list
    signals: pd.DataFrame   # batch_index, batch, timestamp, signal, label, value, ci_low, ci_high, ratio,
    #                         p_value, p_adjusted, level, rule, plus the detail fields used by the dashboard
    file: str

    @property
    def batches(self) -> pd.DataFrame:
        """One row per batch: index, name, timestamp, rows, level."""
        return pd.DataFrame([{"batch_index": i, "batch": r["batch"], "timestamp": r["timestamp"], "n": r["n"],
                              "level": r["level"]} for i, r in enumerate(self.records)])


def _num(v):
    return float("nan") if v is None else float(v)


def read_history(path) -> MonitorHistory:
    """Read and validate a monitoring history (see the module docstring)."""
    path = Path(path)
    name = path.name
    if not path.is_file():
        raise InputError(f"monitor_history: {path}: no such file (expected the JSONL file `embeval-report monitor "
                         "--history` writes)")
    records, rows = [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"monitor_history: {name}, line {lineno}"
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise InputError(f"{where}: not valid JSON ({exc.args[0] if exc.args else exc})") from None
            if not isinstance(rec, dict):
                raise InputError(f"{where}: expected a JSON object, found {type(rec).__name__}")
            if rec.get("format") != HISTORY_FORMAT:
                raise InputError(f"{where}: field 'format' is {rec.get('format')!r}; expected {HISTORY_FORMAT!r} "
                                 "(a line written by `embeval-report monitor --history`)")
            if rec.get("version") != HISTORY_VERSION:
                raise InputError(f"{where}: history version {rec.get('version')!r}; this embeval-report reads "
                                 f"version {HISTORY_VERSION}")
            missing = [k for k in _REQUIRED if k not in rec]
            if missing:
                raise InputError(f"{where}: missing field {missing[0]!r}")
            if rec["level"] not in LEVELS:
                raise InputError(f"{where}, field 'level': {rec['level']!r}; expected one of {', '.join(LEVELS)}")
            if not isinstance(rec["signals"], dict) or not rec["signals"]:
                raise InputError(f"{where}, field 'signals': expected a non-empty object of signals")
            i = len(records)
            for sname, s in rec["signals"].items():
                if not isinstance(s, dict) or "value" not in s or s.get("level") not in LEVELS:
                    raise InputError(f"{where}, field 'signals.{sname}': expected an object with 'value' and "
                                     f"'level' ({', '.join(LEVELS)})")
                try:
                    row = {"batch_index": i, "batch": str(rec["batch"]), "timestamp": str(rec["timestamp"]),
                           "signal": sname, "label": s.get("label", sname), "value": _num(s["value"]),
                           "ci_low": _num(s.get("ci_low")), "ci_high": _num(s.get("ci_high")),
                           "ratio": _num(s.get("ratio")), "p_value": _num(s.get("p_value")),
                           "p_adjusted": _num(s.get("p_adjusted")), "level": s["level"], "rule": s.get("rule", ""),
                           "test": s.get("test", "")}
                except (TypeError, ValueError):
                    raise InputError(f"{where}, field 'signals.{sname}': a value that is not a number") from None
                for k, v in (s.get("detail") or {}).items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        row[k] = float(v)
                rows.append(row)
            records.append(rec)
    if not records:
        raise InputError(f"monitor_history: {name}: no batches (the file is empty)")
    frame = pd.DataFrame(rows)
    bad = frame[~frame["value"].map(lambda v: isinstance(v, float))]
    if len(bad):
        raise InputError(f"monitor_history: {name}: a value that is not a number")
    return MonitorHistory(records, frame, name)


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)
