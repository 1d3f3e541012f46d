"""``embeval-report compare``: the same chapters on several models, their per-unit results paired.

Each source is a manifest (or vectors file), run into ``OUT/models/<name>/`` with the same settings, or an
earlier report folder, reused as it is; a model's name is ``--names``, its manifest's ``name:``, or its file or
folder name (:func:`model_names`). Every chapter that recorded per-unit values
(:meth:`~embeval_report.chapters.recorder.Recorder.units`: queries, test edges, entities, users) in two
reports is paired on the unit ids both share, metric by metric, and compared with
:func:`embeval_report.metrics.paired.paired_comparison`; :func:`embeval_report.metrics.paired.compare_table`
adjusts the p-values of every pair of models × metric together and decides each verdict against the metric's
effect that matters (``--mde``, :mod:`embeval_report.metrics.effects`). ``OUT/comparison.json`` and
``OUT/comparison.csv`` hold the numbers; the comparison notebook (``notebooks/compare/comparison.ipynb``) shows
them, rendered into ``OUT/report.html``/``.pdf``; :func:`terminal_lines` is what the command prints.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import re
from pathlib import Path

import pandas as pd

from ..version import __version__
from ..errors import InputError
from ..metrics import paired
from ..metrics.paired import rollup
from ..present.format import MARK, MARK_NOTE, decimals, scorecard_value
from ..metrics.effects import Effects
from ..resources import notebooks_dir
from ..chapters.registry import discover, resolve_settings
from ..settings import ChapterSettings
from ..safe_files import portable_path, resolve_recorded
from .earlier import mark
from .outdir import OutputFolder
from .render.pdf import PDF_TIMEOUT, PdfTimeout
from .pairing import ModelReport, is_report_folder, compare_reports
from .model_swap import swap_lines, swap_sections
from ..chapters.recorder import json_safe, json_text

COMPARISON_FILE = "comparison.json"
TABLE_FILE = "comparison.csv"
NOTEBOOK = "compare/comparison.ipynb"


def model_names(sources, names=None) -> list[str]:
    """Display names: ``names`` when given (one per source, unique); else each manifest's ``name:`` (an earlier
    report's: from its run.json), or the file's or folder's stem, where two sources share a stem their folders'
    names, made unique."""
    if names:
        if len(names) != len(sources):
            raise InputError(f"--names: {len(names)} name(s) for {len(sources)} model(s); give one per model")
        if len(set(names)) != len(names):
            raise InputError(f"--names: names must be unique, got {', '.join(names)}")
        bad = [n for n in names if not n or "/" in n or n.startswith(".")]
        if bad:
            raise InputError(f"--names: {bad[0]!r} cannot name a folder; use letters, digits, '-' or '_'")
        return list(names)
    paths = [Path(s) for s in sources]
    stems = [p.name if p.is_dir() else p.stem for p in paths]
    out = []
    for p, stem in zip(paths, stems):
        given = _declared_name(p)
        if not given and stems.count(stem) > 1 and p.resolve().parent.name:
            given = p.resolve().parent.name if not p.is_dir() else stem
        base = given or stem
        name, i = base, 2
        while name in out:
            name, i = f"{base} ({i})", i + 1
        out.append(name)
    return out


def _declared_name(path: Path) -> str:
    """The name a manifest (``name:``) or an earlier report folder (run.json's ``name``) declares, or ""."""
    from ..io.limits import load_yaml

    try:
        if is_report_folder(path):  # its manifest's name, unless that was the manifest's file name by default
            run = json.loads((path / "run.json").read_text())
            name = run.get("name")
            if name and run.get("source") and str(name) == Path(str(run["source"])).stem:
                return ""
        elif path.suffix.lower() in (".yaml", ".yml") and path.is_file():
            doc = load_yaml(path.read_text(), path.name)
            name = doc.get("name") if isinstance(doc, dict) else None
        else:
            return ""
    except (OSError, ValueError):  # InputError too
        return ""  # an unreadable manifest fails with its own message when it is run
    return str(name).strip() if isinstance(name, (str, int, float)) else ""


def folder_name(name: str) -> str:
    """A model's folder under ``models/``: its name with anything but letters, digits, '.', '-', '_' as '-'."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return slug or "model"


def comparisons_document(table: pd.DataFrame, n_models: int) -> dict:
    """``metrics.json``'s ``comparisons``: per metric (its name, or ``chapter.metric`` where two chapters share
    a name; prefixed ``"B vs A: "`` with three or more models) ``a``, ``b``, ``difference``, ``ci_low``,
    ``ci_high`` (marginal), ``simultaneous_low``/``_high`` (the interval the verdict uses), ``effect`` (E),
    ``p_value`` (the randomisation test's), ``p_adjusted``, ``p_equivalence`` (TOST), ``mde`` and ``verdict``,
    with the other tests."""
    out = {}
    clash = table.groupby("metric")["chapter"].nunique()
    for r in table.itertuples():
        name = r.metric if clash[r.metric] == 1 else f"{r.chapter}.{r.metric}"
        if n_models > 2:
            name = f"{r.b} vs {r.a}: {name}"
        out[name] = {k: json_safe(v) for k, v in dict(
            a=r.a, b=r.b, chapter=r.chapter, metric=r.metric, direction=r.direction, n=r.n, mean_a=r.mean_a,
            mean_b=r.mean_b, difference=r.diff, ci_low=r.ci_low, ci_high=r.ci_high, p_value=r.p_randomisation,
            p_adjusted=r.p_adjusted, p_t=r.p_t, p_wilcoxon=r.p_wilcoxon, d_z=r.d_z, wins=r.wins, ties=r.ties,
            losses=r.losses, effect=r.effect, simultaneous_low=r.sim_low, simultaneous_high=r.sim_high,
            simultaneous_level=r.sim_level, p_equivalence=r.p_equivalence, mde=r.mde, verdict=r.verdict).items()}
    return out


def regressions(table: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The comparisons in which another model is significantly worse than ``baseline`` (the first model)."""
    if not len(table):
        return table
    return table[(table["a"] == baseline) & (table["verdict"] == "A better")]


def regression_names(worse: pd.DataFrame, n_models: int) -> list[str]:
    """``chapter.metric`` of each regression (``B: chapter.metric`` with three or more models), in table order."""
    names = [f"{r.chapter}.{r.metric}" if n_models <= 2 else f"{r.b}: {r.chapter}.{r.metric}"
             for r in worse.itertuples()]
    return list(dict.fromkeys(names))


def p_text(p) -> str:
    """A p-value for the terminal: 3 significant digits, "< 1e-300" where it underflows, "–" when missing."""
    if p is None or not math.isfinite(float(p)):
        return "–"
    return "< 1e-300" if p < 1e-300 else f"{p:.3g}"


def verdict_words(verdict: str, a: str, b: str) -> str:
    """A verdict with the models' names (``"B better"`` → ``"<b> better"``)."""
    return {"B better": f"{b} better", "A better": f"{a} better"}.get(verdict, verdict)


def side_by_side(reports: list[ModelReport]) -> pd.DataFrame:
    """Every metric of a content chapter each model recorded (its own value over its own set, not paired), one row
    per chapter × metric in the first model's order: ``chapter``, ``metric``, ``label``, ``direction``, then per model
    ``<name>`` (the value), ``<name> ci_low``, ``<name> ci_high``, ``<name> bias_corrected`` (where the interval
    is a basic bootstrap one that excludes the value) and ``<name> verdict``."""
    names = [r.name for r in reports]
    columns = ["chapter", "metric", "label", "direction"] + [f"{n}{s}" for n in names for s in SIDE_SUFFIXES]
    content = {c.name for c in discover() if c.stage == 0}  # not the rigor chapter's counts of tests
    rows = []
    for chapter, doc in reports[0].records.items():
        if chapter not in content:
            continue
        for metric, m in (doc.get("metrics") or {}).items():
            mine = [r.records.get(chapter, {}).get("metrics", {}).get(metric) for r in reports]
            if any(x is None for x in mine):
                continue
            row = {"chapter": chapter, "metric": metric, "label": m.get("label") or metric,
                   "direction": m.get("direction")}
            for n, x in zip(names, mine):
                row.update({f"{n}{s}": x.get(s.strip() or "value") for s in SIDE_SUFFIXES})
            rows.append(row)
    return pd.DataFrame(rows, columns=columns)


#: the per-model columns of :func:`side_by_side`, after the model's name
SIDE_SUFFIXES = ("", " ci_low", " ci_high", " bias_corrected", " verdict")


def read_side_by_side(folder) -> pd.DataFrame:
    """:func:`side_by_side` as ``comparison.json`` stored it (an empty table for a comparison made before)."""
    doc = json.loads((Path(folder) / COMPARISON_FILE).read_text())
    names = [m["name"] for m in doc.get("models", [])]
    columns = ["chapter", "metric", "label", "direction"] + [f"{n}{s}" for n in names for s in SIDE_SUFFIXES]
    return pd.DataFrame(doc.get("side_by_side") or [], columns=columns)


def read_swap_lines(folder) -> list[str]:
    """The model swap sections of ``comparison.json`` as the terminal prints them (none for an older comparison)."""
    doc = json.loads((Path(folder) / COMPARISON_FILE).read_text())
    return swap_lines(doc.get("swap") or [])


def no_pairs_line(names: list[str]) -> str:
    """What ``compare`` says when the models share no per-unit chapter."""
    return (f"{' and '.join(names) if len(names) == 2 else ', '.join(names)} share no per-unit chapter (queries, "
            "test edges, entities or users measured on both), so no difference is tested; their metrics are "
            "shown side by side (run a task chapter, e.g. retrieval, node classification, clustering, link prediction "
            "or semantic similarity, on the same side data to test differences)")


def side_by_side_lines(side: pd.DataFrame, names: list[str]) -> list[str]:
    """One line per metric of :func:`side_by_side`: ``chapter.metric: a 0.512 [0.50, 0.52] · b 0.498 [...]``."""
    lines = []
    for _, r in side.iterrows():
        cells = [f"{n} " + scorecard_value({k: _num(r[f"{n}{s}"]) for k, s in zip(("value", "ci_low", "ci_high",
                                                                                  "bias_corrected"), SIDE_SUFFIXES)})
                 for n in names]
        lines.append(f"{r['chapter']}.{r['metric']}: " + " · ".join(cells))
    return lines


def _num(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def terminal_lines(table: pd.DataFrame, side: pd.DataFrame | None = None, names: list[str] | None = None) -> list[str]:
    """What ``compare`` prints: per pair of models, the interval level, the roll-up per chapter, and one line per
    metric with B − A, its interval (the one the verdict uses), E, the adjusted p and the verdict in names. Without
    any paired comparison: one line saying so, then ``side`` (:func:`side_by_side`) line by line."""
    if not len(table):
        names = names or []
        side = side if side is not None else pd.DataFrame()
        lines = [f"  {line}" for line in side_by_side_lines(side, names)] or ["  no metric was recorded by every model"]
        return [no_pairs_line(names)] + lines + ([f"  {MARK_NOTE}"] if any(MARK in line for line in lines) else [])
    lines = []
    for (a, b), part in table.groupby(["a", "b"], sort=False):
        r0 = part.iloc[0]
        lines.append(f"{b} (B) vs {a} (A): B − A with {100 * r0.sim_level:.4g} % {r0.interval} intervals"
                     + (f" (Bonferroni over {len(table)})" if r0.interval == "simultaneous" else ""))
        lines += [f"  {line.split(', ', 1)[1]}" for line in rollup_lines(part)]
        for r in part.itertuples():
            k = decimals(r.effect)
            lines.append(f"  {r.chapter}.{r.metric}: {r.diff:+.{k}f} [{r.sim_low:+.{k}f}, {r.sim_high:+.{k}f}], "
                         f"E {r.effect:.2g}, p adj {p_text(r.p_adjusted)}, {units_text(r)}"
                         f"{'' if _plan_kept(r) else ' (different plans)'}: {verdict_words(r.verdict, a, b)}")
        other = list(dict.fromkeys(r.chapter for r in part.itertuples() if not _plan_kept(r)))
        if other:
            lines.append(f"  warning: the two reports scored {', '.join(other)} on different plans (folds, negatives, "
                         "samples, seeds); run both with the same side data and --seed to pair them on one plan")
    return lines


def units_text(row) -> str:
    """``"80 queries"``: a comparison's shared units and what they are."""
    n = getattr(row, "n", None) if not isinstance(row, dict) else row.get("n")
    unit = (getattr(row, "unit", None) if not isinstance(row, dict) else row.get("unit")) or "units"
    return f"{int(n):,} {unit}" if n is not None and n == n else unit


def _plan_kept(row) -> bool:
    """Whether both reports scored the row's chapter on the same plan (unknown counts as kept)."""
    same = getattr(row, "same_plan", None)
    return same is None or same != same or bool(same)  # None/NaN: unknown


def rollup_lines(table: pd.DataFrame) -> list[str]:
    """``"b vs a, retrieval: a better on 4, b better on 0, no difference 3, underpowered 2, inconclusive 3"``."""
    lines = []
    for r in rollup(table).itertuples(index=False):
        c = dict(zip(paired.VERDICTS, r[3:]))
        lines.append(f"{r.b} vs {r.a}, {r.chapter}: {r.b} better on {c['B better']}, {r.a} better on "
                     f"{c['A better']}, no difference {c['no difference larger than E']}, underpowered "
                     f"{c['underpowered']}, inconclusive {c['inconclusive']}")
    return lines


def write_comparison(folder: Path, reports: list[ModelReport], table: pd.DataFrame, ranks: dict, *,
                     correction: str, effect: str, level: float, seed: int, swap: list | None = None) -> dict:
    """``comparison.json`` and ``comparison.csv`` in ``folder``; returns the JSON document (``effect``: the
    ``--mde`` text; each comparison holds its own ``effect`` E and ``effect_rule``; ``swap``: the model swap
    sections, :func:`~.model_swap.swap_sections`)."""
    def source(r: ModelReport) -> str | None:  # as the model's run.json recorded it, relative to this folder
        return portable_path(resolve_recorded(r.run["source"], r.folder), folder) if r.run.get("source") else None

    doc = dict(version=__version__, models=[dict(name=r.name, report=portable_path(r.folder, folder), source=source(r),
                                                 n=r.run.get("n"), d=r.run.get("d")) for r in reports],
               correction=correction, effect=effect, level=level, seed=seed, alpha=0.05,
               primary_test="paired randomisation (sign-flip) test, two-sided",
               comparisons=[{k: json_safe(v) for k, v in row.items()} for row in table.to_dict(orient="records")],
               ranks={k: [{c: json_safe(v) for c, v in r.items()} for r in t.to_dict(orient="records")]
                      for k, t in ranks.items()},
               side_by_side=[{k: json_safe(v) for k, v in row.items()}
                             for row in side_by_side(reports).to_dict(orient="records")],
               swap=json_safe(swap or []))
    (folder / COMPARISON_FILE).write_text(json_text(doc, indent=2))
    metrics = dict(version=__version__, seed=seed, correction=correction, effect=effect,
                   models={r.name: _model_metrics(r) for r in reports},
                   comparisons=comparisons_document(table, len(reports)) if len(table) else {})
    (folder / "metrics.json").write_text(json_text(metrics, indent=2))
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
                embedding_cache=None, progress=print, record_paths: bool = False,
                pdf_timeout: float | None = PDF_TIMEOUT) -> tuple[Path, pd.DataFrame, dict]:
    """Run (or reuse) a report per model, pair and compare them, and write the comparison report at ``out``
    (``record_paths``: every run.json records absolute paths, see :func:`~.runner.run_report`).

    Returns ``(out, table, files)``. Raises :class:`InputError` for fewer than two models, bad names or a folder
    that may not be written, before anything runs.
    """
    import papermill as pm

    from .render import render_report
    from .execution import KERNEL_ARGUMENTS, WarmKernel, publish_notebook
    from .runner import run_report

    if len(sources) < 2:
        raise InputError("compare: give at least two models (manifests, vectors files or earlier report folders)")
    if correction not in paired.CORRECTIONS:
        raise InputError(f"--correction: expected one of {', '.join(paired.CORRECTIONS)}, got {correction!r}")
    settings = settings or resolve_settings()
    effects = Effects.parse(settings.option("mde"))
    for s in sources:
        if not Path(s).exists():
            raise InputError(f"compare: {s}: no such file or folder")
    labels = model_names(sources, names)
    target = OutputFolder.check(out, force=force)
    staging = target.staging()
    try:
        reports, folders = [], []
        for source, name in zip(sources, labels):
            if is_report_folder(source):
                progress(f"{name}: reusing the report in {source}")
                reports.append(ModelReport.open(Path(source).resolve(), name))
                continue
            progress(f"{name}: running the report for {source}")
            slug, i = folder_name(name), 2
            while slug in folders:
                slug, i = f"{folder_name(name)}-{i}", i + 1
            folders.append(slug)
            folder = staging / "models" / slug
            run_report(source, folder, settings=settings, chapters=chapters, renderer=renderer,
                       pdf_engine=pdf_engine, formats=formats, timeout=timeout, jobs=jobs,
                       embedding_cache=embedding_cache, record_paths=record_paths, pdf_timeout=pdf_timeout)
            reports.append(ModelReport.open(folder, name))
        progress("comparing the models unit by unit")
        table, ranks = compare_reports(reports, correction=correction, effects=effects, level=settings.level,
                                       seed=settings.seed)
        swap = swap_sections(reports, seed=settings.seed, device=settings.device, progress=progress)
        for entry in effects.unmatched(f"{c}.{m}" for c, m in zip(table.get("chapter", []), table.get("metric", []))):
            progress(f"warning: --mde {entry}=... names no metric compared here")
        write_comparison(staging, reports, table, ranks, correction=correction, effect=effects.canonical(),
                         level=settings.level, seed=settings.seed, swap=swap)
        title = title or f"Model comparison: {' vs '.join(labels)}"
        shown = [str(Path(s).resolve()) if record_paths else portable_path(s, target.path) for s in sources]
        run_info = dict(title=title, name=" vs ".join(labels), source=", ".join(shown),
                        seed=settings.seed, device=settings.device, version=__version__,
                        generated=_dt.datetime.now().astimezone().isoformat(timespec="seconds"), models=labels,
                        chapters=[dict(name="comparison", title="Model comparison", order=1, status="ok", reason="")])
        (staging / "chapters").mkdir()
        progress("writing the comparison chapter")
        target_nb = staging / "chapters" / "01_comparison.ipynb"
        kernel = WarmKernel(target_nb.parent)  # its sockets cannot be taken by another process (kernel_sockets)
        try:
            pm.execute_notebook(str(notebooks_dir() / NOTEBOOK), str(target_nb), parameters={"comparison_dir": ".."},
                                kernel_name="python3", progress_bar=False, cwd=str(target_nb.parent),
                                execution_timeout=timeout, extra_arguments=KERNEL_ARGUMENTS, km=kernel.km)
        finally:
            kernel.release()
        publish_notebook(target_nb, target_nb, staging)  # no path of this machine in it
        (staging / "run.json").write_text(json_text(mark(run_info, staging), indent=2))
        files = {}
        for fmt in formats:
            progress(f"rendering {fmt}")
            try:
                files.update(render_report(staging, title=title, formats=(fmt,), renderer=renderer,
                                           pdf_engine=pdf_engine, pdf_timeout=pdf_timeout))
            except PdfTimeout as exc:  # the other formats are written
                progress(f"warning: {exc}")
        (staging / "run.json").write_text(json_text(mark(run_info, staging), indent=2))  # and the rendered files
        target.commit(staging)
    except BaseException as exc:
        target.abandon(staging, exc)  # removes staging; a write fault becomes one line (OutputError)
        raise
    return target.path, table, {k: target.path / Path(v).name for k, v in files.items()}
