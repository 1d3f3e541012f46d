"""The built-in PDF renderer: pandoc markdown -> Typst -> PDF with the ``typst`` package."""

import copy
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from ...present.escape import typst_string
from ...safe_files import replace_with
from .common import (
    _CHAPTER_BREAK,
    PDF_MIME_PRIORITY,
    REFERENCES_ANCHOR,
    ChapterDoc,
    _atomic_write,
    _md_codeblock,
    _pandoc,
    _slug,
    _status_box_md,
    references,
    templates_dir,
)

log = logging.getLogger(__name__)

class _Markdown:
    """One nbconvert exporter with the report's markdown template for every notebook of a report (its templates
    compiled once: each exporter compiled them again, 0.1 s a notebook)."""

    def __init__(self, tdir: Path):
        from nbconvert import MarkdownExporter
        from traitlets.config import Config

        from ...present.display import escape

        c = Config()
        c.MarkdownExporter.exclude_input = True
        c.NbConvertBase.display_data_priority = PDF_MIME_PRIORITY
        self.exporter = MarkdownExporter(config=c, template_name="embeval_markdown",
                                         extra_template_basedirs=[str(tdir / "nbconvert")],
                                         filters={"md_escape": escape, "md_codeblock": _md_codeblock})

    def __call__(self, nb, media: Path, key: str) -> str:
        """Executed cells as pandoc markdown; their images are written to ``media``."""
        body, resources = self.exporter.from_notebook_node(copy.deepcopy(nb), resources={"unique_key": key})
        for name, data in (resources.get("outputs") or {}).items():
            (media / name).write_bytes(data)
        return re.sub(r"\n{3,}", "\n\n", body).strip() + "\n"


def _chapter_markdown(ch: ChapterDoc, export: _Markdown, media: Path, key: str) -> str:
    """The chapter's body as pandoc markdown; its images are written to ``media``."""
    from ...present.display import escape

    heading = f"# {escape(ch.title)} {{#{ch.anchor}}}\n\n"
    if ch.status != "ok" or ch.nb is None:
        return heading + _status_box_md(ch)
    return heading + export(ch.nb, media, key)


def _appendix_markdown(ch: ChapterDoc, export: _Markdown, media: Path, key: str) -> str:
    """The chapter's reference material (its appendix) as pandoc markdown."""
    from ...present.display import escape

    return f"# {escape(ch.title)} {{#{ch.appendix_anchor}}}\n\n" + export(ch.appendix, media, key + "_appendix")


_FENCE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})")
_RAW_ATTRIBUTE = re.compile(r"(?<!\\)\{(\s*)=")


def refuse_raw(markdown: str) -> str:
    """The content's raw output (```` ```{=typst} ```` blocks, ``...`{=typst}`` inlines, any format) as code: the
    renderers add their own Typst after this, and no other reaches a PDF as code (``{=fmt}`` becomes ``{.fmt}``, a
    code block or span of that class; the text inside code blocks is kept as it is)."""
    out, fence = [], None
    for line in markdown.split("\n"):
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
            line = _RAW_ATTRIBUTE.sub(r"{\1.", line)
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end():].strip():
            fence = None
        out.append(line)
    return "\n".join(out)


def report_parts(chapters: list[ChapterDoc], tdir: Path, media: Path) -> tuple[list, list]:
    """The report as markdown units: ``(body, appendix)``, each a list of ``(unit, markdown)`` where unit has the
    ``title`` and ``anchor`` a stub needs; the appendix is every chapter's reference material, then the
    References. A chapter that cannot be converted becomes a failed chapter (the rest is unaffected)."""
    body, appendix, export = [], [], _Markdown(tdir)
    for i, ch in enumerate(chapters):
        key = f"{i:02d}_{_slug(ch.name)}"
        try:
            body.append((ch, refuse_raw(_chapter_markdown(ch, export, media, key))))
            if ch.appendix is not None:
                appendix.append((SimpleNamespace(title=ch.title, anchor=ch.appendix_anchor),
                                 refuse_raw(_appendix_markdown(ch, export, media, key))))
        except Exception as exc:
            log.warning("chapter %s could not be converted to markdown: %s", ch.name, exc)
            ch.status, ch.error = "failed", f"The chapter could not be rendered: {type(exc).__name__}: {exc}"
            body.append((ch, _chapter_markdown(ch, export, media, key)))
    refs = references(chapters)
    if refs:
        appendix.append((SimpleNamespace(title="References", anchor=REFERENCES_ANCHOR),
                         f"# References {{#{REFERENCES_ANCHOR}}}\n\n{refs}\n"))
    return body, appendix


def _typst_preamble(title: str, header_items, meta: dict | None = None, chapters=()) -> str:
    """``report.with(...)``: the title, the header information, and (with findings) the status, the top
    findings and each chapter's worst severity."""
    meta = meta or {}
    items = ", ".join(f"({typst_string(k)}, {typst_string(v)})" for k, v in header_items)
    args = [f"title: {typst_string(title)}", f"meta: ({items}{',' if header_items else ''})"]
    if meta.get("status"):
        anchors = {ch.anchor for ch in chapters}
        rows = []
        for f in meta.get("top_findings", []):
            target = f["section"] if f["section"] in anchors else None
            rows.append(f"({typst_string(f['severity'])}, {typst_string(f['title'])}, {typst_string(f['number'])}, "
                        f"{typst_string(target) if target else 'none'})")
        severity = ", ".join(f"{typst_string(ch.anchor)}: {typst_string(ch.severity)}" for ch in chapters if ch.severity)
        args += [f"status: {typst_string(meta['status'])}", f"findings: ({', '.join(rows)}{',' if rows else ''})",
                 f"severity: ({severity or ':'})"]
    return '#import "report.typ": *\n' f"#show: report.with({', '.join(args)})\n\n"


def _typst_stub(ch, message: str) -> str:
    return (f"#heading(level: 1, {typst_string(ch.title)}) <{ch.anchor}>\n\n"
            f'#callout(kind: "danger")[*This chapter could not be typeset* \\\n'
            f"The rest of the report is unaffected. The error:\n"
            f"#raw(block: true, {typst_string(message)})]\n")


#: the default wall-clock limit of rendering a PDF, in seconds (``--pdf-timeout``)
PDF_TIMEOUT = 300.0
_TYPST = ("import sys, typst\ntry:\n    typst.compile(sys.argv[1], output=sys.argv[2], root=sys.argv[3])\n"
          "except Exception as exc:\n    sys.stderr.write(str(exc))\n    sys.exit(1)\n")


class PdfTimeout(RuntimeError):
    """Rendering the PDF passed its wall-clock limit: it was not written (the other formats are)."""

    def __init__(self, limit: float):
        super().__init__(f"report.pdf was not rendered: it took longer than the limit of {limit:g} s "
                         "(--pdf-timeout SECONDS sets it)")
        self.limit = limit


class _Deadline:
    """The time left of a PDF's limit (``None``: no limit)."""

    def __init__(self, limit: float | None):
        self.limit = limit
        self.end = None if limit is None else time.monotonic() + limit

    def left(self) -> float | None:
        if self.end is None:
            return None
        left = self.end - time.monotonic()
        if left <= 0:
            raise PdfTimeout(self.limit)
        return left


def _compile(main: Path, root: Path, pdf: Path, deadline: _Deadline) -> None:
    """Typst in a process of its own, killed when the deadline passes (a document can loop for hours)."""
    try:
        proc = subprocess.run([sys.executable, "-c", _TYPST, str(main), str(pdf), str(root)], capture_output=True,
                              text=True, timeout=deadline.left())
    except subprocess.TimeoutExpired:
        raise PdfTimeout(deadline.limit) from None
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr or "").strip() or f"typst exited with status {proc.returncode}")


def _typst_document(preamble: str, bodies: list[str], n_body: int) -> str:
    """The Typst source: the chapters, then (after ``#show: appendix``) the appendices."""
    return preamble + "\n".join(bodies[:n_body]) + "\n\n#show: appendix\n\n" + "\n".join(bodies[n_body:])


def render_pdf(out_dir: Path, chapters: list[ChapterDoc], title: str, header_items, meta: dict,
               timeout: float | None = PDF_TIMEOUT, converting=None) -> Path:
    """``report.pdf``; raises :class:`PdfTimeout` when it takes longer than ``timeout`` seconds (None: no limit).
    ``converting()``, when given, is called once the report's markdown is made, as pandoc starts on it."""
    deadline = _Deadline(timeout)
    tdir = templates_dir()
    lua = tdir / "embeval.lua"
    with tempfile.TemporaryDirectory(prefix="embeval-pdf-") as tmp:
        tmp = Path(tmp)
        shutil.copy(tdir / "report.typ", tmp / "report.typ")
        body, appendix = report_parts(chapters, tdir, tmp)
        units = body + appendix
        parts = [md for _, md in units]
        brk = f"\n\n```{{=typst}}\n{_CHAPTER_BREAK}\n```\n\n"
        ids = ",".join(u.anchor for u, _ in units)
        # a huge --columns keeps pandoc from fixing relative column widths (from the dashes of
        # long pipe-table lines): Typst then sizes the columns to their content and page width
        typst_args = [f"--lua-filter={lua}", "--columns=100000"]
        if converting is not None:
            converting()
        try:
            bodies = _pandoc(brk.join(parts), "typst", typst_args).split(_CHAPTER_BREAK)
            if len(bodies) != len(units):
                raise RuntimeError("chapter markers lost in conversion")
        except Exception as exc:  # isolate the chapter pandoc cannot convert
            log.debug("pandoc (whole report) failed: %s; converting chapter by chapter", exc)
            bodies = []
            for (unit, _), part in zip(units, parts):
                try:
                    bodies.append(_pandoc(part, "typst", [*typst_args, f"--metadata=embeval-ids={ids}"]))
                except Exception as exc2:
                    bodies.append(_typst_stub(unit, str(exc2)))
        preamble = _typst_preamble(title, header_items, meta, chapters)
        main, pdf = tmp / "main.typ", tmp / "report.pdf"
        n_body = len(body)
        main.write_text(_typst_document(preamble, bodies, n_body), encoding="utf-8")
        try:
            _compile(main, tmp, pdf, deadline)
        except PdfTimeout:
            raise
        except Exception as exc:
            # find the chapters Typst rejects: compile each with the others reduced to stubs
            log.warning("typst failed on the whole report (%s); isolating the failing chapter(s)", exc)
            stubs = [_typst_stub(unit, "") for unit, _ in units]
            bad = {}
            for i in range(len(units)):
                trial = stubs[:i] + [bodies[i]] + stubs[i + 1:]
                main.write_text(_typst_document(preamble, trial, n_body), encoding="utf-8")
                try:
                    _compile(main, tmp, pdf, deadline)
                except PdfTimeout:
                    raise
                except Exception as exc_i:
                    bad[i] = str(exc_i)
            if not bad:
                bad = {i: str(exc) for i in range(len(units))}
            final = [_typst_stub(unit, bad[i]) if i in bad else bodies[i] for i, (unit, _) in enumerate(units)]
            main.write_text(_typst_document(preamble, final, n_body), encoding="utf-8")
            try:
                _compile(main, tmp, pdf, deadline)
            except PdfTimeout:
                raise
            except Exception as exc_final:
                keep = Path(out_dir) / "report.typ.failed"
                replace_with(keep, lambda tmp: shutil.copyfile(main, tmp), "render:")
                raise RuntimeError(f"typst could not typeset the report: {exc_final} (source kept in {keep})") \
                    from exc_final
        target = Path(out_dir) / "report.pdf"
        _atomic_write(target, pdf.read_bytes())
    return target
