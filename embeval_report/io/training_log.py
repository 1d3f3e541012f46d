r"""Training logs for the training-diagnostics chapter: reading, checking, and one tidy table.

Accepted inputs (the manifest field ``training_log``):

* **CSV / TSV** (``.csv``, ``.tsv``, ``.txt`` with a tab in the header) with a header row;
* **JSON lines** (``.jsonl``, ``.ndjson``): one JSON object per line;
* **TensorBoard** event data: a folder holding ``events.out.tfevents.*`` files (each sub-folder that
  holds event files is one run, as TensorBoard and tbparse treat them), or one event file. Read with
  TensorBoard's ``EventAccumulator`` (the optional ``tensorboard`` package).

Columns (names case-insensitive; TensorBoard tags are matched the same way, ``/`` kept):

* the x axis: ``step`` (also ``global_step``, ``iteration``, ``iter``, ``batch``) or ``epoch``; with both,
  ``step`` is the axis and ``epoch`` is kept;
* ``loss`` — the training loss (also ``train_loss``, ``training_loss``, ``loss/train``, ``train/loss``);
* optional ``val_loss`` (also ``valid_loss``, ``validation_loss``, ``eval_loss``, ``test_loss``,
  ``loss/val``, ``val/loss``, ``loss/validation``), ``lr`` (``learning_rate``, ``lr-*`` as Lightning's
  LearningRateMonitor writes it), ``grad_norm`` (``gradient_norm``, ``gradients/norm``, ``grad/norm``),
  ``run`` (``run_id``, ``seed``, ``version``: several runs in one file);
* every other numeric column is kept as a validation metric (``val_acc``, ``val_mrr``, ...).

Lightning's ``CSVLogger`` writes training and validation values on separate rows with empty cells;
rows of one run with the same step are merged (the first value of each column wins). ``nan`` and
``inf`` loss values are kept: they are what the divergence check looks for.

Bad input raises :class:`~embeval_report.errors.InputError` naming the file, the row (1-based data row,
header not counted) and the column: no step/epoch or loss column, a value that is not a number, a step
that is not an integer or decreases within a run (two runs concatenated without a ``run`` column), a
run with no finite loss, an empty file, bad JSON, a TensorBoard folder without event files or without a
loss tag.
"""
from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import read_text

#: canonical column -> accepted names (lower case; TensorBoard tags compared the same way)
ALIASES = {
    "step": ("step", "global_step", "iteration", "iter", "batch", "steps", "trainer/global_step"),
    "epoch": ("epoch", "epochs"),
    "loss": ("loss", "train_loss", "training_loss", "loss/train", "train/loss", "loss_train", "train_loss_epoch",
             "train_loss_step"),
    "val_loss": ("val_loss", "valid_loss", "validation_loss", "eval_loss", "test_loss", "loss/val", "val/loss",
                 "loss/validation", "loss/valid", "validation/loss", "eval/loss", "val_loss_epoch"),
    "lr": ("lr", "learning_rate", "lr-adam", "lr-sgd", "lr-adamw", "learning-rate", "train/lr", "train/learning_rate"),
    "grad_norm": ("grad_norm", "gradient_norm", "gradients/norm", "grad/norm", "grad_norm_total", "train/grad_norm"),
    "run": ("run", "run_id", "run_name", "seed", "version"),
}
#: columns with a fixed meaning (the rest are validation metrics)
FIXED = ("run", "step", "epoch", "loss", "val_loss", "lr", "grad_norm")
EVENT_GLOB = "events.out.tfevents.*"
_INTEGER = re.compile(r"[+-]?\d+(\.0*)?\Z")


@dataclass(frozen=True)
class TrainingLog:
    """A validated training log: ``frame`` has ``run`` (str), ``step`` (int64), ``loss`` (float, NaN = not
    logged at that step, ±inf kept), and when logged ``epoch``, ``val_loss``, ``lr``, ``grad_norm`` and the
    validation ``metrics`` columns; ``loss_logged`` (bool) tells a loss logged as ``nan`` (kept: divergence)
    from a step where no loss was logged; sorted by run (first appearance) then step.
    ``x`` names the axis as the file did (``"step"`` or ``"epoch"``)."""

    frame: pd.DataFrame
    source: str
    format: str
    x: str
    metrics: tuple[str, ...]

    @property
    def runs(self) -> list[str]:
        return list(dict.fromkeys(self.frame["run"]))

    def run(self, name: str) -> pd.DataFrame:
        return self.frame[self.frame["run"] == name].reset_index(drop=True)

    def has(self, column: str) -> bool:
        return column in self.frame.columns and self.frame[column].notna().any()


def read_training_log(path, label: str | None = None) -> TrainingLog:
    """Read a training log (CSV/TSV/JSONL file or TensorBoard folder/file; see the module docstring)."""
    p = Path(path)
    label = label or p.name
    if not p.exists():
        raise InputError(f"{label}: file not found: {p}")
    if p.is_dir() or p.name.startswith("events.out.tfevents"):
        return _read_tensorboard(p, label)
    suffix = p.suffix.lower()
    text = read_text(p, label)
    if suffix in (".jsonl", ".ndjson", ".json"):
        rows, cols, where = _read_jsonl(text, label)
        fmt = "jsonl"
    else:
        rows, cols, where, fmt = _read_delimited(text, label)
    return _tidy(rows, cols, where, label, fmt)


def training_log_frame(frame: pd.DataFrame, label: str = "training log") -> TrainingLog:
    """The validated log of an in-memory table (columns as in a file; rows counted from 1; a NaN loss counts
    as not logged, an infinite one as logged)."""
    cols = [str(c) for c in frame.columns]
    rows = [list(r) for r in frame.itertuples(index=False, name=None)]
    return _tidy(rows, cols, [f"row {i}" for i in range(1, len(rows) + 1)], label, "frame", nan_missing=True)


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

def _read_delimited(text: str, label: str):
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise InputError(f"{label}: empty file; expected a header row (step or epoch, loss, ...) and one row per "
                         "logged step")
    sep = "\t" if "\t" in lines[first] else ","
    body = [(n, line) for n, line in enumerate(lines[first + 1:], first + 2) if line.strip()]
    header = [h.strip() for h in next(csv.reader([lines[first]], delimiter=sep))]
    rows, where = [], []
    for (n, _), fields in zip(body, csv.reader((line for _, line in body), delimiter=sep)):
        if len(fields) != len(header):
            raise InputError(f"{label}, row {len(rows) + 1} (line {n}): found {len(fields)} field(s); expected "
                             f"{len(header)} ({'tab' if sep == chr(9) else 'comma'}-separated, as in the header row)")
        rows.append([f.strip() for f in fields])
        where.append(f"row {len(rows)} (line {n})")
    return rows, header, where, "tsv" if sep == "\t" else "csv"


def _read_jsonl(text: str, label: str):
    records, where = [], []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{label}, line {n}: invalid JSON ({e.msg}); expected one JSON object per line") from None
        except RecursionError:
            raise InputError(f"{label}, line {n}: invalid JSON (nested too deeply); expected one JSON object per "
                             "line") from None
        if not isinstance(obj, dict):
            raise InputError(f"{label}, line {n}: expected a JSON object {{\"step\": ..., \"loss\": ...}}, found "
                             f"{type(obj).__name__}")
        records.append(obj)
        where.append(f"row {len(records)} (line {n})")
    if not records:
        raise InputError(f"{label}: empty file; expected one JSON object per line with step (or epoch) and loss")
    cols = list(dict.fromkeys(k for r in records for k in r))
    return [[r.get(c) for c in cols] for r in records], cols, where


def _read_tensorboard(path: Path, label: str) -> TrainingLog:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise InputError(f"{label}: reading TensorBoard event files needs the `tensorboard` package "
                         "(pip install tensorboard), or export the scalars to CSV") from None
    if path.is_dir():
        files = sorted(path.rglob(EVENT_GLOB))
        if not files:
            raise InputError(f"{label}: no TensorBoard event files ({EVENT_GLOB}) in this folder; expected a "
                             "TensorBoard log folder or a CSV/TSV/JSONL training log")
        folders = list(dict.fromkeys(f.parent for f in files))
    else:
        folders = [path]
    records = {}  # (run, step) -> {tag: value}
    for folder in folders:
        run = "run" if folder in (path, path.parent) or len(folders) == 1 else str(folder.relative_to(path))
        try:
            acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
            acc.Reload()
            tags = acc.Tags().get("scalars", [])
        except Exception as e:  # corrupt or foreign files
            raise InputError(f"{label}: could not read TensorBoard events in {folder.name}: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        for tag in tags:
            for ev in acc.Scalars(tag):
                records.setdefault((run, int(ev.step)), {})[tag] = float(ev.value)
    if not records:
        raise InputError(f"{label}: the TensorBoard events hold no scalars; expected a loss tag "
                         f"({', '.join(ALIASES['loss'][:4])}, ...)")
    tags = list(dict.fromkeys(t for rec in records.values() for t in rec))
    cols = ["run", "step", *tags]
    keys = sorted(records, key=lambda k: (k[0], k[1]))
    rows = [[run, step, *(records[(run, step)].get(t) for t in tags)] for run, step in keys]
    return _tidy(rows, cols, [f"step {s} of run {r!r}" for r, s in keys], label, "tensorboard")


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

def _canonical(cols: list[str], label: str) -> dict[str, int]:
    """canonical name -> column position (each canonical name from its first matching column)."""
    low = [c.strip().lower() for c in cols]
    out = {}
    for name, aliases in ALIASES.items():
        hit = [i for i, c in enumerate(low) if c in aliases]
        if name == "lr" and not hit:
            hit = [i for i, c in enumerate(low) if c.startswith("lr-") or c.startswith("lr_")]
        if hit:
            out[name] = hit[0]
    if "step" not in out and "epoch" not in out:
        raise InputError(f"{label}: no step or epoch column (found {', '.join(map(repr, cols)) or 'none'}); expected "
                         f"a column named one of {', '.join(ALIASES['step'][:4] + ALIASES['epoch'][:1])}")
    if "loss" not in out:
        raise InputError(f"{label}: no training-loss column (found {', '.join(map(repr, cols))}); expected a column "
                         f"named one of {', '.join(ALIASES['loss'][:5])}")
    return out


def _number(v, label: str, where: str, col: str) -> float:
    if v is None or (isinstance(v, str) and v.strip() == ""):
        return math.nan
    if isinstance(v, bool):
        raise InputError(f"{label}, {where}, column {col!r}: {v!r} is not a number; expected a number")
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    try:
        return float(str(v).strip())
    except ValueError:
        raise InputError(f"{label}, {where}, column {col!r}: {str(v)!r} is not a number; expected a number "
                         "(empty, nan or inf are accepted)") from None


def _tidy(rows, cols, where, label: str, fmt: str, nan_missing: bool = False) -> TrainingLog:
    if not rows:
        raise InputError(f"{label}: no rows below the header row; expected one row per logged step")
    pos = _canonical(cols, label)
    x = "step" if "step" in pos else "epoch"
    metric_cols = [i for i, c in enumerate(cols) if i not in pos.values()]
    data: dict[str, list] = {}
    for name in ("step", "epoch", "loss", "val_loss", "lr", "grad_norm"):
        if name in pos:
            data[name] = [_number(r[pos[name]], label, w, cols[pos[name]]) for r, w in zip(rows, where)]
    metrics = []
    for i in metric_cols:
        vals = [r[i] for r in rows]
        if all(isinstance(v, str) and v.strip() and not _is_float(v) for v in vals if v not in (None, "")):
            continue  # a text column (a date, a tag): not a metric
        data[cols[i]] = [_number(v, label, w, cols[i]) for v, w in zip(vals, where)]
        metrics.append(cols[i])
    run = ([("" if r[pos["run"]] is None else str(r[pos["run"]]).strip()) or "run" for r in rows]
           if "run" in pos else ["run"] * len(rows))
    xs = np.asarray(data[x], float)
    for k, (v, w) in enumerate(zip(xs, where)):
        if not math.isfinite(v) or not float(v).is_integer() or v < 0:
            what = "empty" if math.isnan(v) else f"{v:g} is not a non-negative integer"
            raise InputError(f"{label}, {w}, column {cols[pos[x]]!r}: {what}; expected the {x} number of each row")
    df = pd.DataFrame(data)
    df.insert(0, "run", pd.Series(run, dtype=object))
    # a loss logged as nan/inf is kept (divergence); an empty cell means "not logged at this step"
    df["loss_logged"] = [not _empty(r[pos["loss"]]) and not (nan_missing and pd.isna(r[pos["loss"]])) for r in rows]
    df[x] = xs.astype(np.int64)
    df["_row"] = np.arange(len(df))
    # steps never decrease within a run (merge repeated steps: Lightning writes train and val rows apart)
    for name, part in df.groupby("run", sort=False):
        back = np.flatnonzero(np.diff(part[x].to_numpy()) < 0)
        if len(back):
            r = int(part["_row"].iloc[back[0] + 1])
            raise InputError(f"{label}, {where[r]}, column {cols[pos[x]]!r}: {x} {int(part[x].iloc[back[0] + 1])} "
                             f"comes after {x} {int(part[x].iloc[back[0]])}; expected increasing {x}s within a run "
                             "(several runs in one file need a `run` column)")
    order = {r: i for i, r in enumerate(dict.fromkeys(run))}
    g = df.groupby(["run", x], sort=False)
    merged = g.first()
    merged["loss_logged"] = g["loss_logged"].max()
    df = (merged.reset_index().assign(_order=lambda t: t["run"].map(order)).sort_values(["_order", x], kind="stable")
          .drop(columns=["_order", "_row"]).reset_index(drop=True))
    if x == "epoch" and "step" not in df:
        df = df.rename(columns={"epoch": "step"}).assign(epoch=lambda t: t["step"])
    for name, part in df.groupby("run", sort=False):
        if not part["loss_logged"].any():
            raise InputError(f"{label}: run {name!r} has no training-loss value in column {cols[pos['loss']]!r}; "
                             "expected a loss on at least some rows")
    for c in ("val_loss", "lr", "grad_norm", *metrics):
        if c in df and df[c].isna().all():
            df = df.drop(columns=c)
    metrics = [m for m in metrics if m in df]
    return TrainingLog(df, label, fmt, x, tuple(metrics))


def _empty(v) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
