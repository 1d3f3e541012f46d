"""The Quarto renderer: the chapters as one Quarto document, one ``quarto render`` per format.

A temporary folder holds ``report.qmd``, its figures and ``embeval.typ`` (the built-in Typst
template, for its callout and badge). The document's front matter is the title, the header
information as subtitle and the packaged ``_quarto.yml`` (the look of each format): not a project
file, which Quarto ignores under a hidden folder such as the runner's staging folder. Its body is
the chapters' markdown exactly as the built-in PDF renderer converts them (pipe tables, captioned
figures, math), with callouts and verdict badges in each format's own form. No notebook reaches
Quarto, so no Jupyter runs and no ``text/html`` output makes Quarto load require.js and jQuery
from a CDN.

Formats: ``html`` (one self-contained file), the PDF through Typst (bundled with Quarto, no
TeX) or, with ``pdf_engine="latex"``, through LaTeX. Each is rendered on its own: one failing
never loses another, and its error is one line.
"""

import html as _html
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import yaml

from ...present.escape import typst_string
from .common import _atomic_write, _quarto_template, load_chapters, read_header, strip_ansi, templates_dir
from .pdf import PDF_TIMEOUT, PdfTimeout, report_parts
from .sanitize import sanitize_page

log = logging.getLogger(__name__)

PDF_ENGINES = ("typst", "latex")
_QUARTO_TO = {"html": "html", "typst": "typst", "latex": "pdf"}     # format or PDF engine -> --to
_QUARTO_CALLOUT = {"note": "note", "warning": "warning", "danger": "important", "success": "tip"}
_TEX_COMMANDS = ("tlmgr", "xelatex", "lualatex", "pdflatex")
_INSTALL_TEX = ("the latex PDF engine needs TeX: install it with `quarto install tinytex` (or TeX Live), "
                "or render the PDF through Typst (--pdf-engine typst)")
_HINTS = (  # quarto's message -> what to do
    (re.compile(r"No TeX installation"), _INSTALL_TEX),
    (re.compile(r"File `([\w-]+)\.sty' not found"),
     "install the LaTeX package {0} (tlmgr install {0}, or your system's TeX Live packages), "
     "or render the PDF through Typst (--pdf-engine typst)"),
)
_ERROR_LINE = re.compile(r"error|not found|failed", re.I)

_MARKER_CALLOUT = re.compile(r"^<!-- embeval-callout:(\w+) -->\n\n((?:>.*\n?)+)", re.M)
_DIV_CALLOUT = re.compile(r"^::: \{\.callout \.callout-(\w+)\}\n\*\*([^\n]*)\*\*\n(.*?)^:::[ \t]*$", re.M | re.S)
_BADGE = re.compile(r"\[([^\]\n]*)\]\{\.verdict \.verdict-([\w-]+)\}")
_LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\(#([^)\s]+)\)")
_ID = re.compile(r"\{#([^}\s]+)")
_PIPE_TABLE = re.compile(r"^(\|.*\|)[ \t]*\n(\|[-:| ]+\|)[ \t]*\n((?:\|.*\|[ \t]*(?:\n|$))*)", re.M)
_CELL_BORDER = re.compile(r"(?<!\\)\|")
_SPAN_OR_LINK = re.compile(r"\[([^\]\n]*)\](?:\{[^}\n]*\}|\([^)\n]*\))")
_MARKDOWN_LINE = 72       # pandoc's --columns: a table with a longer line is set full width, cells wrapping
_LATEX_LINE = 80          # about the characters on one line of the LaTeX PDF
_MD_ESCAPE = re.compile(r"\\(.)")


class QuartoError(RuntimeError):
    """Quarto could not render some formats: ``errors`` {format: one line}; ``files`` the ones written."""

    def __init__(self, errors: dict[str, str], files: dict[str, Path]):
        super().__init__("; ".join(f"{fmt}: {msg}" for fmt, msg in errors.items()))
        self.errors, self.files = errors, files


def _render_quarto(out_dir: Path, title: str, formats, header_items, pdf_engine: str = "typst",
                   pdf_timeout: float | None = PDF_TIMEOUT) -> dict[str, Path]:
    """Render ``formats`` with Quarto into ``out_dir/report.html`` / ``report.pdf``.

    Raises :class:`QuartoError` (after trying every format) when some could not be rendered, and
    :class:`~.pdf.PdfTimeout` when the PDF takes longer than ``pdf_timeout`` seconds.
    """
    exe = shutil.which("quarto")
    if not exe:
        raise RuntimeError("quarto is not on PATH: install Quarto (https://quarto.org) or use renderer='builtin'")
    out_dir = Path(out_dir)
    files, errors = {}, {}
    meta = read_header(out_dir, title)[2]
    with tempfile.TemporaryDirectory(prefix="embeval-quarto-") as tmp:
        stage = Path(tmp)
        body, appendix = _stage(stage, out_dir)
        front = _front_matter(title, header_items)
        for fmt in formats:
            to = _QUARTO_TO["html" if fmt == "html" else pdf_engine]
            try:
                files[fmt] = _render_one(exe, stage, out_dir, to, front + _document(body, to, appendix, meta),
                                         None if fmt == "html" else pdf_timeout)
            except PdfTimeout:
                raise
            except Exception as exc:  # the other formats still render
                errors[fmt] = _one_line(str(exc))
    if errors:
        raise QuartoError(errors, files)
    return files


def _stage(stage: Path, out_dir: Path) -> tuple[list[str], list[str]]:
    """Write the Typst template and the figures into ``stage``; return the markdown of each chapter's body (its
    heading with its worst severity's badge) and of each appendix (the chapters' reference material, then
    the References)."""
    tdir = templates_dir()
    shutil.copy(tdir / "report.typ", stage / "embeval.typ")
    body, appendix = report_parts(load_chapters(out_dir), tdir, stage)
    return [_with_badge(ch, md) for ch, md in body], [md for _, md in appendix]


def _letters():
    from .common import _letters as letters
    return letters()


def _with_badge(ch, markdown: str) -> str:
    """The chapter heading with its worst severity as a badge: Quarto's contents (sidebar, Typst outline)
    repeat the heading."""
    severity = getattr(ch, "severity", None)
    if not severity:
        return markdown
    badge = f"[{'not run' if severity == 'skipped' else severity}]{{.verdict .verdict-{severity}}}"
    return markdown.replace(f" {{#{ch.anchor}}}", f" {badge} {{#{ch.anchor}}}", 1)


_HEADING = re.compile(r"^(#{1,5}) (.*?)(?: \{([^}\n]*)\})?[ \t]*$", re.M)


def _appendix_part(markdown: str, letter: str) -> str:
    """One appendix of the HTML: its heading "Appendix A: Title", every heading in it unnumbered and one level
    down under the part's heading (``# Appendices``)."""
    def one(m: re.Match) -> str:
        level, text, attrs = m.group(1), m.group(2), (m.group(3) or "").strip()
        if level == "#":
            text = f"Appendix {letter}: {text}"
        return f"{level}# {text} {{{(attrs + ' ') if attrs else ''}.unnumbered}}"
    return _HEADING.sub(one, markdown)


def _status_block(meta: dict, anchors: set) -> str:
    """The report's status and top findings, before the first chapter (the built-in cover's content)."""
    from ...present.display import escape

    if not meta.get("status"):
        return ""
    lines = [f"**Status** [{meta['status']}]{{.verdict .verdict-{meta['status'].replace(' ', '-')}}}", ""]
    if meta.get("top_findings"):
        lines += ["**Top findings**", ""]
        for i, f in enumerate(meta["top_findings"], 1):
            title = escape(f["title"])
            title = f"[{title}](#{f['section']})" if f["section"] in anchors else title
            number = f" — {escape(f['number'])}" if f["number"] else ""
            lines.append(f"{i}. [{f['severity']}]{{.verdict .verdict-{f['severity']}}} **{title}**{number}")
    return "::: {.report-status}\n" + "\n".join(lines) + "\n:::\n\n"


def _front_matter(title: str, header_items) -> str:
    """YAML front matter: the title, the header information as subtitle (not the generation time as
    ``date``: Quarto would reformat it, dropping its time and zone), then the packaged options."""
    from ...present.display import escape

    doc = {"title": escape(title), "pagetitle": escape(title)}  # markdown both: raw HTML would leave <title>
    if header_items:
        doc["subtitle"] = "\\\n".join(f"{k}: {escape(v)}" for k, v in header_items)  # one line each (hard breaks)
    options = yaml.safe_load(_quarto_template().read_text(encoding="utf-8")) or {}
    doc.update((k, v) for k, v in options.items() if k not in doc)
    return "---\n" + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10**6) + "---\n\n"


def _document(parts: list[str], to: str, appendix: list[str] = (), meta: dict | None = None) -> str:
    """The report's markdown for Quarto's ``--to`` format: the status and top findings, the chapters, the
    appendices (collapsed in HTML); callouts, badges, only existing link targets."""
    anchors = set(_ID.findall("\n".join(parts)))
    text = _status_block(meta or {}, anchors) + "\n\n".join(parts)
    if appendix:
        text += "\n\n" + _APPENDIX_START[to] + "\n\n".join(
            _collapsed(_appendix_part(part, letter)) if to == "html" else part
            for letter, part in zip(_letters(), appendix))
    text = _MARKER_CALLOUT.sub(lambda m: _callout(to, m.group(1), *_quoted_callout(m.group(2))), text)
    text = _DIV_CALLOUT.sub(lambda m: _callout(to, m.group(1), m.group(2), m.group(3).strip("\n")), text)
    if to == "pdf":
        text = _PIPE_TABLE.sub(_latex_column_widths, text)
    if to == "typst":
        text = _BADGE.sub(lambda m: f"`#badge(kind: {typst_string(m.group(2))}, {typst_string(_plain(m.group(1)))})`"
                                    "{=typst}", text)
    ids = set(_ID.findall(text))
    return _LINK.sub(lambda m: m.group(0) if m.group(2) in ids else m.group(1), text)


#: what starts the appendices: in HTML a part heading (each appendix a collapsed callout, as the built-in
#: HTML's closed <details>); in the PDFs the chapter numbering turns to letters, as in the built-in PDF (Typst:
#: one line in the contents for all of them, every level bookmarked)
_APPENDIX_START = {
    "html": "# Appendices {#appendix .unnumbered}\n\n",
    "typst": "```{=typst}\n#heading(level: 1, numbering: none)[Appendices: method, definitions and tests of each "
             "chapter]\n#counter(heading).update(0)\n#set heading(outlined: false, bookmarked: true, numbering: (..n) => "
             "if n.pos().len() == 1 { \"Appendix \" + numbering(\"A\", ..n) } else { numbering(\"A.1\", ..n) })\n"
             "```\n\n",
    "latex": "```{=latex}\n\\appendix\n```\n\n",
}
_APPENDIX_START["pdf"] = _APPENDIX_START["latex"]


def _collapsed(part: str) -> str:
    """An appendix as a collapsed callout: its heading the callout's title (Quarto HTML)."""
    m = re.match(r"## (.*?) \{#([^\s}]+)[^}]*\}\n", part)
    if not m:
        return part
    return f"::: {{#{m.group(2)} .callout-note collapse=\"true\"}}\n## {m.group(1)}\n\n{part[m.end():]}\n:::\n"


def _quoted_callout(quote: str) -> tuple[str, str]:
    """(title, body) of a ``display.callout`` block quote: ``> **Title**`` then the body."""
    lines = [re.sub(r"^> ?", "", ln) for ln in quote.rstrip("\n").split("\n")]
    title = re.fullmatch(r"\*\*(.*)\*\*", lines[0])
    return (title.group(1), "\n".join(lines[1:]).strip("\n")) if title else ("", "\n".join(lines))


def _latex_column_widths(table: re.Match) -> str:
    """A wide pipe table with its relative column widths (its dashes) from the text that shows, not from
    the markdown of badges and links: each column at least its longest word, LaTeX wrapping the rest."""
    lines = [table.group(1), *table.group(3).splitlines()]
    if all(len(line) <= _MARKDOWN_LINE for line in lines):
        return table.group(0)               # set at its natural width, nothing wraps
    aligns = [a.strip() for a in table.group(2).strip()[1:-1].split("|")]
    rows = [[_plain(_SPAN_OR_LINK.sub(r"\1", c)).strip() for c in _CELL_BORDER.split(line.strip()[1:-1])]
            for line in lines]
    if any(len(r) != len(aligns) for r in rows):
        return table.group(0)
    words = [max(len(w) for r in rows for w in r[j].split() or [""]) + 2 for j in range(len(aligns))]
    full = [max(len(r[j]) for r in rows) + 2 for j in range(len(aligns))]
    wrap = sum(f - w for f, w in zip(full, words))
    share = min(1.0, max(0, _LATEX_LINE - sum(words)) / wrap) if wrap else 0.0
    dashes = [round(10 * (w + (f - w) * share)) for w, f in zip(words, full)]
    sep = "|".join((":" if a.startswith(":") else "-") + "-" * d + (":" if a.endswith(":") else "-")
                   for a, d in zip(aligns, dashes))
    return f"{table.group(1)}\n|{sep}|\n{table.group(3)}"


def _plain(markdown_text: str) -> str:
    """Escaped markdown text (``display.escape``) back to plain text."""
    return _html.unescape(_MD_ESCAPE.sub(r"\1", markdown_text))


def _callout(to: str, kind: str, title: str, body: str) -> str:
    """A boxed note: Quarto's callout in HTML; the built-in one in Typst (Quarto's imports a Typst
    package from the network); a block quote in LaTeX (Quarto's needs the fontawesome5 package)."""
    if to == "typst":
        title_arg = f", title: {typst_string(_plain(title))}" if title else ""
        return (f'```{{=typst}}\n#embeval-callout(kind: {typst_string(kind)}{title_arg})[\n```\n\n{body}\n\n'
                "```{=typst}\n]\n```\n")
    if to == "pdf":
        quoted = "\n".join(f"> {ln}" if ln.strip() else ">" for ln in body.split("\n"))
        return (f"> **{title}**\n>\n" if title else "") + quoted + "\n"
    heading = f"## {title}\n\n" if title else ""
    return f"::: {{.callout-{_QUARTO_CALLOUT.get(kind, 'note')}}}\n{heading}{body}\n:::\n"


def _tex_installed() -> bool:
    """Whether Quarto can find TeX: on PATH, or its own TinyTeX."""
    return any(shutil.which(c) for c in _TEX_COMMANDS) or (Path.home() / ".TinyTeX").is_dir()


def _render_one(exe: str, stage: Path, out_dir: Path, to: str, document: str, timeout: float | None = None) -> Path:
    """``quarto render report.qmd --to TO`` in ``stage`` (killed after ``timeout`` seconds: :class:`PdfTimeout`);
    the result copied into ``out_dir``."""
    if to == "pdf" and not _tex_installed():
        raise RuntimeError(_INSTALL_TEX)
    (stage / "report.qmd").write_text(document, encoding="utf-8")
    env = dict(os.environ, NO_COLOR="1")
    proc = _run_quarto([exe, "render", "report.qmd", "--to", to], stage, env, timeout)
    if proc.returncode != 0:
        raise RuntimeError(_quarto_message(proc.stderr or proc.stdout))
    suffix = ".html" if to == "html" else ".pdf"
    produced = stage / f"report{suffix}"
    if not produced.exists():
        raise RuntimeError(f"quarto render --to {to} wrote no report{suffix}")
    target = out_dir / f"report{suffix}"
    data = produced.read_bytes()
    if to == "html":  # the allow-list and the CSP (Quarto's own scripts allowed by hash, none in the content)
        data = sanitize_page(data.decode("utf-8"), scripts=True).encode("utf-8")
    _atomic_write(target, data)
    return target


def _run_quarto(args, cwd: Path, env: dict, timeout: float | None) -> subprocess.CompletedProcess:
    """Quarto in a session of its own: past ``timeout`` seconds it and every process it started (Deno, pandoc,
    Typst) are killed and :class:`PdfTimeout` is raised."""
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=os.name == "posix")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            if os.name == "posix":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
            pass
        proc.communicate()
        raise PdfTimeout(timeout) from None
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _quarto_message(output: str) -> str:
    """Quarto's error as one line (the error lines from its first ``ERROR``, else its last line),
    with what to do about it."""
    lines = [ln.strip() for ln in strip_ansi(output).splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if re.match(r"(ERROR|error)\b", ln)), None)
    tail = [] if start is None else [ln for ln in lines[start:] if not re.fullmatch(r"ERROR:?", ln)]
    message = " ".join([ln for ln in tail if _ERROR_LINE.search(ln)] or tail[:1] or lines[-1:])
    message = message or "quarto failed without a message"
    hints = [hint.format(*m.groups()) for pattern, hint in _HINTS if (m := pattern.search(message))]
    return _one_line(f"{message} ({hints[0]})" if hints else message)


def _one_line(text: str, limit: int = 600) -> str:
    text = " ".join(strip_ansi(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
