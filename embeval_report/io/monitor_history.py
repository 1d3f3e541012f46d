"""The monitoring history: one JSON line per scored batch (``monitor --history FILE``), read back by the
monitoring chapter (manifest field ``monitor_history``).

Each line is a JSON object::

    {"format": "embeval-report monitoring history", "version": 1, "batch": "2024-05 a",
     "timestamp": "2024-05-01T00:00:00", "file": "batch.npy", "profile": "baseline", "level": "warning",
     "n": 1250, "d": 64, "alpha": 0.05, "seconds": 0.8,
     "signals": {"mean_shift": {"value": ..., "ratio": ..., "p_value": ..., "p_adjusted": ..., "level": ...,
                                "ci_low": ..., "ci_high": ..., "rule": ..., "detail": {...}}, ...}}

Lines are appended (never rewritten), each in one locked write (:func:`append_history`), so an interrupted run
loses at most its own line and two monitors appending at once keep both lines whole; blank lines are ignored.
:func:`read_history` validates every line; a torn or corrupt one is skipped and said with its line number.
"""
from __future__ import annotations

import errno
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import ExitCode, InputError, OutputError, notice
from ..safe_files import open_nofollow

#: the alert levels of a batch and of each signal, mildest first (``monitor``'s vocabulary)
LEVELS = ("ok", "warning", "critical")
HISTORY_FORMAT = "embeval-report monitoring history"
HISTORY_VERSION = 1
_REQUIRED = ("batch", "timestamp", "level", "n", "signals")


def append_history(path, record: dict) -> Path:
    """Append ``record`` (from :func:`history_record`) as one line to the JSONL file ``path`` (created).

    The file is opened without following a symbolic link (a link, or anything but a regular file, at ``path`` is
    one :class:`~embeval_report.errors.InputError` line). The append is atomic for readers and other writers:
    under an exclusive ``flock`` of the file, one
    ``os.write`` of the whole line to a descriptor opened with ``O_APPEND``, then ``fsync``. A line left torn by
    an earlier crash (no final newline) gets a newline first, so this line stays whole; a write that fails
    (no space, quota) is undone (the file is cut back to its size before) and raised as one
    :class:`~embeval_report.errors.OutputError` line.
    """
    import fcntl

    path = Path(path)
    line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
    size = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_nofollow(path, os.O_RDWR | os.O_APPEND, "--history")  # a link there: one line, exit 2
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:  # a file system without flock: O_APPEND alone keeps one write whole
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # the torn line before stays apart (and is skipped when read)
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        except OSError:
            if size is not None:
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
            raise
        finally:
            os.close(fd)
    except OSError as exc:
        raise OutputError(f"--history {path}: cannot append the batch's line: {exc.strerror or exc}"
                          + ("; the file is as it was" if size is not None else ""), ExitCode.WRITE) from None
    return path


@dataclass(frozen=True)
class MonitorHistory:
    """A read history: the raw records in file order, one tidy row per batch and signal, and the lines skipped
    (``(line number, reason)``: torn by a crash, edited by hand)."""

    records: list
    signals: pd.DataFrame   # batch_index, batch, timestamp, signal, label, value, ci_low, ci_high, ratio,
    #                         p_value, p_adjusted, level, rule, plus the detail fields used by the dashboard
    file: str
    skipped: tuple = ()

    @property
    def batches(self) -> pd.DataFrame:
        """One row per batch: index, name, timestamp, rows, level."""
        return pd.DataFrame([{"batch_index": i, "batch": r["batch"], "timestamp": r["timestamp"], "n": r["n"],
                              "level": r["level"]} for i, r in enumerate(self.records)])


def _num(v):
    return float("nan") if v is None else float(v)


class _BadLine(ValueError):
    """A history line that cannot be used; the message says why."""


def _parse_line(line: str, i: int) -> tuple[dict, list[dict]]:
    """One history line: its record and its signal rows (batch index ``i``); raises :class:`_BadLine`."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise _BadLine(f"not valid JSON ({exc.args[0] if exc.args else exc})") from None
    if not isinstance(rec, dict):
        raise _BadLine(f"expected a JSON object, found {type(rec).__name__}")
    if rec.get("format") != HISTORY_FORMAT:
        raise _BadLine(f"field 'format' is {rec.get('format')!r}; expected {HISTORY_FORMAT!r} "
                       "(a line written by `embeval-report monitor --history`)")
    if rec.get("version") != HISTORY_VERSION:
        raise _BadLine(f"history version {rec.get('version')!r}; this embeval-report reads version {HISTORY_VERSION}")
    missing = [k for k in _REQUIRED if k not in rec]
    if missing:
        raise _BadLine(f"missing field {missing[0]!r}")
    if rec["level"] not in LEVELS:
        raise _BadLine(f"field 'level': {rec['level']!r}; expected one of {', '.join(LEVELS)}")
    if not isinstance(rec["signals"], dict) or not rec["signals"]:
        raise _BadLine("field 'signals': expected a non-empty object of signals")
    rows = []
    for sname, s in rec["signals"].items():
        if not isinstance(s, dict) or "value" not in s or s.get("level") not in LEVELS:
            raise _BadLine(f"field 'signals.{sname}': expected an object with 'value' and 'level' ({', '.join(LEVELS)})")
        try:
            row = {"batch_index": i, "batch": str(rec["batch"]), "timestamp": str(rec["timestamp"]),
                   "signal": sname, "label": s.get("label", sname), "value": _num(s["value"]),
                   "ci_low": _num(s.get("ci_low")), "ci_high": _num(s.get("ci_high")),
                   "ratio": _num(s.get("ratio")), "p_value": _num(s.get("p_value")),
                   "p_adjusted": _num(s.get("p_adjusted")), "level": s["level"], "rule": s.get("rule", ""),
                   "test": s.get("test", "")}
        except (TypeError, ValueError):
            raise _BadLine(f"field 'signals.{sname}': a value that is not a number") from None
        for k, v in (s.get("detail") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row[k] = float(v)
        rows.append(row)
    return rec, rows


def read_history(path) -> MonitorHistory:
    """Read and validate a monitoring history (see the module docstring).

    A line that cannot be used (torn by a crash mid-append, not JSON, a field missing or of the wrong kind, edited
    by hand) is skipped and said in one line with its line number (:func:`~embeval_report.errors.notice`), and
    kept in :attr:`MonitorHistory.skipped`; only a history with no usable line is an
    :class:`~embeval_report.errors.InputError`.
    """
    path = Path(path)
    name = path.name
    if not path.is_file():
        raise InputError(f"monitor_history: {path}: no such file (expected the JSONL file `embeval-report monitor "
                         "--history` writes)")
    records, rows, skipped = [], [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec, rec_rows = _parse_line(line, len(records))
            except _BadLine as exc:
                skipped.append((lineno, str(exc)))
                continue
            records.append(rec)
            rows.extend(rec_rows)
    if not records:
        if skipped:
            line, why = skipped[0]
            raise InputError(f"monitor_history: {name}, line {line}: {why}; no line of the file could be read "
                             f"({len(skipped)} skipped)")
        raise InputError(f"monitor_history: {name}: no batches (the file is empty)")
    if skipped:
        shown = "; ".join(f"line {n}: {why}" for n, why in skipped[:3])
        more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        notice(f"monitor_history: {name}: skipped {len(skipped)} unreadable line{'s' if len(skipped) > 1 else ''} "
               f"({shown}{more}); read {len(records)} batches")
    return MonitorHistory(records, pd.DataFrame(rows), name, tuple(skipped))


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)
