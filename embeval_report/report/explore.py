"""Exploring a report folder: ``explore.ipynb`` (written into every report) and the helpers it calls.

The notebook shows; these functions compute. :class:`Exploration` opens a report folder and gives

* the results as tables: :attr:`~ReportFolder.metrics` (one row per metric of ``metrics.json``, with its label),
  :attr:`~ReportFolder.findings` and :attr:`~ReportFolder.status` (read from ``metrics.json`` or
  ``results/findings.json`` when the run wrote them; never derived here), :meth:`~Exploration.units` (the
  per-unit tables ``results/units/<chapter>.csv``: one row per query, test edge, entity or user);
* :meth:`~Exploration.worst`: the rows behind a mean, worst first (the metric's direction decides);
* :meth:`~Exploration.neighbours`: an id's nearest neighbours by cosine, the lists of the run's shared graph
  (exact, ties to the lower row), recomputed for that one id with :func:`embeval_report.kernels.knn`
  because the runner removes its graph cache when the report is written;
* :meth:`~Exploration.evidence`: a finding's fields, its evidence and the metrics it rests on;
* :meth:`~Exploration.scatter`: the set's first two principal components (scikit-learn's PCA), coloured by a
  metadata column.

The set is read again from the run's ``source``: the user's own files, or the copy inside the report (the
demo's ``demo-data/``, a model run's or an array's ``embeddings/``), found there after the folder moved.
"""
from __future__ import annotations

import html
import json
import os
import shutil
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from ..resources import EXPLORE_NOTEBOOK as NOTEBOOK
from ..resources import explore_template
from ..safe_files import replace_with, resolve_recorded
#: chapters whose units are a task's (queries, users, test edges, entities of a labelled task): :meth:`worst`
#: shows the first of them by default
TASKS = ("retrieval", "recommendation", "link_prediction", "temporal_link_prediction", "node_classification",
         "clustering", "anomaly")
#: text columns (labels, groups) :meth:`worst` shows beside the unit id and the metric
WORST_TEXT_COLUMNS = 4
#: the address explore listens on by default (this machine only), and the ones that mean every interface
LOOPBACK = "127.0.0.1"
ANY_ADDRESS = ("0.0.0.0", "::", "")
#: the columns of :attr:`ReportFolder.metrics`
METRIC_COLUMNS = ["chapter", "name", "value", "ci_low", "ci_high", "verdict", "direction", "label", "reference",
                  "slice", "ci_method", "n", "outside_ci", "bias_corrected", "citations"]
#: the columns of :attr:`ReportFolder.findings` (the findings schema of ``metrics.json``)
FINDING_COLUMNS = ["severity", "category", "chapter", "title", "sentence", "metrics", "evidence", "section", "rule",
                   "effect"]
#: findings shown in the decision block
TOP_FINDINGS = 5
#: rows drawn for :meth:`Exploration.scatter` by default
SCATTER_ROWS = 5000
#: most colour levels of a categorical column in :meth:`Exploration.scatter` (the rest: "other")
SCATTER_LEVELS = 10


def write_notebook(folder) -> Path:
    """Copy the exploration notebook's template into a report folder (``folder/explore.ipynb``)."""
    target = Path(folder) / NOTEBOOK
    return replace_with(target, lambda tmp: shutil.copyfile(explore_template(), tmp), "explore:")


def metrics_table(folder) -> pd.DataFrame:
    """One row per metric of ``folder/metrics.json`` (:data:`METRIC_COLUMNS`), in report order; ``label`` from
    the chapter's ``results/<chapter>.json``; ``slice`` the sub-key of a metric recorded per snapshot, group or run
    (``mean_drift__2024_02``: ``2024_02``), ``outside_ci`` whether the interval excludes the value (then
    ``bias_corrected`` is the better guide), ``n`` the units it is over and ``citations`` its reference as papers
    (a report of an earlier version: from its records where they hold them)."""
    folder = Path(folder)
    doc = _read_json(folder / "metrics.json")
    rows = []
    for chapter, entry in (doc.get("chapters") or {}).items():
        record = _read_json(folder / "results" / f"{chapter}.json", missing={})
        recorded = record.get("metrics", {}) if isinstance(record, dict) else {}
        for name, m in (entry.get("metrics") or {}).items():
            if "citations" not in m:  # metrics.json of an earlier version: the same fields from the records
                from .metrics_file import metric_entry

                m = dict(metric_entry(name, recorded.get(name, {}), {}), **m)
            rows.append(dict(chapter=chapter, name=name, **{k: m.get(k) for k in METRIC_COLUMNS[2:7]},
                             label=recorded.get(name, {}).get("label") or name,
                             **{k: m.get(k) for k in METRIC_COLUMNS[8:]}))
    table = pd.DataFrame(rows, columns=METRIC_COLUMNS)
    for c in ("value", "ci_low", "ci_high", "bias_corrected"):
        table[c] = pd.to_numeric(table[c], errors="coerce").astype(float)
    table["n"] = pd.array(table["n"], dtype="Int64")
    return table


def read_findings(folder) -> tuple[str | None, pd.DataFrame]:
    """``(status, findings)`` as the run recorded them (``metrics.json``, else ``results/findings.json``): the
    status (``"problematic"`` | ``"concerning"`` | ``"healthy"`` | ``"not evaluated"``) and one row per finding,
    worst first; ``None`` and an empty table when the run recorded none."""
    folder = Path(folder)
    for path in (folder / "metrics.json", folder / "results" / "findings.json"):
        doc = _read_json(path, missing={})
        if isinstance(doc, list):
            doc = {"findings": doc}
        if isinstance(doc, dict) and ("findings" in doc or "status" in doc):
            found = [dict(f) for f in doc.get("findings") or [] if isinstance(f, dict)]
            return doc.get("status"), pd.DataFrame(found, columns=FINDING_COLUMNS)
    return None, pd.DataFrame(columns=FINDING_COLUMNS)


def report_source(folder, run: dict | None = None) -> Path:
    """The input a report was made from: ``run.json``'s ``source`` (relative to the report folder, or absolute
    with ``--record-paths`` and in reports of earlier versions), or, when that path is gone and it lay inside the
    report (the demo's data, a model run's embeddings), the same file in ``folder`` (a moved report)."""
    folder = Path(folder)
    run = run if run is not None else _read_json(folder / "run.json")
    source = resolve_recorded(run.get("source") or "", folder)
    if run.get("source") and source.exists():
        return source
    own = set(run.get("files") or ())  # the report's own top-level entries
    parts = source.parts
    for i, part in enumerate(parts):
        if part in own and (folder.joinpath(*parts[i:])).exists():
            return folder.joinpath(*parts[i:])
    raise InputError(f"{folder}: the report's input {source} is gone (run.json, field 'source', relative to the "
                     "report folder unless the run had --record-paths); its set cannot be read again")


def _read_json(path: Path, missing=None):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        if missing is not None:
            return missing
        raise InputError(f"{path.parent}: not an embeval-report folder (no {path.name})") from None
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None


@dataclass(repr=False)
class ReportFolder:
    """A written report: its folder, ``run.json``, the metrics table, the status and the findings."""

    path: Path
    run: dict = field(default_factory=dict)
    metrics: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=METRIC_COLUMNS))
    status: str | None = None
    findings: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FINDING_COLUMNS))

    @classmethod
    def open(cls, folder=".", **extra):
        """Read a report folder (an :class:`InputError` when it is none)."""
        folder = Path(folder).resolve()
        run = _read_json(folder / "run.json")
        status, findings = read_findings(folder)
        return cls(folder, run, metrics_table(folder), status, findings, **extra)

    @property
    def html(self) -> Path | None:
        """``report.html`` when it was rendered."""
        path = self.path / "report.html"
        return path if path.exists() else None

    def decision_html(self) -> str:
        """The decision block: the status badge, the top findings (sentence and number, linked to their section)
        and a link to ``report.html``; without recorded findings, the verdicts that reached concerning or
        worse."""
        from ..present.display import VERDICT_COLORS

        def badge(text, kind):
            color = VERDICT_COLORS.get(str(kind), "#666")
            return (f'<span style="background:{color};color:#fff;padding:0.1em 0.55em;border-radius:0.7em;'
                    f'font-weight:600">{html.escape(str(text))}</span>')

        report = self.html
        href = _href(report) if report else None
        items = []
        if self.status is not None:
            head = f"{badge(self.status, self.status)} {len(self.findings)} finding(s)"
            for f in self.findings.head(TOP_FINDINGS).itertuples():
                number = self._finding_number(f)
                text = html.escape(str(f.sentence or f.title))
                if href and isinstance(f.section, str) and f.section:
                    text = f'<a href="{html.escape(href)}#{html.escape(f.section)}">{text}</a>'
                items.append(f"<li>{badge(f.severity, f.severity)} {text}{f' ({html.escape(number)})' if number else ''}"
                             "</li>")
        else:
            head = "no findings recorded by this run; the verdicts that reached concerning or worse:"
            worst = self.metrics[self.metrics["verdict"].isin(["problematic", "concerning"])]
            worst = worst.assign(_o=worst["verdict"].map({"problematic": 0, "concerning": 1})).sort_values("_o",
                                                                                                        kind="stable")
            for m in worst.head(TOP_FINDINGS).itertuples():
                items.append(f"<li>{badge(m.verdict, m.verdict)} {html.escape(f'{m.chapter}: {m.label}')} "
                             f"({html.escape(_value_text(m.value, m.ci_low, m.ci_high))})</li>")
        title = html.escape(str(self.run.get("title") or self.path.name))
        link = f'<p><a href="{html.escape(href)}">report.html</a> · {html.escape(str(self.path))}</p>' if href else \
            f"<p>{html.escape(str(self.path))} (no report.html)</p>"
        return f"<div><h4>{title}</h4><p>{head}</p><ul>{''.join(items)}</ul>{link}</div>"

    def _repr_html_(self) -> str:
        return self.decision_html()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({str(self.path)!r}, status={self.status!r}, {len(self.metrics)} metrics, "
                f"{len(self.findings)} findings)")

    def _finding_number(self, f) -> str:
        """The number a finding rests on: its evidence's ``value`` [interval], else its first metric's."""
        ev = f.evidence if isinstance(f.evidence, dict) else {}
        if isinstance(ev.get("value"), (int, float)):
            return _value_text(ev["value"], ev.get("ci_low"), ev.get("ci_high"))
        rows = self.named_metrics(f.chapter, f.metrics)
        return _value_text(*rows.iloc[0][["value", "ci_low", "ci_high"]]) if len(rows) else ""

    def named_metrics(self, chapter, names) -> pd.DataFrame:
        """The metrics table's rows that ``names`` name (``metric`` of ``chapter``, or ``chapter.metric``)."""
        names = list(names) if isinstance(names, (list, tuple)) else []
        qualified = self.metrics["chapter"] + "." + self.metrics["name"]
        same_chapter = (self.metrics["chapter"] == chapter) & self.metrics["name"].isin(names)
        return self.metrics[qualified.isin(names) | same_chapter].reset_index(drop=True)


def _value_text(value, lo=None, hi=None) -> str:
    from ..present.format import number

    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "—"
    text = number(value)
    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
        text += f" [{number(lo)}, {number(hi)}]"
    return text


def _href(path: Path) -> str:
    """A link JupyterLab opens: relative to the working folder where the file lies below it, else a file URI."""
    try:
        return Path(os.path.relpath(path, Path.cwd())).as_posix() if path.is_relative_to(Path.cwd()) else path.as_uri()
    except ValueError:
        return path.as_uri()


@dataclass(repr=False)
class Exploration(ReportFolder):
    """A report folder opened for digging (see the module docstring)."""

    @cached_property
    def _model(self):
        from .pairing import ModelReport

        return ModelReport.open(self.path)

    @cached_property
    def set(self):
        """The embedding set the report was made from (:func:`report_source`), read and validated again; its
        manifest's paths are those the run accepted (with its --allow-outside), so they are not confined again,
        and gensim pickles are read only under ``input_policy(trust_pickles=True)``."""
        from ..io import load_source
        from ..io.policy import current_policy, input_policy

        with input_policy(allow_outside=[os.sep], trust_pickles=current_policy().trust_pickles):
            return load_source(report_source(self.path, self.run))

    def unit_chapters(self) -> pd.DataFrame:
        """The chapters that recorded per-unit values: the unit, its id column, the means and the row count."""
        rows = [dict(chapter=c, unit=self._units_info(c)["unit"], key=self._units_info(c)["key"],
                     means=", ".join(self._units_info(c)["means"]), rows=len(t)) for c, t in self._model.units.items()]
        return pd.DataFrame(rows, columns=["chapter", "unit", "key", "means", "rows"])

    def _units_info(self, chapter: str) -> dict:
        return self._model.records[chapter]["info"]["units"]

    def describe(self) -> pd.DataFrame:
        """The set at a glance: name, rows, dimensions, where it was read from, ids, metadata columns."""
        es = self.set
        rows = [("name", es.name), ("rows", es.n), ("dimensions", es.d), ("source", es.source),
                ("ids", "given" if es.ids_given else "row numbers (none given)"),
                ("metadata columns", ", ".join(map(str, es.metadata.columns)) if es.metadata is not None else "none")]
        return pd.DataFrame(rows, columns=["item", "value"])

    def units(self, chapter: str | None = None) -> pd.DataFrame:
        """``results/units/<chapter>.csv``: one row per unit (query, test edge, entity, user), its id first
        (default: the first chapter that recorded per-unit values; an empty table when none did)."""
        if chapter is None:
            if not self._model.units:
                return pd.DataFrame()
            chapter = next(iter(self._model.units))
        if chapter not in self._model.units:
            known = ", ".join(self._model.units) or "none"
            raise InputError(f"{self.path}: chapter {chapter!r} recorded no per-unit values (chapters that did: "
                             f"{known})")
        return self._model.units[chapter].copy()

    def worst(self, chapter: str | None = None, metric: str | None = None, n: int = 10,
              all_columns: bool = False) -> pd.DataFrame:
        """The ``n`` units that pull ``chapter``'s mean of ``metric`` (default: the first task chapter with
        per-unit values, :data:`TASKS` first, else the first in report order; its first mean) the most the wrong
        way: lowest first where higher is better, highest first where lower is better; missing values last. The
        unit id, ``metric`` and the units' text columns (labels, groups); ``all_columns=True``: every column."""
        if chapter is None:
            if not self._model.units:
                return pd.DataFrame()
            chapter = self._default_unit_chapter()
        table = self.units(chapter)
        means = list(self._units_info(chapter)["means"]) or _unit_columns(chapter)
        metric = metric or means[0]
        if metric not in means:
            raise InputError(f"chapter {chapter!r} has no per-unit {metric!r}; it has {', '.join(means)}")
        direction = self._model.records[chapter]["metrics"].get(metric, {}).get("direction", "higher")
        ordered = table.sort_values(metric, ascending=direction == "higher", na_position="last", kind="stable")
        if not all_columns:
            key = self._units_info(chapter)["key"]
            text = [c for c in ordered.columns if c not in (key, metric) and c not in means
                    and not pd.api.types.is_numeric_dtype(ordered[c])]
            ordered = ordered[[key, metric, *text[:WORST_TEXT_COLUMNS]]]
        out = ordered.head(n).reset_index(drop=True)
        out.columns.name = f"worst {n} of {chapter}.{metric}"
        return out

    def _default_unit_chapter(self) -> str:
        """The chapter :meth:`worst` shows by default: the first of :data:`TASKS` with per-unit values, else the
        first in report order."""
        order = {c.get("name"): i for i, c in enumerate(self.run.get("chapters", []))}
        return min(self._model.units, key=lambda c: (c not in TASKS, TASKS.index(c) if c in TASKS else 0,
                                                     order.get(c, len(order))))

    def neighbours(self, id=None, k: int | None = None) -> pd.DataFrame:
        """The ``k`` nearest neighbours of ``id`` (default: the set's first id) by cosine (default k: the run's
        ``k`` option), nearest first, with their metadata: the lists of the run's shared k-NN graph (exact; ties
        to the lower row). The table says whose neighbours they are (``"neighbours of <id>"`` in its corner,
        ``attrs["of"]``)."""
        from ..kernels import knn

        es = self.set
        id = es.ids[0] if id is None else id
        k = int(k if k is not None else self._k())
        where = np.flatnonzero(es.ids == str(id))
        if not len(where):
            raise InputError(f"no id {id!r} in the set (ids such as {', '.join(map(str, es.ids[:3]))})")
        if not 1 <= k < es.n:
            raise InputError(f"k = {k}: expected 1 to {es.n - 1} (the set has {es.n} rows)")
        row = int(where[0])
        idx, sims = knn(es.vectors, k + 1, queries=es.vectors[row:row + 1], device="cpu", desc=None)
        keep = idx[0] != row
        idx, sims = idx[0][keep][:k], sims[0][keep][:k]
        out = pd.DataFrame({"rank": np.arange(1, len(idx) + 1), "id": es.ids[idx], "cosine": sims.astype(float)})
        if es.metadata is not None:
            out = pd.concat([out, es.metadata.iloc[idx].reset_index(drop=True)], axis=1)
        out.columns.name = f"neighbours of {id}"  # shown in the table's corner: whose neighbours these are
        out.attrs["of"] = str(id)
        return out

    def _k(self) -> int:
        from ..chapters.registry import options

        return int((self.run.get("options") or {}).get("k", options()["k"].default))

    def finding(self, which=0) -> pd.Series | None:
        """One finding (its position in the findings table, worst first, or its title); None when the run
        recorded none."""
        if not len(self.findings):
            return None
        if isinstance(which, str):
            hits = self.findings[self.findings["title"] == which]
            if not len(hits):
                raise InputError(f"no finding titled {which!r}; titles: {'; '.join(self.findings['title'].astype(str))}")
            return hits.iloc[0]
        if not -len(self.findings) <= int(which) < len(self.findings):
            raise InputError(f"finding {which}: the run recorded {len(self.findings)} finding(s)")
        return self.findings.iloc[int(which)]

    def evidence(self, which=0) -> pd.DataFrame:
        """A finding's fields and evidence as rows ``(item, value)``; nested evidence is flattened
        (``baseline.value``)."""
        f = self.finding(which)
        if f is None:
            return pd.DataFrame(columns=["item", "value"])
        rows = [(k, f[k]) for k in ("severity", "category", "chapter", "title", "sentence", "rule", "effect",
                                    "section") if k in f and f[k] is not None]
        rows += list(_flatten(f["evidence"] if isinstance(f["evidence"], dict) else {}, "evidence"))
        return pd.DataFrame(rows, columns=["item", "value"])

    def finding_metrics(self, which=0) -> pd.DataFrame:
        """The rows of the metrics table a finding rests on."""
        f = self.finding(which)
        return self.named_metrics(None, []) if f is None else self.named_metrics(f["chapter"], f["metrics"])

    def colour_column(self) -> str | None:
        """The metadata column the report groups by (``kind``, ``group``, ``type`` or ``label``, the first with
        2-12 values: :func:`embeval_report.io.group_column`), or None."""
        from ..io import group_column

        return group_column(self.set.metadata)

    def tests(self) -> pd.DataFrame | None:
        """Every hypothesis test of the report with its raw and adjusted p-values (``results/rigor_tests.csv``)."""
        from ..chapters.recorder import read_adjusted

        return read_adjusted(self.path / "results")

    def scatter(self, color: str | None = None, *, rows: int = SCATTER_ROWS, seed: int = 0):
        """The set's first two principal components (PCA of the centred vectors, scikit-learn) for up to ``rows``
        rows drawn without replacement (``seed``), coloured by the metadata column ``color`` (categories: the
        :data:`SCATTER_LEVELS` most frequent, the rest "other"; numbers: a colour scale). Returns the Figure."""
        import matplotlib.pyplot as plt
        from sklearn.decomposition import PCA

        from ..present.plotting import PALETTE, WIDTH, use_style

        es = self.set
        if color is not None and (es.metadata is None or color not in es.metadata.columns):
            known = ", ".join(map(str, es.metadata.columns)) if es.metadata is not None else "none"
            raise InputError(f"no metadata column {color!r}; columns: {known}")
        take = np.sort(np.random.default_rng(seed).choice(es.n, size=min(rows, es.n), replace=False))
        pca = PCA(n_components=2, random_state=seed)
        xy = pca.fit_transform(np.asarray(es.vectors[take], dtype=np.float64))
        use_style()
        fig, ax = plt.subplots(figsize=(WIDTH * 0.6, WIDTH * 0.5))
        if color is None:
            ax.scatter(xy[:, 0], xy[:, 1], s=6, alpha=0.6, color=PALETTE["data"], linewidths=0)
        else:
            values = es.metadata[color].iloc[take]
            if pd.api.types.is_numeric_dtype(values) and values.nunique() > SCATTER_LEVELS:
                points = ax.scatter(xy[:, 0], xy[:, 1], c=values.to_numpy(float), s=6, alpha=0.7, cmap="viridis",
                                    linewidths=0)
                fig.colorbar(points, ax=ax, label=color)
            else:
                labels = values.astype("string").fillna("(missing)")
                top = labels.value_counts().index[:SCATTER_LEVELS]
                labels = labels.where(labels.isin(top), "other")
                for level in [*top, "other"]:
                    mask = (labels == level).to_numpy()
                    if mask.any():
                        ax.scatter(xy[mask, 0], xy[mask, 1], s=6, alpha=0.7, label=str(level), linewidths=0)
                ax.legend(title=color, markerscale=3, loc="best")
        share = pca.explained_variance_ratio_
        ax.set_xlabel(f"PC 1 ({100 * share[0]:.1f} % of variance)")
        ax.set_ylabel(f"PC 2 ({100 * share[1]:.1f} % of variance)")
        ax.set_title(f"{es.name}: {len(take):,} of {es.n:,} rows" + (f", by {color}" if color else ""))
        plt.close(fig)  # shown once, as the cell's value
        return fig


def _flatten(d: dict, prefix: str):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}.{k}")
        else:
            yield f"{prefix}.{k}", v


def open_report(folder=".") -> Exploration:
    """Open a report folder for exploration (:class:`Exploration`)."""
    return Exploration.open(folder)


#: seconds ``explore`` waits for JupyterLab to answer
SERVER_START = 120


def serve(folder, *, browser: bool = True, port: int | None = None, ip: str = LOOPBACK, say=print) -> int:
    """``embeval-report explore``: start JupyterLab as a subprocess with the report folder as its root, opening
    ``explore.ipynb`` (written from the template when an older report lacks it), listening on ``ip`` (default
    this machine only); say its URL once it answers (``browser``: JupyterLab also opens it) and, on a loopback
    address, how to reach it from another machine; stop it on Ctrl-C or SIGTERM. Returns the exit status."""
    import secrets
    import signal
    import subprocess
    import sys
    import tempfile
    import threading
    import time
    import urllib.request

    folder = Path(folder).resolve()
    if not (folder / "run.json").is_file() or not (folder / "results").is_dir():
        raise InputError(f"{folder}: not an embeval-report folder (no run.json and results/); give the --out "
                         "folder of a run")
    if not (folder / NOTEBOOK).exists():
        write_notebook(folder)
    port = port or _free_port()
    token = secrets.token_hex(16)
    command = [sys.executable, "-m", "jupyterlab", NOTEBOOK, f"--ServerApp.root_dir={folder}",
               f"--ServerApp.ip={ip}", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.open_browser={browser}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # JupyterLab refuses root unless told (containers, CI)
        command.append("--ServerApp.allow_root=True")
    local = LOOPBACK if ip in ANY_ADDRESS else ip  # where this process asks whether it answers
    shown = socket_host() if ip in ANY_ADDRESS else ip
    url = f"http://{_url_host(shown)}:{port}/lab/tree/{NOTEBOOK}?token={token}"
    log = tempfile.TemporaryFile(mode="w+")  # JupyterLab's own lines, read back only when it fails to start
    if threading.current_thread() is threading.main_thread():  # Ctrl-C stops it even where the caller ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)  # SIGINT (a CI runner, nohup): it is inherited
    server = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        started = time.monotonic()
        while True:
            if server.poll() is not None:
                log.seek(0)
                lines = [x for x in log.read().splitlines() if x.strip()]
                raise InputError(f"explore: JupyterLab stopped (exit status {server.returncode}): "
                                 f"{lines[-1] if lines else 'no message'}")
            try:
                with urllib.request.urlopen(f"http://{_url_host(local)}:{port}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if time.monotonic() - started > SERVER_START:
                    raise InputError(f"explore: JupyterLab did not answer on port {port} within {SERVER_START} s")
                time.sleep(0.5)
        say(url, flush=True)
        print(remote_hint(ip, port), file=sys.stderr, flush=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        log.close()
    return 0


def socket_host() -> str:
    import socket

    return socket.gethostname()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def remote_hint(ip: str, port: int) -> str:
    """One line on reaching the server from another machine (a laptop, when the report is on a remote one)."""
    if ip in ("127.0.0.1", "localhost", "::1"):
        return (f"embeval-report: from another machine: forward the port first, ssh -N -L {port}:localhost:{port} "
                "USER@THIS_HOST, then open the URL there; or listen on every interface with --ip 0.0.0.0")
    return (f"embeval-report: listening on {ip} (port {port}): anyone who can reach it needs the token in the URL; "
            "use --ip 127.0.0.1 with an ssh tunnel on an untrusted network")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unit_columns(chapter: str) -> list[str]:
    """The per-unit columns of a chapter whose metrics are whole-table aggregates (node classification's
    ``correct``): the scorer's ``unit_column`` of each aggregate."""
    from ..chapters.registry import chapter as declared

    scorer = declared(chapter).scorer
    return list(dict.fromkeys(a.unit_column for a in (scorer.aggregates if scorer else ()) if a.unit_column))
