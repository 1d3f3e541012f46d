"""The built-in PDF renderer: pandoc markdown -> Typst -> PDF with the ``typst`` package."""

import copy
import logging
import re
import shutil
import tempfile
from pathlib import Path

from .common import (
    _CHAPTER_BREAK,
    PDF_MIME_PRIORITY,
    ChapterDoc,
    _atomic_write,
    _md_codeblock,
    _pandoc,
    _slug,
    _status_box_md,
    templates_dir,
)

log = logging.getLogger(__name__)

def _chapter_markdown(ch: ChapterDoc, tdir: Path, media: Path, key: str) -> str:
    """The chapter as pandoc markdown; its images are written to ``media``."""
    from nbconvert import MarkdownExporter
    from traitlets.config import Config

    from ...present.display import escape

    heading = f"# {escape(ch.title)} {{#{ch.anchor}}}\n\n"
    if ch.status != "ok" or ch.nb is None:
        return heading + _status_box_md(ch)
    c = Config()
    c.MarkdownExporter.exclude_input = True
    c.NbConvertBase.display_data_priority = PDF_MIME_PRIORITY
    exporter = MarkdownExporter(config=c, template_name="embeval_markdown",
                                extra_template_basedirs=[str(tdir / "nbconvert")],
                                filters={"md_escape": escape, "md_codeblock": _md_codeblock})
    body, resources = exporter.from_notebook_node(copy.deepcopy(ch.nb), resources={"unique_key": key})
    for name, data in (resources.get("outputs") or {}).items():
        (media / name).write_bytes(data)
    return heading + re.sub(r"\n{3,}", "\n\n", body).strip() + "\n"


def _typst_str(s) -> str:
    s = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", str(s))
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _typst_preamble(title: str, header_items) -> str:
    meta = ", ".join(f"({_typst_str(k)}, {_typst_str(v)})" for k, v in header_items)
    return ('#import "report.typ": *\n'
            f"#show: report.with(title: {_typst_str(title)}, meta: ({meta}{',' if header_items else ''}))\n\n")


def _typst_stub(ch: ChapterDoc, message: str) -> str:
    return (f"#heading(level: 1, {_typst_str(ch.title)}) <{ch.anchor}>\n\n"
            f'#callout(kind: "danger")[*This chapter could not be typeset* \\\n'
            f"The rest of the report is unaffected. The error:\n"
            f"#raw(block: true, {_typst_str(message)})]\n")


def _compile(main: Path, root: Path, pdf: Path) -> None:
    import typst
    typst.compile(str(main), output=str(pdf), root=str(root))


def render_pdf(out_dir: Path, chapters: list[ChapterDoc], title: str, header_items, meta: dict) -> Path:
    tdir = templates_dir()
    lua = tdir / "embeval.lua"
    with tempfile.TemporaryDirectory(prefix="embeval-pdf-") as tmp:
        tmp = Path(tmp)
        shutil.copy(tdir / "report.typ", tmp / "report.typ")
        parts = []
        for i, ch in enumerate(chapters):
            key = f"{i:02d}_{_slug(ch.name)}"
            try:
                parts.append(_chapter_markdown(ch, tdir, tmp, key))
            except Exception as exc:
                log.warning("chapter %s could not be converted to markdown: %s", ch.name, exc)
                ch.status, ch.error = "failed", f"The chapter could not be rendered: {type(exc).__name__}: {exc}"
                parts.append(_chapter_markdown(ch, tdir, tmp, key))
        brk = f"\n\n```{{=typst}}\n{_CHAPTER_BREAK}\n```\n\n"
        ids = ",".join(ch.anchor for ch in chapters)
        # a huge --columns keeps pandoc from fixing relative column widths (from the dashes of
        # long pipe-table lines): Typst then sizes the columns to their content and page width
        typst_args = [f"--lua-filter={lua}", "--columns=100000"]
        try:
            bodies = _pandoc(brk.join(parts), "typst", typst_args).split(_CHAPTER_BREAK)
            if len(bodies) != len(chapters):
                raise RuntimeError("chapter markers lost in conversion")
        except Exception as exc:  # isolate the chapter pandoc cannot convert
            log.debug("pandoc (whole report) failed: %s; converting chapter by chapter", exc)
            bodies = []
            for ch, part in zip(chapters, parts):
                try:
                    bodies.append(_pandoc(part, "typst", [*typst_args, f"--metadata=embeval-ids={ids}"]))
                except Exception as exc2:
                    bodies.append(_typst_stub(ch, str(exc2)))
        preamble = _typst_preamble(title, header_items)
        main, pdf = tmp / "main.typ", tmp / "report.pdf"
        main.write_text(preamble + "\n".join(bodies), encoding="utf-8")
        try:
            _compile(main, tmp, pdf)
        except Exception as exc:
            # find the chapters Typst rejects: compile each with the others reduced to stubs
            log.warning("typst failed on the whole report (%s); isolating the failing chapter(s)", exc)
            stubs = [_typst_stub(ch, "") for ch in chapters]
            bad = {}
            for i in range(len(chapters)):
                trial = stubs[:i] + [bodies[i]] + stubs[i + 1:]
                main.write_text(preamble + "\n".join(trial), encoding="utf-8")
                try:
                    _compile(main, tmp, pdf)
                except Exception as exc_i:
                    bad[i] = str(exc_i)
            if not bad:
                bad = {i: str(exc) for i in range(len(chapters))}
            final = [_typst_stub(ch, bad[i]) if i in bad else bodies[i] for i, ch in enumerate(chapters)]
            main.write_text(preamble + "\n".join(final), encoding="utf-8")
            try:
                _compile(main, tmp, pdf)
            except Exception as exc_final:
                keep = Path(out_dir) / "report.typ.failed"
                shutil.copy(main, keep)
                raise RuntimeError(f"typst could not typeset the report: {exc_final} (source kept in {keep})") \
                    from exc_final
        target = Path(out_dir) / "report.pdf"
        _atomic_write(target, pdf.read_bytes())
    return target
