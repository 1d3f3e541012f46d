"""``embeval-report compare``: the same chapters on several models, their per-unit results paired.

Each source is a manifest (or vectors file), run into ``OUT/models/<name>/`` with the same settings, or an
earlier report folder, reused as it is. Every chapter that recorded per-unit values
(:meth:`~embeval_report.report.recorder.Recorder.units`: queries, test edges, entities, users) in two
reports is paired on the unit ids both share, metric by metric, and compared with
:func:`embeval_report.metrics.paired.paired_comparison`; the p-values of every pair of models × metric are
adjusted together. ``OUT/comparison.json`` and ``OUT/comparison.csv`` hold the numbers; the comparison
notebook (``notebooks/compare/comparison.ipynb``) shows them, rendered into ``OUT/report.html``/``.pdf``.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pandas as pd

from .. import __version__
from ..errors import InputError
from ..metrics import paired
from ..resources import notebooks_dir
from ..settings import ChapterSettings
from .outdir import OutputFolder
from .recorder import read_results

COMPARISON_FILE = "comparison.json"
TABLE_FILE = "comparison.csv"
NOTEBOOK = "compare/comparison.ipynb"


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
            info = doc.get("info", {}).get("units")
            path = folder / "results" / "units" / f"{chapter}.csv"
            if info and path.exists():
                units[chapter] = pd.read_csv(path, dtype={info["key"]: str}, keep_default_na=False,
                                             na_values={m: ["", "nan", "NaN"] for m in info["means"]})
        return cls(name or run.get("name") or folder.name, folder, run, records, units)


def is_report_folder(path) -> bool:
    """Whether ``path`` is an earlier report (a folder with run.json and results/)."""
    p = Path(path)
    return p.is_dir() and (p / "run.json").exists() and (p / "results").is_dir()


def model_names(sources, names=None) -> list[str]:
    """Display names: ``names`` when given (one per source, unique), else the file or folder stems, made unique."""
    if names:
        if len(names) != len(sources):
            raise InputError(f"--names: {len(names)} name(s) for {len(sources)} model(s); give one per model")
        if len(set(names)) != len(names):
            raise InputError(f"--names: names must be unique, got {', '.join(names)}")
        bad = [n for n in names if not n or "/" in n or n.startswith(".")]
        if bad:
            raise InputError(f"--names: {bad[0]!r} cannot name a folder; use letters, digits, '-' or '_'")
        return list(names)
    out = []
    for s in sources:
        stem = Path(s).stem if not Path(s).is_dir() else Path(s).name
        name, i = stem, 2
        while name in out:
            name, i = f"{stem}-{i}", i + 1
        out.append(name)
    return out


def paired_rows(reports: list[ModelReport], *, level: float = 0.95, seed: int = 0) -> list[dict]:
    """One row per (A, B) pair of models × chapter × metric both recorded per unit (see the module docstring)."""
    rows = []
    for A, B in combinations(reports, 2):
        for chapter in [c for c in A.units if c in B.units]:
            ia, ib = A.records[chapter]["info"]["units"], B.records[chapter]["info"]["units"]
            if ia["key"] != ib["key"] or ia["unit"] != ib["unit"]:
                continue
            key = ia["key"]
            ua, ub = A.units[chapter].drop_duplicates(key), B.units[chapter].drop_duplicates(key)
            joined = ua.merge(ub, on=key, suffixes=("_a", "_b"))
            if not len(joined):
                raise InputError(
                    f"compare: {A.name} and {B.name} share no {ia['unit']} in chapter {chapter} (e.g. {A.name}: "
                    f"{', '.join(map(str, ua[key].head(3)))}; {B.name}: {', '.join(map(str, ub[key].head(3)))}); "
                    "give both models the same side data (the same ids)")
            for metric in [m for m in ia["means"] if m in ib["means"]]:
                spec = A.records[chapter]["metrics"].get(metric, {})
                direction = spec.get("direction", "higher")
                result = paired.paired_comparison(joined[f"{metric}_a"], joined[f"{metric}_b"], direction=direction,
                                                  level=level, seed=seed, units=ia["unit"])
                if result.n < 2:
                    continue
                rows.append(dict(a=A.name, b=B.name, chapter=chapter, metric=metric,
                                 label=_plain_label(spec.get("label") or metric), direction=direction, unit=ia["unit"],
                                 units_a=len(ua), units_b=len(ub), result=result))
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
        frames = [r.units[chapter].drop_duplicates(key).set_index(key)[metric] for r in reports]
        common = frames[0].index
        for f in frames[1:]:
            common = common.intersection(f.index)
        if len(common) < 2:
            continue
        ranks = paired.rank_intervals({r.name: f.loc[common].to_numpy(float) for r, f in zip(reports, frames)},
                                      direction=part["direction"].iloc[0], level=level, seed=seed)
        out[f"{chapter}.{metric}"] = ranks
    return out


def compare_reports(reports: list[ModelReport], *, correction: str = "holm", effect: float = 0.01,
                    level: float = 0.95, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """The comparison table (:func:`embeval_report.metrics.paired.compare_table`) and the rank intervals."""
    table = paired.compare_table(paired_rows(reports, level=level, seed=seed), correction=correction, effect=effect)
    return table, rank_tables(reports, table, level=level, seed=seed)


def comparisons_document(table: pd.DataFrame, n_models: int) -> dict:
    """``metrics.json``'s ``comparisons``: per metric (its name, or ``chapter.metric`` where two chapters share
    a name; prefixed ``"B vs A: "`` with three or more models) ``a``, ``b``, ``difference``, ``ci_low``,
    ``ci_high``, ``p_value`` (the randomisation test's), ``p_adjusted`` and ``verdict``, with the other tests."""
    out = {}
    clash = table.groupby("metric")["chapter"].nunique()
    for r in table.itertuples():
        name = r.metric if clash[r.metric] == 1 else f"{r.chapter}.{r.metric}"
        if n_models > 2:
            name = f"{r.b} vs {r.a}: {name}"
        out[name] = {k: _json_safe(v) for k, v in dict(
            a=r.a, b=r.b, chapter=r.chapter, metric=r.metric, direction=r.direction, n=r.n, mean_a=r.mean_a,
            mean_b=r.mean_b, difference=r.diff, ci_low=r.ci_low, ci_high=r.ci_high, p_value=r.p_randomisation,
            p_adjusted=r.p_adjusted, p_t=r.p_t, p_wilcoxon=r.p_wilcoxon, d_z=r.d_z, wins=r.wins, ties=r.ties,
            losses=r.losses, mde=r.mde, verdict=r.verdict).items()}
    return out


def regressions(table: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The comparisons in which another model is significantly worse than ``baseline`` (the first model)."""
    if not len(table):
        return table
    return table[(table["a"] == baseline) & (table["verdict"] == "A better")]


def _json_safe(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _json_safe(v.item())
    return v


def write_comparison(folder: Path, reports: list[ModelReport], table: pd.DataFrame, ranks: dict, *,
                     correction: str, effect: float, level: float, seed: int) -> dict:
    """``comparison.json`` and ``comparison.csv`` in ``folder``; returns the JSON document."""
    def where(path: Path) -> str:  # a report run here, inside the comparison folder: relative to it
        return str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path)

    doc = dict(version=__version__, models=[dict(name=r.name, report=where(r.folder), source=r.run.get("source"),
                                                 n=r.run.get("n"), d=r.run.get("d")) for r in reports],
               correction=correction, effect=effect, level=level, seed=seed, alpha=0.05,
               primary_test="paired randomisation (sign-flip) test, two-sided",
               comparisons=[{k: _json_safe(v) for k, v in row.items()} for row in table.to_dict(orient="records")],
               ranks={k: [{c: _json_safe(v) for c, v in r.items()} for r in t.to_dict(orient="records")]
                      for k, t in ranks.items()})
    (folder / COMPARISON_FILE).write_text(json.dumps(doc, indent=2))
    metrics = dict(version=__version__, seed=seed, correction=correction, effect=effect,
                   models={r.name: _model_metrics(r) for r in reports},
                   comparisons=comparisons_document(table, len(reports)) if len(table) else {})
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2))
    table.to_csv(folder / TABLE_FILE, index=False)
    return doc


def _model_metrics(r: ModelReport) -> dict:
    """A model's ``metrics.json`` chapters (from its report folder)."""
    try:
        return json.loads((r.folder / "metrics.json").read_text())["chapters"]
    except (OSError, ValueError, KeyError):
        return {}


def run_compare(sources, out, *, names=None, settings: ChapterSettings | None = None, chapters=None,
                correction: str = "holm", renderer: str = "auto", pdf_engine: str = "typst", formats=("html", "pdf"),
                title: str | None = None, timeout: int | None = None, force: bool = False, jobs: int = 1,
                embedding_cache=None, progress=print) -> tuple[Path, pd.DataFrame, dict]:
    """Run (or reuse) a report per model, pair and compare them, and write the comparison report at ``out``.

    Returns ``(out, table, files)``. Raises :class:`InputError` for fewer than two models, bad names or a folder
    that may not be written, before anything runs.
    """
    import papermill as pm

    from .render import render_report
    from .runner import KERNEL_ARGUMENTS, run_report

    if len(sources) < 2:
        raise InputError("compare: give at least two models (manifests, vectors files or earlier report folders)")
    if correction not in paired.CORRECTIONS:
        raise InputError(f"--correction: expected one of {', '.join(paired.CORRECTIONS)}, got {correction!r}")
    settings = settings or ChapterSettings.resolve()
    for s in sources:
        if not Path(s).exists():
            raise InputError(f"compare: {s}: no such file or folder")
    labels = model_names(sources, names)
    target = OutputFolder.check(out, force=force)
    staging = target.staging()
    try:
        reports = []
        for source, name in zip(sources, labels):
            if is_report_folder(source):
                progress(f"{name}: reusing the report in {source}")
                reports.append(ModelReport.open(Path(source).resolve(), name))
                continue
            progress(f"{name}: running the report for {source}")
            folder = staging / "models" / name
            run_report(source, folder, settings=settings, chapters=chapters, renderer=renderer,
                       pdf_engine=pdf_engine, formats=formats, timeout=timeout, jobs=jobs,
                       embedding_cache=embedding_cache)
            reports.append(ModelReport.open(folder, name))
        effect = float(settings.option("mde"))
        table, ranks = compare_reports(reports, correction=correction, effect=effect, level=settings.level,
                                       seed=settings.seed)
        write_comparison(staging, reports, table, ranks, correction=correction, effect=effect, level=settings.level,
                         seed=settings.seed)
        title = title or f"Model comparison: {' vs '.join(labels)}"
        run_info = dict(title=title, name=" vs ".join(labels), source=", ".join(str(s) for s in sources),
                        seed=settings.seed, device=settings.device, version=__version__,
                        generated=_dt.datetime.now().astimezone().isoformat(timespec="seconds"), models=labels,
                        chapters=[dict(name="comparison", title="Model comparison", order=1, status="ok", reason="")])
        (staging / "chapters").mkdir()
        target_nb = staging / "chapters" / "01_comparison.ipynb"
        pm.execute_notebook(str(notebooks_dir() / NOTEBOOK), str(target_nb), parameters={"comparison_dir": ".."},
                            kernel_name="python3", progress_bar=False, cwd=str(target_nb.parent),
                            execution_timeout=timeout, extra_arguments=KERNEL_ARGUMENTS)
        files_written = sorted(p.name for p in staging.iterdir() if not p.name.startswith(".")) + ["run.json"]
        (staging / "run.json").write_text(json.dumps(dict(run_info, files=sorted(set(files_written))), indent=2))
        files = {}
        for fmt in formats:
            files.update(render_report(staging, title=title, formats=(fmt,), renderer=renderer, pdf_engine=pdf_engine))
        target.commit(staging)
    except BaseException as exc:
        target.abandon(staging, exc)  # removes staging; a write fault becomes one line (OutputError)
        raise
    return target.path, table, {k: target.path / Path(v).name for k, v in files.items()}
