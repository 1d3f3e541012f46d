"""Chapters: what each report chapter shows (narrative, tables, figures) and records.

A chapter is one notebook in ``notebooks/`` plus one module here, ``chapters/<name>.py``, with
``compute(ctx)`` (runs the metrics of :mod:`embeval_report.metrics` and records every number) and
the ``show_*`` / narrative functions its notebook calls. :mod:`.registry` finds the notebooks;
:func:`open_chapter` is the setup call every notebook makes.
"""
from .registry import Chapter, describe_input, discover, select
from .setup import ChapterContext, open_chapter

__all__ = ["Chapter", "ChapterContext", "describe_input", "discover", "open_chapter", "select"]
