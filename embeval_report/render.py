"""Render the executed chapter notebooks of a report folder into one report.

``OUT/chapters/NN_<name>.ipynb`` (executed by papermill) become

* ``OUT/report.html`` -- one self-contained file: CSS inlined, figures as data URIs, math as
  MathML, no scripts and no network resources;
* ``OUT/report.pdf`` -- pandoc markdown -> Typst -> PDF with the ``typst`` package.

Two renderers: ``builtin`` (nbconvert + pandoc + typst, always available) and ``quarto``
(a Quarto book from ``_quarto.yml``, used when ``quarto`` is on PATH).

Notebook metadata read: ``nb.metadata["embeval"]`` = ``{"name", "title", "status": "ok" |
"failed" | "skipped", "error"}`` (``reason`` is accepted for ``error``). Header information
comes from ``OUT/metrics.json`` (``title``, ``source``, ``seed``, ``device``, ``version``,
``generated``), completed from ``OUT/run.json`` when present.
"""
from __future__ import annotations

import copy
import datetime as _dt
import html as _html
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["render_report", "quarto_available", "templates_dir"]

DEFAULT_TITLE = "Embedding evaluation report"

# Cells with these tags are not part of the report at all.
REMOVE_CELL_TAGS = {"parameters", "injected-parameters", "remove-cell", "remove_cell",
                    "papermill-error-cell-tag"}
REMOVE_OUTPUT_TAGS = {"remove-output", "remove_output"}

# pandoc markdown as notebooks write it: no YAML/title blocks, no citations (``@name`` is text),
# lists allowed right after a paragraph and headings without a blank line before (Jupyter style).
MARKDOWN_FORMAT = ("markdown-yaml_metadata_block-pandoc_title_block-citations-blank_before_header"
                   "+lists_without_preceding_blankline")
PDF_MIME_PRIORITY = ["text/markdown", "image/png", "image/svg+xml", "image/jpeg", "text/latex", "text/plain"]
HEADER_FIELDS = (("source", "Source"), ("seed", "Seed"), ("device", "Device"), ("version", "Version"),
                 ("generated", "Generated"))

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_CHUNK_BREAK = "<!-- embeval-chunk-break -->"
_CHAPTER_BREAK = "// embeval-chapter-break"
_H1 = re.compile(r"^[ ]{0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")


# --------------------------------------------------------------------------------------------
# locations and tools
# --------------------------------------------------------------------------------------------
def templates_dir() -> Path:
    """The report templates: ``templates/`` of the checkout, or the wheel's copy
    (``EMBEVAL_TEMPLATES`` overrides, for trying a changed look)."""
    env = os.environ.get("EMBEVAL_TEMPLATES")
    if env:
        return Path(env)
    from .resources import templates_dir as _templates_dir
    return _templates_dir()


def _quarto_template() -> Path:
    from .resources import quarto_template
    return quarto_template()


def quarto_available() -> bool:
    """Whether the ``quarto`` command is on PATH."""
    return shutil.which("quarto") is not None


def _pandoc(text: str, to: str, extra_args: list[str]) -> str:
    import pypandoc
    return pypandoc.convert_text(text, to, format=MARKDOWN_FORMAT, extra_args=["--wrap=none", "--quiet", *extra_args],
                                 sandbox=False)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text or "")


# --------------------------------------------------------------------------------------------
# reading the report folder
# --------------------------------------------------------------------------------------------
@dataclass
class ChapterDoc:
    path: Path
    name: str
    title: str
    status: str                     # ok | failed | skipped
    error: str | None
    nb: object | None               # nbformat.NotebookNode, cells already filtered
    sections: list = field(default_factory=list)
    body: str = ""

    @property
    def anchor(self) -> str:
        return "chapter-" + _slug(self.name)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(s)).strip("-") or "chapter"


def _cell_tags(cell) -> set:
    return set(cell.get("metadata", {}).get("tags", []) or [])


def _first_h1(nb) -> str | None:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and not _cell_tags(cell) & REMOVE_CELL_TAGS:
            for line in cell.source.splitlines():
                if line.strip():
                    m = _H1.match(line)
                    return m.group(1).strip() if m else None
    return None


def _error_from_outputs(nb) -> str | None:
    for cell in nb.cells:
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") == "error":
                tb = "\n".join(out.get("traceback", []) or [])
                return strip_ansi(tb or f"{out.get('ename', 'Error')}: {out.get('evalue', '')}")
    return None


def _filtered_cells(nb) -> list:
    cells = []
    for cell in nb.cells:
        tags = _cell_tags(cell)
        if tags & REMOVE_CELL_TAGS:
            continue
        if cell.cell_type == "markdown" and not cell.source.strip():
            continue
        if cell.cell_type == "code":
            if tags & REMOVE_OUTPUT_TAGS:
                continue
            outs = [o for o in cell.get("outputs", []) or []
                    if not (o.get("output_type") == "stream" and o.get("name") != "stdout")
                    and not (o.get("output_type") in ("display_data", "execute_result") and not o.get("data"))]
            if not outs:
                continue
            cell.outputs = outs
            cell.source = ""  # never shown; keeps the exporters from highlighting code
        cells.append(cell)
    return cells


def _drop_title_heading(nb) -> None:
    """Remove the chapter's ``# Title`` line: the renderers write the title from the metadata
    (escaped, and the same in the contents, the HTML and the PDF)."""
    if not nb.cells or nb.cells[0].cell_type != "markdown":
        return
    lines = nb.cells[0].source.splitlines()
    i = next((k for k, ln in enumerate(lines) if ln.strip()), None)
    if i is None or not _H1.match(lines[i]):
        return
    rest = "\n".join(lines[i + 1:]).strip("\n")
    if rest.strip():
        nb.cells[0].source = rest
    else:
        del nb.cells[0]


def _load_chapter(path: Path, statuses: dict) -> ChapterDoc:
    import nbformat

    stem_name = re.sub(r"^\d+[_-]", "", path.stem)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # unreadable notebook: a failed chapter, not a failed report
        return ChapterDoc(path, stem_name, stem_name.replace("_", " ").title(), "failed",
                          f"could not read {path.name}: {exc}", None)
    meta = nb.metadata.get("embeval") or {}
    name = str(meta.get("name") or stem_name)
    title = str(meta.get("title") or _first_h1(nb) or name.replace("_", " ").title())
    st = statuses.get(name) if isinstance(statuses.get(name), dict) else {}
    status = str(meta.get("status") or st.get("status") or "ok").lower()
    if status not in ("ok", "failed", "skipped"):
        status = "ok"
    error = meta.get("error") or meta.get("reason") or st.get("reason")
    if status == "failed" and not error:
        error = _error_from_outputs(nb)
    error = strip_ansi(str(error)).strip() if error else None
    nb = copy.deepcopy(nb)
    nb.cells = _filtered_cells(nb) if status == "ok" else []
    _drop_title_heading(nb)
    return ChapterDoc(path, name, title, status, error, nb)


def load_chapters(out_dir: Path) -> list[ChapterDoc]:
    """The chapters of a report folder, in filename order (summary first)."""
    chapters_dir = Path(out_dir) / "chapters"
    paths = sorted(p for p in chapters_dir.glob("*.ipynb") if not p.name.startswith("."))
    paths.sort(key=lambda p: (re.sub(r"^\d+[_-]", "", p.stem) != "summary",))  # stable: summary first
    statuses = {}
    try:
        statuses = json.loads((Path(out_dir) / "metrics.json").read_text()).get("chapters") or {}
    except Exception:
        pass
    return [_load_chapter(p, statuses if isinstance(statuses, dict) else {}) for p in paths]


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except Exception:
        return {}


def _format_generated(value) -> str:
    s = str(value)
    try:
        dt = _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return s
    out = dt.strftime("%Y-%m-%d %H:%M")
    if dt.tzinfo is not None:
        off = dt.strftime("%z")
        out += " UTC" if off in ("+0000", "-0000") else f" UTC{off[:3]}:{off[3:]}"
    return out


def read_header(out_dir: Path, title: str | None = None) -> tuple[str, list[tuple[str, str]], dict]:
    """(title, [(label, value)], raw values) for the report header."""
    metrics = _read_json(Path(out_dir) / "metrics.json")
    run = _read_json(Path(out_dir) / "run.json")
    meta = {}
    for key in ("title", "source", "seed", "device", "version", "generated"):
        v = metrics.get(key)
        if v is None or v == "":
            v = run.get(key)
        if v is not None and v != "":
            meta[key] = v
    if "generated" in meta:
        meta["generated"] = _format_generated(meta["generated"])
    if "version" in meta:
        meta["version"] = str(meta["version"])
    final_title = title or meta.get("title") or DEFAULT_TITLE
    items = [(label, str(meta[key])) for key, label in HEADER_FIELDS if key in meta]
    items = [(lab, f"embeval-report {val}" if lab == "Version" else val) for lab, val in items]
    return str(final_title), items, meta


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------
class _MarkdownHTML:
    """markdown -> HTML with MathML through pandoc, batched per chapter (one pandoc call)."""

    def __init__(self, id_prefix: str, lua: Path):
        self.args = ["--mathml", f"--metadata=embeval-id-prefix={id_prefix}", f"--lua-filter={lua}"]
        self.cache: dict[str, str] = {}

    def prime(self, texts) -> None:
        todo = list(dict.fromkeys(t for t in texts if t and t not in self.cache))
        if not todo:
            return
        try:
            out = _pandoc(f"\n\n{_CHUNK_BREAK}\n\n".join(todo), "html5", self.args)
            parts = out.split(_CHUNK_BREAK)
            if len(parts) == len(todo):
                self.cache.update(zip(todo, (p.strip() for p in parts)))
                return
        except Exception as exc:  # fall back to one call per text
            log.debug("batched pandoc conversion failed: %s", exc)
        for t in todo:
            self(t)

    def __call__(self, text) -> str:
        text = str(text or "")
        if not text.strip():
            return ""
        if text not in self.cache:
            try:
                self.cache[text] = _pandoc(text, "html5", self.args).strip()
            except Exception as exc:
                log.warning("pandoc could not convert a markdown block: %s", exc)
                self.cache[text] = f"<pre>{_html.escape(text)}</pre>"
        return self.cache[text]


def _markdown_texts(nb) -> list[str]:
    texts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            texts.append(cell.source)
        for out in cell.get("outputs", []) or []:
            data = out.get("data") or {}
            role = ((out.get("metadata") or {}).get("embeval") or {}).get("role")
            if "text/markdown" in data and ("text/html" not in data or role == "callout"):
                texts.append(data["text/markdown"])
    return texts


_H2_TAG = re.compile(r'<h2\b([^>]*)\bid="([^"]*)"[^>]*>(.*?)</h2>', re.S)
_TAG = re.compile(r"<[^>]+>")


def _html_text(fragment: str) -> str:
    fragment = re.sub(r"<math\b.*?</math>", lambda m: _html.unescape(
        re.search(r'alttext="([^"]*)"', m.group(0)).group(1)) if 'alttext="' in m.group(0) else "", fragment,
        flags=re.S)
    return re.sub(r"\s+", " ", _html.unescape(_TAG.sub("", fragment))).strip()


def _chapter_html(ch: ChapterDoc, tdir: Path) -> None:
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    md = _MarkdownHTML(_slug(ch.name) + "-", tdir / "embeval.lua")
    md.prime(_markdown_texts(ch.nb))
    c = Config()
    c.HTMLExporter.exclude_input = True
    c.HTMLExporter.exclude_input_prompt = True
    c.HTMLExporter.exclude_output_prompt = True
    exporter = HTMLExporter(config=c, template_name="embeval_html",
                            extra_template_basedirs=[str(tdir / "nbconvert")],
                            filters={"md2html": md})
    body, _ = exporter.from_notebook_node(ch.nb, resources={"embeval": {"chapter": ch.name}})
    body = _sanitize(body)
    ch.sections = [{"id": _html.unescape(m.group(2)), "title": _html_text(m.group(3))}
                   for m in _H2_TAG.finditer(body)]
    ch.body = body.strip()


_UNSAFE = re.compile(r"<script\b.*?</script\s*>|<script\b[^>]*/?>|<iframe\b.*?</iframe\s*>|<link\b[^>]*>|"
                     r"<meta\b[^>]*>|<base\b[^>]*>", re.S | re.I)


def _sanitize(body: str) -> str:
    """No scripts, frames or linked resources in the report (self-contained, no network)."""
    return _UNSAFE.sub("", body)


def render_html(out_dir: Path, chapters: list[ChapterDoc], title: str, header_items, meta: dict) -> Path:
    import jinja2
    from markupsafe import Markup

    tdir = templates_dir()
    for ch in chapters:
        if ch.status != "ok":
            continue
        try:
            _chapter_html(ch, tdir)
        except Exception as exc:  # one broken chapter must not lose the report
            log.warning("chapter %s could not be rendered to HTML: %s", ch.name, exc)
            ch.status, ch.error = "failed", f"The chapter could not be rendered: {type(exc).__name__}: {exc}"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(tdir)), autoescape=True,
                             trim_blocks=False, lstrip_blocks=False)
    page = env.get_template("report.html.j2").render(
        title=title, header_items=header_items, meta=meta,
        css=Markup((tdir / "report.css").read_text(encoding="utf-8")),
        chapters=[{"name": ch.name, "title": ch.title, "status": ch.status, "anchor": ch.anchor,
                   "error": ch.error, "sections": ch.sections, "body": Markup(ch.body)} for ch in chapters])
    target = Path(out_dir) / "report.html"
    _atomic_write(target, page.encode("utf-8"))
    return target


def _atomic_write(target: Path, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, target)


# --------------------------------------------------------------------------------------------
# PDF
# --------------------------------------------------------------------------------------------
def _md_codeblock(text) -> str:
    text = str(text or "").rstrip("\n")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _status_box_md(ch: ChapterDoc) -> str:
    if ch.status == "failed":
        return ("::: {.callout .callout-danger}\n**This chapter failed**\n\n"
                "The rest of the report is unaffected. The error:\n\n"
                f"{_md_codeblock(ch.error or 'unknown error')}\n:::\n")
    from .display import escape
    reason = f"\n\n{escape(ch.error)}" if ch.error else ""
    return f"::: {{.callout .callout-note}}\n**This chapter was not run**{reason}\n:::\n"


def _chapter_markdown(ch: ChapterDoc, tdir: Path, media: Path, key: str) -> str:
    """The chapter as pandoc markdown; its images are written to ``media``."""
    from nbconvert import MarkdownExporter
    from traitlets.config import Config

    from .display import escape

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


# --------------------------------------------------------------------------------------------
# Quarto
# --------------------------------------------------------------------------------------------
def _render_quarto(out_dir: Path, title: str, formats, header_items, meta: dict) -> dict[str, Path]:
    """Render with Quarto: a book (``_quarto.yml``) from the executed notebooks.

    The book is staged in ``OUT/_quarto`` (chapter notebooks copied, the summary as
    ``index.ipynb``); each format is rendered on its own (``quarto render --to FMT``); the
    book's PDF becomes ``report.pdf``. A Quarto *book* is a multi-page site in HTML, so the
    HTML report is rendered from one notebook merging all chapters, with the book's HTML
    options, to keep ``report.html`` a single self-contained file.
    """
    import yaml

    exe = shutil.which("quarto")
    if not exe:
        raise RuntimeError("quarto is not on PATH: install Quarto (https://quarto.org) or use renderer='builtin'")
    out_dir = Path(out_dir)
    config = yaml.safe_load(_quarto_template().read_text(encoding="utf-8")) or {}
    stage = out_dir / "_quarto"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        return _quarto_stage_and_render(exe, stage, out_dir, config, title, formats, header_items, meta)
    finally:  # the report folder keeps only the results
        shutil.rmtree(stage, ignore_errors=True)


def _quarto_stage_and_render(exe, stage: Path, out_dir: Path, config: dict, title: str, formats, header_items,
                             meta: dict) -> dict[str, Path]:
    import nbformat
    import yaml

    from .display import escape

    chapters = load_chapters(out_dir)
    files = []
    merged = nbformat.v4.new_notebook()
    merged.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                       "language_info": {"name": "python"}}
    subtitle = " · ".join(f"{k}: {v}" for k, v in header_items)
    for i, ch in enumerate(chapters):
        fname = "index.ipynb" if i == 0 else f"{i:02d}_{_slug(ch.name)}.ipynb"
        nb = copy.deepcopy(ch.nb) if ch.nb is not None else nbformat.v4.new_notebook()
        heading = f"# {escape(ch.title)} {{#{ch.anchor}}}"
        if ch.status != "ok":  # Quarto's own callout syntax
            nb.cells = [nbformat.v4.new_markdown_cell(
                heading + "\n\n" + _status_box_md(ch).replace("{.callout .callout-", "{.callout-"))]
        else:
            nb.cells.insert(0, nbformat.v4.new_markdown_cell(heading))
        nb.metadata.setdefault("kernelspec", merged.metadata["kernelspec"])
        nbformat.write(nb, stage / fname)
        files.append(fname)
        merged.cells.extend(copy.deepcopy(nb.cells))
    book = config.setdefault("book", {})
    book["title"] = title
    if subtitle:
        book["subtitle"] = subtitle
    if meta.get("generated"):
        book["date"] = str(meta["generated"])
    book["chapters"] = files
    config.setdefault("project", {})["type"] = "book"
    result: dict[str, Path] = {}
    env = dict(os.environ, QUARTO_PYTHON=os.environ.get("QUARTO_PYTHON", sys.executable))

    def run(args, cwd):
        proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"quarto {' '.join(args)} failed:\n{(proc.stderr or proc.stdout)[-4000:]}")

    if "pdf" in formats:
        (stage / "_quarto.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
        run(["render", "--to", "pdf"], stage)
        outdir = stage / (config.get("project", {}).get("output-dir") or "_book")
        pdfs = sorted(outdir.rglob("*.pdf"))
        if not pdfs:
            raise RuntimeError(f"quarto did not write a PDF under {outdir}")
        shutil.copy(pdfs[0], out_dir / "report.pdf")
        result["pdf"] = out_dir / "report.pdf"
    if "html" in formats:
        single = stage / "single"
        single.mkdir()
        html_opts = dict((config.get("format") or {}).get("html") or {})
        html_opts.update({"embed-resources": True, "toc": True})
        doc_config = {"project": {"type": "default"}, "title": title,
                      "format": {"html": html_opts},
                      **{k: v for k, v in config.items() if k in ("execute", "echo", "warning", "jupyter")}}
        if subtitle:
            doc_config["subtitle"] = subtitle
        (single / "_quarto.yml").write_text(yaml.safe_dump(doc_config, sort_keys=False, allow_unicode=True))
        nbformat.write(merged, single / "report.ipynb")
        run(["render", "report.ipynb", "--to", "html"], single)
        produced = single / "report.html"
        if not produced.exists():
            found = sorted(single.rglob("report.html"))
            if not found:
                raise RuntimeError("quarto did not write report.html")
            produced = found[0]
        shutil.copy(produced, out_dir / "report.html")
        result["html"] = out_dir / "report.html"
    return result


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------
def render_report(out_dir, *, title: str | None = None, formats=("html", "pdf"),
                  renderer: str = "auto") -> dict[str, Path]:
    """Render ``out_dir/chapters/*.ipynb`` into ``out_dir/report.html`` and/or ``report.pdf``.

    ``renderer``: ``"auto"`` (Quarto when on PATH, else builtin; falls back to builtin if
    Quarto fails), ``"quarto"`` or ``"builtin"``. Returns ``{format: path}`` of the files written.
    """
    out_dir = Path(out_dir)
    if isinstance(formats, str):
        formats = (formats,)
    formats = tuple(dict.fromkeys(f.lower() for f in formats))
    unknown = [f for f in formats if f not in ("html", "pdf")]
    if unknown:
        raise ValueError(f"unknown report format(s): {', '.join(unknown)} (expected html, pdf)")
    if renderer not in ("auto", "quarto", "builtin"):
        raise ValueError(f"renderer must be auto, quarto or builtin, not {renderer!r}")
    if not (out_dir / "chapters").is_dir():
        raise FileNotFoundError(f"{out_dir / 'chapters'}: no executed chapters to render")
    final_title, header_items, meta = read_header(out_dir, title)

    if renderer == "quarto" or (renderer == "auto" and quarto_available()):
        try:
            return _render_quarto(out_dir, final_title, formats, header_items, meta)
        except Exception as exc:
            if renderer == "quarto":
                raise
            log.warning("quarto rendering failed, using the builtin renderer: %s", exc)
            warnings.warn(f"quarto rendering failed, using the builtin renderer: {exc}", RuntimeWarning,
                          stacklevel=2)

    result: dict[str, Path] = {}
    if "html" in formats:
        result["html"] = render_html(out_dir, load_chapters(out_dir), final_title, header_items, meta)
    if "pdf" in formats:
        result["pdf"] = render_pdf(out_dir, load_chapters(out_dir), final_title, header_items, meta)
    return result
