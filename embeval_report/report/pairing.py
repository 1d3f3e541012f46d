"""Two or more models' reports paired unit by unit: the reports (:class:`ModelReport`), the paired rows of every
metric both recorded per unit (:func:`paired_rows`), the comparison table with its verdicts and the rank
intervals (:func:`compare_reports`). Used by ``embeval-report compare`` (:mod:`.compare`) and by a single
report's ``--baseline`` (:mod:`.baseline`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pandas as pd

from ..chapters.recorder import read_results, read_units
from ..errors import InputError
from ..metrics import paired
from .earlier import is_report
from ..metrics.scoring import compare_units


@dataclass(frozen=True)
class ModelReport:
    """One model's report folder: its name, run settings, records and per-unit tables."""

    name: str
    folder: Path
    run: dict
    records: dict
    units: dict   # chapter -> DataFrame (the unit id column first)

    @classmethod
    def open(cls, folder, name: str | None = None) -> "ModelReport":
        folder = Path(folder)
        try:
            run = json.loads((folder / "run.json").read_text())
        except (OSError, ValueError):
            raise InputError(f"{folder}: not an embeval-report folder (no readable run.json)") from None
        records = read_results(folder / "results")
        units = {}
        for chapter, doc in records.items():
            table = read_units(folder / "results", chapter, doc.get("info", {}).get("units"))
            if table is not None:
                units[chapter] = table
        return cls(name or run.get("name") or folder.name, folder, run, records, units)


def is_report_folder(path) -> bool:
    """Whether ``path`` is an earlier report (a folder with results/ whose run.json embeval-report wrote:
    :func:`.earlier.is_report`)."""
    return is_report(path)


def paired_rows(reports: list[ModelReport], *, level: float = 0.95, seed: int = 0, progress=None) -> list[dict]:
    """One row per (A, B) pair of models × chapter × metric both recorded per unit (see the module docstring);
    each row also holds the per-unit differences B − A (``"differences"``)."""
    from ..progress import progress as follow

    jobs = []
    for A, B in combinations(reports, 2):
        for chapter in [c for c in A.units if c in B.units]:
            ia, ib = A.records[chapter]["info"]["units"], B.records[chapter]["info"]["units"]
            if ia["key"] != ib["key"] or ia["unit"] != ib["unit"]:
                continue
            key = ia["key"]
            ua, ub = A.units[chapter].drop_duplicates(key), B.units[chapter].drop_duplicates(key)
            if not ua[key].isin(ub[key]).any():
                raise InputError(
                    f"compare: {A.name} and {B.name} share no {ia['unit']} in chapter {chapter} (e.g. {A.name}: "
                    f"{', '.join(map(str, ua[key].head(3)))}; {B.name}: {', '.join(map(str, ub[key].head(3)))}); "
                    "give both models the same side data (the same ids)")
            for metric in [m for m in ia["means"] if m in ib["means"]]:
                jobs.append((A, B, chapter, metric, ia, ua, ub, None))
            for metric in [m for m in ia.get("aggregates", ()) if m in ib.get("aggregates", ())]:
                jobs.append((A, B, chapter, metric, ia, ua, ub, scorer_of(chapter).aggregate(metric)))
    rows = []
    for A, B, chapter, metric, ia, ua, ub, aggregate in follow(jobs, desc="comparing metrics", total=len(jobs)):
        spec = A.records[chapter]["metrics"].get(metric, {})
        direction = spec.get("direction", "higher")
        result, differences = compare_units(ua, ub, key=ia["key"], metric=metric, direction=direction,
                                            aggregate=aggregate, level=level, seed=seed, units=ia["unit"])
        if result.n < 2:
            continue
        rows.append(dict(a=A.name, b=B.name, chapter=chapter, metric=metric, label=spec.get("label") or metric,
                         direction=direction, unit=ia["unit"], units_a=len(ua), units_b=len(ub), result=result,
                         differences=differences, same_plan=_same_plan(ia, B.records[chapter]["info"]["units"])))
    return _short_labels(rows)


def scorer_of(chapter: str):
    """The task scorer a chapter declares (its whole-table aggregates pair two reports' unit tables)."""
    from ..chapters.registry import chapter as declared

    scorer = declared(chapter).scorer
    if scorer is None:
        raise InputError(f"compare: chapter {chapter} records whole-table metrics but declares no scorer")
    return scorer


def _same_plan(ia: dict, ib: dict) -> bool | None:
    """Whether both reports scored the chapter on the same plan (folds, negatives, samples); None when unknown."""
    return ia["plan"] == ib["plan"] if ia.get("plan") and ib.get("plan") else None


def _short_labels(rows: list[dict]) -> list[dict]:
    """Labels without their protocol tag (``MRR [raw, realistic ties, …]`` → ``MRR``) unless two metrics of a
    chapter would then read the same (drift's ``Mean drift 1 − cos [2024-02]`` keeps its snapshot)."""
    plain = [_plain_label(r["label"]) for r in rows]
    seen: dict = {}
    for r, p in zip(rows, plain):
        seen.setdefault((r["a"], r["b"], r["chapter"], p), set()).add(r["metric"])
    for r, p in zip(rows, plain):
        if len(seen[(r["a"], r["b"], r["chapter"], p)]) == 1:
            r["label"] = p
    return rows


def _plain_label(label: str) -> str:
    """A metric label without its protocol tag (``MRR [raw, realistic ties, …]`` → ``MRR``)."""
    return label.split(" [")[0]


def rank_tables(reports: list[ModelReport], table: pd.DataFrame, *, level: float = 0.95, seed: int = 0) -> dict:
    """For three or more models: per chapter × metric, each model's rank with its bootstrap interval over the
    units every model shares."""
    if len(reports) < 3 or not len(table):
        return {}
    out = {}
    for (chapter, metric), part in table.groupby(["chapter", "metric"], sort=False):
        if any(chapter not in r.units for r in reports):
            continue
        key = reports[0].records[chapter]["info"]["units"]["key"]
        frames = [r.units[chapter].drop_duplicates(key).set_index(key) for r in reports]
        common = frames[0].index
        for f in frames[1:]:
            common = common.intersection(f.index)
        if len(common) < 2:
            continue
        direction = part["direction"].iloc[0]
        if all(metric in f for f in frames):  # a mean over units
            ranks = paired.rank_intervals({r.name: f.loc[common, metric].to_numpy(float)
                                           for r, f in zip(reports, frames)}, direction=direction, level=level,
                                          seed=seed)
        else:  # a whole-table metric: the scorer's aggregate on every joint draw of the units
            agg = scorer_of(chapter).aggregate(metric)
            ranks = paired.rank_intervals_of({r.name: f.loc[common].reset_index() for r, f in zip(reports, frames)},
                                             agg.fn, boot=agg.boot, direction=direction, level=level, seed=seed)
        out[f"{chapter}.{metric}"] = ranks
    return out


def compare_reports(reports: list[ModelReport], *, correction: str = "holm", effects=None,
                    level: float = 0.95, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """The comparison table (:func:`embeval_report.metrics.paired.compare_table`; ``effects``: the parsed
    ``--mde``, see :mod:`embeval_report.metrics.effects`) and the rank intervals."""
    table = paired.compare_table(paired_rows(reports, level=level, seed=seed), correction=correction,
                                 effects=effects)
    return table, rank_tables(reports, table, level=level, seed=seed)
