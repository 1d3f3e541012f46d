"""The ``--out`` folder: which folders may be written, staging, and the move into place.

Rules (the tool never deletes a file it did not write):

* a new or empty folder is written;
* an earlier embeval-report output (it has ``run.json``) is replaced atomically, provided it holds
  only what embeval-report writes;
* any other non-empty folder is refused (exit status 2) unless ``--force``; with ``--force`` the
  report's own entries are added next to the folder's other files, which are kept (a folder that
  already holds an entry with one of the report's names that embeval-report did not write is
  refused even then);
* the report is built in a hidden staging folder beside ``out`` and moved into place at the end,
  so an interrupted run leaves nothing half-written.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

#: the top-level entries a report folder may hold (everything the runner and renderers write)
REPORT_ENTRIES = frozenset({"report.html", "report.pdf", "metrics.json", "run.json", "chapters", "results",
                            "demo-data", "embeddings", "report.typ.failed", "models", "comparison.json",
                            "comparison.csv"})


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _written_by_us(folder: Path) -> set[str]:
    """The entries an earlier run recorded as its own in ``run.json`` (all report entries for older runs)."""
    try:
        run = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return set()
    files = run.get("files") if isinstance(run, dict) else None
    return set(files) if isinstance(files, list) else set(REPORT_ENTRIES)


@dataclass(frozen=True)
class OutputFolder:
    """A checked ``--out`` target; ``merge`` when the report joins a folder of other files (``--force``)."""

    path: Path
    merge: bool = False
    previous: frozenset = frozenset()   # entries an earlier report wrote (replaced or removed on commit)

    @classmethod
    def check(cls, out, *, force: bool = False) -> "OutputFolder":
        """Apply the rules of the module docstring; raise :class:`InputError` for a folder that may not be written."""
        out = Path(out).resolve()
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {out}: exists and is not a folder; expected a new or empty folder")
        if not out.exists() or not any(out.iterdir()):
            return cls(out)
        entries = _listing(out)
        ours = _written_by_us(out)
        if ours:  # an earlier report
            foreign = [e for e in entries if e not in ours]
            if not foreign:
                return cls(out)
            if not force:
                raise InputError(f"--out {out}: an earlier report folder that also holds files embeval-report did "
                                 f"not write ({', '.join(foreign[:5])}{', …' if len(foreign) > 5 else ''}); move them "
                                 "away, choose another folder, or pass --force to keep them and replace the report")
            return cls(out, merge=True, previous=frozenset(e for e in entries if e in ours))
        if not force:
            raise InputError(f"--out {out}: folder is not empty and is not an embeval-report output (no run.json); "
                             "choose a new or empty folder, or pass --force to add the report beside its files")
        clash = [e for e in entries if e in REPORT_ENTRIES]
        if clash:
            raise InputError(f"--out {out}: already holds {', '.join(clash)}, which embeval-report did not write; "
                             "it will not replace them even with --force: choose another folder")
        return cls(out, merge=True)

    def staging(self) -> Path:
        """A new hidden staging folder beside the target."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{self.path.name}.partial-", dir=self.path.parent))

    def commit(self, staging: Path) -> None:
        """Move the staged report into place (see the module docstring)."""
        if not self.merge:
            old = None
            if self.path.exists():
                old = self.path.with_name(f".{self.path.name}.old-{os.getpid()}")
                self.path.rename(old)
            staging.rename(self.path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            return
        trash = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.old-", dir=self.path.parent))
        new = {e.name for e in staging.iterdir()}
        for name in sorted(self.previous - new):  # the earlier report's own entries this run does not write
            (self.path / name).rename(trash / name)
        for entry in sorted(staging.iterdir()):
            target = self.path / entry.name
            if target.exists():
                target.rename(trash / entry.name)
            entry.rename(target)
        shutil.rmtree(trash, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
