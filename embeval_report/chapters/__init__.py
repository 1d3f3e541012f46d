"""Chapters: what each report chapter shows (narrative, tables, figures) and records.

A chapter is one module here, ``chapters/<name>.py``, declaring ``CHAPTER = ChapterSpec(...)``
(:mod:`.declaration`: inputs, options, graph use, precheck, demo data, findings) with ``compute(ctx)``
(runs the metrics of :mod:`embeval_report.metrics` and records every number) and the ``show_*`` /
narrative functions its notebook calls, plus one notebook in ``notebooks/``. :mod:`.registry` derives
everything else from the declarations; :func:`open_chapter` is the setup call every notebook makes.
"""
from .declaration import ChapterSpec, Option
from .registry import discover, resolve_settings, select
from .setup import ChapterContext, open_chapter

__all__ = ["ChapterContext", "ChapterSpec", "Option", "discover", "open_chapter", "resolve_settings", "select"]
