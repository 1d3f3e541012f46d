"""An earlier report: what makes a folder one, so that ``--out`` replaces only what embeval-report wrote.

A report's ``run.json`` carries the tool's marker (``"generator": "embeval-report"``, ``"format_version"``), the
top-level entries the run wrote (``files``) and every file under them (``written``, paths relative to the report
folder); :func:`mark` adds them when ``run.json`` is written. A folder is an earlier report
(:meth:`EarlierReport.read`) when

* its ``run.json`` is a regular file with the marker and both lists (the entries counted as the report's are
  those of ``files`` that a report writes, :data:`REPORT_ENTRIES`), or
* it was written by a version before the marker: ``run.json`` has the structure those versions wrote (``version``,
  ``generated``, a ``chapters`` list of ``{name, status}`` and a ``files`` list); only its top level can be
  checked then.

Anything else with a ``run.json`` (a training run's ``{"lr": 0.001}`` beside ``models/`` and ``results/``) is no
report, and ``--out`` refuses it like any folder of other files. Inside a marked report, a file that is not in
``written`` is the user's (:meth:`EarlierReport.unrecorded`): the report is replaced folder by folder, so such a
file stops the run even with ``--force``. Files that commands write into a finished report later (``render``:
the report files; ``explore``: ``explore.ipynb``) and JupyterLab's checkpoints of the report's own notebooks
(``.ipynb_checkpoints/NAME-checkpoint.ipynb``) count as the report's.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

#: the marker of a ``run.json`` embeval-report wrote, and the version of its format (1: ``files`` and ``written``)
GENERATOR = "embeval-report"
FORMAT_VERSION = 1
#: the top-level entries a report folder may hold (everything the runner and renderers write)
REPORT_ENTRIES = frozenset({"report.html", "report.pdf", "metrics.json", "run.json", "chapters", "results",
                            "demo-data", "embeddings", "report.typ.failed", "models", "comparison.json",
                            "comparison.csv", "explore.ipynb"})
#: entries commands write into a finished report (``render``, ``explore``), listed in its run.json or not
LATER_ENTRIES = frozenset({"report.html", "report.pdf", "report.typ.failed", "explore.ipynb"})
#: the fields every run.json of the versions before the marker holds
_LEGACY_FIELDS = ("version", "generated", "chapters", "files")
CHECKPOINTS = ".ipynb_checkpoints"


def tree(folder: Path) -> list[str]:
    """Every file (and link, never followed) under ``folder``'s non-hidden top-level entries, as POSIX paths
    relative to ``folder``, sorted."""
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir() and not entry.is_symlink():
            for root, dirs, files in os.walk(entry):
                here = Path(root)
                files += [d for d in dirs if (here / d).is_symlink()]
                found += [(here / f).relative_to(folder).as_posix() for f in files]
        else:
            found.append(entry.name)
    return sorted(found)


def mark(doc: dict, folder: Path) -> dict:
    """``doc`` (a run.json) with the marker, ``files`` (the top-level entries of the report staged in ``folder``,
    run.json among them) and ``written`` (every file under them)."""
    files = sorted({p.name for p in folder.iterdir() if not p.name.startswith(".")} | {"run.json"})
    written = sorted(set(tree(folder)) | {"run.json"})
    return dict(generator=GENERATOR, format_version=FORMAT_VERSION, **doc, files=files, written=written)


def _read_run(folder: Path) -> dict | None:
    path = folder / "run.json"
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        run = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return run if isinstance(run, dict) else None


def _names(value) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        return None
    return value


def _legacy(run: dict) -> bool:
    """Whether ``run`` has the structure of a run.json written before the marker."""
    chapters = run.get("chapters")
    return (all(k in run for k in _LEGACY_FIELDS) and isinstance(run["version"], str)
            and isinstance(run["generated"], str) and isinstance(chapters, list)
            and all(isinstance(c, dict) and "name" in c and "status" in c for c in chapters)
            and _names(run["files"]) is not None)


@dataclass(frozen=True)
class EarlierReport:
    """A folder recognised as an earlier report (see the module docstring)."""

    folder: Path
    run: dict
    ours: frozenset          # its top-level entries that embeval-report wrote
    written: frozenset | None  # every file it wrote (None: a report of a version before the marker)

    @classmethod
    def read(cls, folder) -> "EarlierReport | None":
        """The report in ``folder``, or None when ``folder`` is no report of embeval-report."""
        folder = Path(folder)
        run = _read_run(folder)
        if run is None:
            return None
        files = _names(run.get("files"))
        if run.get("generator") == GENERATOR and isinstance(run.get("format_version"), int):
            written = _names(run.get("written"))
            if files is None or written is None:
                return None
            return cls(folder, run, frozenset(files) & REPORT_ENTRIES | LATER_ENTRIES, frozenset(written))
        if "generator" not in run and _legacy(run):
            return cls(folder, run, frozenset(files) & REPORT_ENTRIES | LATER_ENTRIES, None)
        return None

    @property
    def legacy(self) -> bool:
        return self.written is None

    def foreign(self) -> list[str]:
        """The folder's top-level entries that are not the report's (hidden ones too), sorted."""
        return sorted(p.name for p in self.folder.iterdir()
                      if p.name not in self.ours and not _checkpoints_of(p, self.folder, self._known()))

    def unrecorded(self) -> list[str]:
        """Files inside the report's own folders that it did not write (relative paths, sorted; nothing for a
        report of a version before the marker, whose run.json lists only its top level)."""
        if self.written is None:
            return []
        known = self._known()
        extra = []
        for entry in sorted(self.ours):
            top = self.folder / entry
            if not top.is_dir() or top.is_symlink():
                continue
            for root, dirs, files in os.walk(top):
                here = Path(root)
                for d in list(dirs):
                    if _checkpoints_of(here / d, self.folder, known):
                        dirs.remove(d)
                files += [d for d in dirs if (here / d).is_symlink()]
                extra += [rel for f in files if (rel := (here / f).relative_to(self.folder).as_posix()) not in known]
        return sorted(extra)

    def _known(self) -> frozenset:
        return self.written if self.written is not None else self.ours


def _checkpoints_of(path: Path, folder: Path, known: frozenset) -> bool:
    """Whether ``path`` is a JupyterLab checkpoint folder holding only checkpoints of the report's notebooks."""
    if path.name != CHECKPOINTS or not path.is_dir() or path.is_symlink():
        return False
    base = path.parent.relative_to(folder).as_posix()
    for p in path.iterdir():
        stem, sep, tail = p.name.rpartition("-checkpoint.ipynb")
        own = f"{stem}.ipynb" if base == "." else f"{base}/{stem}.ipynb"
        if not (sep and not tail and p.is_file() and not p.is_symlink() and own in known):
            return False
    return True


def is_report(folder) -> bool:
    """Whether ``folder`` holds an earlier report (:meth:`EarlierReport.read`) with its ``results/``."""
    folder = Path(folder)
    return folder.is_dir() and (folder / "results").is_dir() and EarlierReport.read(folder) is not None
