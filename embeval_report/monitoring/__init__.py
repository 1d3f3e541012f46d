"""Monitoring new batches against a reference profile (seed 000 §220; issue 13).

* :mod:`.profile` — ``embeval-report profile``: the reference set's sufficient statistics in a small folder;
* :mod:`.score` — ``embeval-report monitor``: one batch scored against a profile, signal by signal, with alert levels;
* :mod:`embeval_report.io.monitor_history` — the JSONL history ``monitor --history`` appends to and the
  monitoring chapter reads (a reader of files, so it lives in :mod:`embeval_report.io`);
* :mod:`.cli` — the two subcommands (imported by the main CLI, so this package imports nothing heavy up front).
"""
from __future__ import annotations

import importlib

_EXPORTS = {"FORMAT_VERSION": "profile", "Profile": "profile", "build_profile": "profile", "load_profile": "profile",
            "save_profile": "profile", "LEVELS": "score", "BatchScore": "score", "Signal": "score",
            "score_batch": "score", "append_history": "..io.monitor_history", "history_record": "score",
            "read_history": "..io.monitor_history", "MonitorHistory": "..io.monitor_history"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name] if _EXPORTS[name].startswith("..") else f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
