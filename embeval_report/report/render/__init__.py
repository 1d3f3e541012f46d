"""Render the executed chapter notebooks of a report folder into one report.

``OUT/chapters/NN_<name>.ipynb`` (executed by papermill) become

* ``OUT/report.html`` -- one self-contained file: CSS inlined, figures as data URIs, math as
  MathML, no scripts and no network resources;
* ``OUT/report.pdf`` -- pandoc markdown -> Typst -> PDF with the ``typst`` package.

Two renderers: ``builtin`` (nbconvert + pandoc + typst, always available) and ``quarto``
(one Quarto document from ``_quarto.yml``, used when ``quarto`` is on PATH; its PDF through
Typst, or LaTeX on request).

Notebook metadata read: ``nb.metadata["embeval"]`` = ``{"name", "title", "status": "ok" |
"failed" | "skipped", "error"}`` (``reason`` is accepted for ``error``). Header information
comes from ``OUT/metrics.json`` (``title``, ``source`` (shown by its file name), ``seed``, ``device``,
``version``, ``generated``), completed from ``OUT/run.json`` when present; the status and the top
findings of the cover, and each chapter's worst severity in the contents, from
``OUT/results/findings.json``.

Reading order, the same in every renderer and format: cover, one-page contents, the chapters' bodies,
then each chapter's reference material (cells tagged ``appendix``, outputs marked
``{"embeval": {"appendix": heading}}``) as Appendix A, B, ... (a closed ``<details>`` in HTML), then the
References (:mod:`.references`: citations name their document).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

from .common import load_chapters, quarto_available, read_header
from .html import render_html
from .pdf import PDF_TIMEOUT, PdfTimeout, render_pdf
from .quarto import PDF_ENGINES, _render_quarto

__all__ = ["render_report", "render_each", "quarto_available", "PDF_TIMEOUT", "PdfTimeout"]

log = logging.getLogger(__name__)


def render_report(out_dir, *, title: str | None = None, formats=("html", "pdf"),
                  renderer: str = "auto", pdf_engine: str = "typst",
                  pdf_timeout: float | None = PDF_TIMEOUT) -> dict[str, Path]:
    """Render ``out_dir/chapters/*.ipynb`` into ``out_dir/report.html`` and/or ``report.pdf``.

    ``renderer``: ``"auto"`` (Quarto when on PATH, else builtin; a format Quarto fails on is
    rendered by the builtin renderer), ``"quarto"`` or ``"builtin"``. ``pdf_engine`` (Quarto
    only): ``"typst"`` (bundled with Quarto) or ``"latex"`` (needs TeX). ``pdf_timeout``: the PDF's wall-clock
    limit in seconds (None: none); past it the PDF is not written and :class:`PdfTimeout` says so in one line
    (the other formats are written first). Returns ``{format: path}`` of the files written.
    """
    out_dir, formats = Path(out_dir), _checked(out_dir, formats, renderer, pdf_engine)
    final_title, header_items, meta = read_header(out_dir, title)

    result: dict[str, Path] = {}
    if renderer == "quarto" or (renderer == "auto" and quarto_available()):
        try:
            return _render_quarto(out_dir, final_title, formats, header_items, pdf_engine, pdf_timeout)
        except PdfTimeout:
            raise
        except Exception as exc:
            if renderer == "quarto":
                raise
            log.warning("quarto rendering failed, using the builtin renderer: %s", exc)
            warnings.warn(f"quarto rendering failed, using the builtin renderer: {exc}", RuntimeWarning,
                          stacklevel=2)
            result = dict(getattr(exc, "files", {}))  # the formats Quarto did write stay

    if "html" in formats and "html" not in result:
        result["html"] = render_html(out_dir, load_chapters(out_dir), final_title, header_items, meta)
    if "pdf" in formats and "pdf" not in result:
        result["pdf"] = render_pdf(out_dir, load_chapters(out_dir), final_title, header_items, meta, pdf_timeout)
    return result


def _checked(out_dir, formats, renderer: str, pdf_engine: str) -> tuple[str, ...]:
    """The formats asked for (lower case, each once); a ValueError for an unknown format, renderer or engine, a
    FileNotFoundError for a folder without executed chapters."""
    if isinstance(formats, str):
        formats = (formats,)
    formats = tuple(dict.fromkeys(f.lower() for f in formats))
    unknown = [f for f in formats if f not in ("html", "pdf")]
    if unknown:
        raise ValueError(f"unknown report format(s): {', '.join(unknown)} (expected html, pdf)")
    if renderer not in ("auto", "quarto", "builtin"):
        raise ValueError(f"renderer must be auto, quarto or builtin, not {renderer!r}")
    if pdf_engine not in PDF_ENGINES:
        raise ValueError(f"pdf_engine must be {' or '.join(PDF_ENGINES)}, not {pdf_engine!r}")
    if not (Path(out_dir) / "chapters").is_dir():
        raise FileNotFoundError(f"{Path(out_dir) / 'chapters'}: no executed chapters to render")
    return formats


def render_each(out_dir, *, title: str | None = None, formats=("html", "pdf"), renderer: str = "auto",
                pdf_engine: str = "typst", pdf_timeout: float | None = PDF_TIMEOUT) -> dict[str, Path | Exception]:
    """Each format of :func:`render_report` on its own (a failing PDF never loses the HTML, nor one past its time
    limit): ``{format: the file written, or the exception that stopped it}``, in the order of ``formats``.

    The builtin renderer writes the HTML and the PDF side by side: the PDF (mostly pandoc's and Typst's processes)
    in this thread, the HTML in a second one, each from its own copy of the chapters (read here first: reading
    silences nbformat's warnings, which a second thread must not do at the same time; then copied). The same
    files as one after the other; on the 2-core machine the demo's rendering takes the PDF's time alone. A Quarto
    render, and a ValueError for arguments :func:`render_report` refuses, stay as they are."""
    try:
        checked = _checked(out_dir, formats, renderer, pdf_engine)
    except (ValueError, FileNotFoundError):  # each format then fails on its own, with this error
        checked = None
    quarto = renderer == "quarto" or (renderer == "auto" and quarto_available())
    if checked is None or quarto or set(checked) != {"html", "pdf"}:
        done = {}
        for fmt in checked or ((formats,) if isinstance(formats, str) else formats):
            try:
                done[fmt] = render_report(out_dir, title=title, formats=(fmt,), renderer=renderer,
                                          pdf_engine=pdf_engine, pdf_timeout=pdf_timeout)[fmt]
            except Exception as exc:
                done[fmt] = exc
        return done
    import copy
    import threading

    out_dir, written = Path(out_dir), {}
    try:
        final_title, header_items, meta = read_header(out_dir, title)
        read = load_chapters(out_dir)
        chapters = {"pdf": read, "html": copy.deepcopy(read)}  # 0.03 s, where reading them again takes 0.6
    except Exception as exc:  # what stops one format stops both, as in render_report
        return {fmt: exc for fmt in checked}

    def html() -> None:
        try:
            written["html"] = render_html(out_dir, chapters["html"], final_title, header_items, meta)
        except Exception as exc:
            written["html"] = exc

    second = threading.Thread(target=html, name="embeval-render-html", daemon=True)  # an interrupt does not wait

    def start() -> None:  # once the PDF's markdown is made (its Python part, which would share the GIL)
        try:
            second.start()
        except RuntimeError:  # no thread to be had: the HTML follows in this thread
            pass
    try:
        written["pdf"] = render_pdf(out_dir, chapters["pdf"], final_title, header_items, meta, pdf_timeout,
                                    converting=start)
    except Exception as exc:
        written["pdf"] = exc
    if second.ident is None:  # the PDF stopped before its markdown was made, or no thread started
        html()
    else:
        second.join()
    return {fmt: written[fmt] for fmt in checked}
