"""What can go wrong, and how it reaches the user: errors, warnings and exit statuses."""
from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit statuses of ``embeval-report`` (documented in the README and ``--help``)."""

    OK = 0            # every chapter ran or was skipped with its reason
    RENDER = 1        # no report file could be rendered (the notebooks and JSON are kept)
    INPUT = 2         # bad input or usage: one line names the file, field or row
    GATE = 3          # --fail-on: a verdict reached the threshold (takes precedence over 4)
    CHAPTER = 4       # at least one chapter failed; the report is still written
    INTERRUPTED = 130  # SIGINT / SIGTERM: staging removed, nothing half-written


class InputError(ValueError):
    """Bad input from the user.

    The message names the file, the field or the row, and what was expected, e.g.
    ``vectors.csv, row 17: expected 64 values, found 63``. The CLI prints it as one
    line and exits with status 2.
    """


class ChapterSkipped(Exception):
    """Raised inside a chapter whose inputs are valid but too degenerate for it.

    The message is the reason shown in the report (for example "needs at least 2 classes with
    at least 5 members; the label column has 1"); the chapter counts as skipped, not failed.
    """


class UndefinedMetricWarning(UserWarning):
    """A number is undefined for this input (one class, no spread, too few units, ...).

    Emitted instead of returning a silent NaN; a chapter shows each one as a note next to
    its results, and records it under ``info.warnings`` in ``results/<chapter>.json``.
    """


class Interrupted(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt so that the same clean-up runs as for Ctrl-C."""
