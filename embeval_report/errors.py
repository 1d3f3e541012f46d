"""What can go wrong, and how it reaches the user: errors, warnings and exit statuses."""
from __future__ import annotations

import enum
import re
import sys

#: characters that reorder or hide text (bidi controls, zero-width spaces): shown as ``<U+202E>`` wherever a user
#: string is shown (the report's escaping, :mod:`~embeval_report.present.escape`, and every line on stderr)
HIDDEN_CHARACTERS = "\u061c\u200b\u200e\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff"
#: what a line on a terminal shows as ``<U+001B>``: C0 and C1 controls (escape sequences, carriage returns,
#: backspaces, DEL) but tab and newline, which are spacing, and :data:`HIDDEN_CHARACTERS`
_NOT_SHOWN_AS_IS = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{HIDDEN_CHARACTERS}]")


class ExitCode(enum.IntEnum):
    """Exit statuses of ``embeval-report`` (documented in the README and ``--help``)."""

    OK = 0            # every chapter ran or was skipped with its reason
    RENDER = 1        # no report file could be rendered (the notebooks and JSON are kept)
    WRITE = 1         # a write failed after the chapters started (no space, permission, ...): nothing is left
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


class OutputError(Exception):
    """The report (or a cache, a history) could not be written where asked: no space left, permission denied,
    a component of the path that is a file, a read-only file system.

    The message is one line naming the path and the cause; ``status`` is :attr:`ExitCode.INPUT` (2) when the
    fault was found before any chapter ran (a check of the output location) and :attr:`ExitCode.WRITE` (1)
    when it happened later. Raised by :mod:`embeval_report.report.outdir`, printed by the CLI.
    """

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = int(status)


def code_point(match: re.Match) -> str:
    """A matched character as ``<U+XXXX>``."""
    return f"<U+{ord(match.group(0)):04X}>"


def terminal_line(text: object) -> str:
    """``text`` as one line a terminal shows as it is: runs of whitespace (newlines too) as one space, and every
    control character a file name can carry (an escape sequence, a carriage return) or that reorders text shown
    as ``<U+001B>``, so an error line that quotes input cannot recolour, rewrite or reorder a CI log."""
    return " ".join(_NOT_SHOWN_AS_IS.sub(code_point, str(text)).split())


def notice(text: str) -> None:
    """One line on stderr for something the user should know that is not an error (a stale lock taken over,
    stale staging removed, a corrupt cache entry recomputed, a torn history line skipped)."""
    print(f"embeval-report: note: {terminal_line(text)}", file=sys.stderr, flush=True)


class ChapterSkipped(Exception):
    """Raised inside a chapter whose inputs are valid but too degenerate for it.

    The message is the reason shown in the report (for example "needs at least 2 classes with
    at least 5 members; the label column has 1"); the chapter counts as skipped, not failed.
    """

    def _render_traceback_(self) -> list[str]:
        """What a notebook shows when a chapter is skipped: the reason, not a traceback (IPython asks for this;
        formatting a traceback with its highlighted source took half a second of the kernel)."""
        return [f"{type(self).__name__}: {self}"]


class UndefinedMetricWarning(UserWarning):
    """A number is undefined for this input (one class, no spread, too few units, ...).

    Emitted instead of returning a silent NaN; a chapter shows each one as a note next to
    its results, and records it under ``info.warnings`` in ``results/<chapter>.json``.
    """


class Interrupted(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt so that the same clean-up runs as for Ctrl-C."""
