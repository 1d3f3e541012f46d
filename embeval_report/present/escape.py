"""User strings as data in every output: one escaping function per place a string can land.

A user string (an id, a label, a column, a snapshot, run or batch name, a file name, a title) is plain text. Where
it is written decides what would make it markup, so each sink has its function here and only here:

* :func:`html_text` / :func:`html_attr` -- HTML text and attribute values (``<>&"'``);
* :func:`markdown` -- pandoc markdown, which the report turns into HTML and Typst (markdown specials backslashed,
  then HTML-escaped, so it is literal in both); :func:`markdown_code` -- an inline code span;
* :func:`typst_string` -- a Typst string literal (``"..."``), for the Typst the renderer writes itself;
* :func:`mathtext` -- matplotlib text (figure titles, labels, legends, tick labels): every ``$`` shown literally,
  so ``run_$LR_$SEED`` is neither math nor a parse error.

Every one first makes the string :func:`visible`: the bidirectional controls (U+202A-U+202E, U+2066-U+2069, U+200E,
U+200F, U+061C), which reorder what a reader sees (``\\u202e`` turns ``gnp.exe`` into ``exe.png``), and the
invisible zero-width characters that could make two ids look the same (U+200B, U+2060, U+FEFF) are shown as
``<U+202E>``; other control characters except tab and newline are dropped. ZERO WIDTH (NON-)JOINER (U+200C, U+200D)
stay: scripts and emoji need them, and they reorder nothing.

>>> markdown("a_b*<c>")
'a\\\\_b\\\\*&lt;c&gt;'
>>> html_text("\\u202egnp.exe")
'&lt;U+202E&gt;gnp.exe'
>>> mathtext("run_$LR_$SEED")
'run_\\\\$LR_\\\\$SEED'
>>> typst_string('say "#eval"')
'"say \\\\"#eval\\\\""'
"""
from __future__ import annotations

import html as _html
import re
from typing import Any

from ..errors import HIDDEN_CHARACTERS, code_point

__all__ = ["visible", "html_text", "html_attr", "markdown", "markdown_code", "typst_string", "mathtext"]

#: characters that reorder or hide text: shown as <U+XXXX>
_INVISIBLE = re.compile(f"[{HIDDEN_CHARACTERS}]")
#: control characters other than tab, newline and carriage return: dropped
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# Characters with a meaning in (pandoc / CommonMark) markdown that a plain string must not trigger.
# ``<>&"'`` are handled by HTML escaping; ``-+.:=`` only matter at the start of a line.
_MD_SPECIALS = re.compile(r"([\\`*_{}\[\]#|$~^@])")
_MD_RUNS = re.compile(r"([-.])(?=\1)")
_MD_LINE_START = re.compile(r"^(\s*)(?:([-+:=])|(\d+)([.)]))", re.MULTILINE)


def visible(text: Any) -> str:
    """``text`` as a string whose every character shows: bidi controls and zero-width spaces as ``<U+202E>``,
    other control characters (but tab and newline) removed; ``None`` is ``""``."""
    if text is None:
        return ""
    s = _CONTROL.sub("", str(text))
    return _INVISIBLE.sub(code_point, s)


def html_text(text: Any) -> str:
    """A user string as HTML text."""
    return _html.escape(visible(text), quote=True)


def html_attr(text: Any) -> str:
    """A user string as an HTML attribute value (inside double or single quotes)."""
    return _html.escape(visible(text), quote=True)


def markdown(text: Any) -> str:
    """A user string inside pandoc markdown *and* HTML: markdown specials (``*_`[]#|$`` ...) backslashed, a
    list or heading marker at a line's start escaped, runs of ``-`` and ``.`` kept from becoming dashes and
    ellipses, then ``<>&"'`` HTML-escaped, so ``a_b*<c>`` shows literally in the HTML and the PDF."""
    s = _MD_SPECIALS.sub(r"\\\1", visible(text))
    s = _MD_RUNS.sub(r"\1\\", s)  # "--" and "..." stay literal (no en dash, no ellipsis)
    s = _MD_LINE_START.sub(lambda m: m.group(1) + ("\\" + m.group(2) if m.group(2)
                                                   else m.group(3) + "\\" + m.group(4)), s)
    return _html.escape(s, quote=True)


def markdown_code(text: Any) -> str:
    """A user string as an inline code span of pandoc markdown (literal in HTML and Typst): fenced with one
    more backtick than its longest run, on one line."""
    s = re.sub(r"\s*[\r\n]+\s*", " ", visible(text))
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def typst_string(text: Any) -> str:
    """A user string as a Typst string literal (shown as text wherever Typst expects content or a string)."""
    s = visible(text).replace("\r", "")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def mathtext(text: Any) -> str:
    """A user string as matplotlib text: every ``$`` escaped, so it is shown and never starts math."""
    return visible(text).replace("$", r"\$")
