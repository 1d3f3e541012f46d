"""The built-in HTML renderer: one self-contained file (CSS inlined, figures as data URIs, MathML, no scripts),
through the allow-list sanitizer with its Content-Security-Policy (:mod:`.sanitize`)."""

import html as _html
import logging
import re
import threading
from pathlib import Path

from .common import (
    _CHUNK_BREAK,
    REFERENCES_ANCHOR,
    ChapterDoc,
    _atomic_write,
    _pandoc,
    _slug,
    references,
    templates_dir,
)
from .sanitize import sanitize_page

log = logging.getLogger(__name__)

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


class _Exporter:
    """One nbconvert exporter with the report's template for every notebook rendered by this process (its templates
    compiled once: 40 compilations took 0.8 s), markdown converted by the current notebook's :class:`_MarkdownHTML`.

    The notebook is validated once, after nbconvert's preprocessors, not after each of them, and the page is not
    parsed again with BeautifulSoup afterwards (nbconvert's HTML exporter does, to add a missing ``alt`` and
    ``tabindex`` to markup this template does not write): 40 % of the demo's HTML rendering time. What that pass
    changed that the sanitizer keeps, the order of a tag's attributes, is done by :func:`sorted_attributes`."""

    _shared: dict = {}
    _lock = threading.Lock()

    def __init__(self, tdir: Path):
        from nbconvert import HTMLExporter
        from traitlets.config import Config

        class Exporter(HTMLExporter):
            def from_notebook_node(self, nb, resources=None, **kw):
                """:meth:`HTMLExporter.from_notebook_node` without its BeautifulSoup pass over the page."""
                from nbconvert.exporters.templateexporter import TemplateExporter
                from nbconvert.filters.highlight import Highlight2HTML
                from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

                langinfo = nb.metadata.get("language_info", {})
                lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
                self.register_filter("highlight_code", self.filters.get(
                    "highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)))
                resources = self._init_resources(resources)
                self.register_filter("filter_data_type", WidgetsDataTypeFilter(
                    notebook_metadata=self._nb_metadata, parent=self, resources=resources))
                return TemplateExporter.from_notebook_node(self, nb, resources, **kw)

        self.tdir, self.markdown = tdir, None
        c = Config()
        c.HTMLExporter.exclude_input = True
        c.HTMLExporter.exclude_input_prompt = True
        c.HTMLExporter.exclude_output_prompt = True
        c.HTMLExporter.optimistic_validation = True
        self.exporter = Exporter(config=c, template_name="embeval_html",
                                 extra_template_basedirs=[str(tdir / "nbconvert")],
                                 filters={"md2html": lambda text: self.markdown(text)})

    @classmethod
    def shared(cls, tdir: Path) -> "_Exporter":
        """This process's exporter for the templates in ``tdir`` (made on first use)."""
        with cls._lock:
            if tdir not in cls._shared:
                cls._shared[tdir] = cls(tdir)
            return cls._shared[tdir]

    def __call__(self, nb, id_prefix: str, chapter: str) -> str:
        """Executed cells as HTML (markdown through pandoc, one call per notebook)."""
        with self._lock:  # one notebook at a time: the markdown filter reads this notebook's conversions
            self.markdown = _MarkdownHTML(id_prefix, self.tdir / "embeval.lua")
            self.markdown.prime(_markdown_texts(nb))
            body, _ = self.exporter.from_notebook_node(nb, resources={"embeval": {"chapter": chapter}})
            return sorted_attributes(body).strip()


#: one attribute of a start tag: bare, or its value double-quoted, single-quoted or unquoted
_ATTRIBUTE_TEXT = r"""[^\s"'<>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
#: a start tag with two or more attributes
_MULTI_ATTRIBUTE_TAG = re.compile(rf"<([A-Za-z][^\s/>]*)((?:\s+{_ATTRIBUTE_TEXT}){{2,}})\s*(/?)>")
_ATTRIBUTE = re.compile(_ATTRIBUTE_TEXT)


def sorted_attributes(page: str) -> str:
    """``page`` with each tag's attributes in alphabetical order, as BeautifulSoup writes them (so the page is the
    one nbconvert's HTML exporter wrote, byte for byte, once sanitized)."""
    def one(m: re.Match) -> str:
        attrs = sorted((a.group(0) for a in _ATTRIBUTE.finditer(m.group(2))),
                       key=lambda a: a.partition("=")[0].strip().lower())
        return f"<{m.group(1)} {' '.join(attrs)}{m.group(3)}>"
    return _MULTI_ATTRIBUTE_TAG.sub(one, page)


def _chapter_html(ch: ChapterDoc, export: _Exporter) -> None:
    body = export(ch.nb, _slug(ch.name) + "-", ch.name)
    ch.sections = [{"id": _html.unescape(m.group(2)), "title": _html_text(m.group(3))}
                   for m in _H2_TAG.finditer(body)]
    ch.body = body
    if ch.appendix is not None:
        ch.appendix_body = export(ch.appendix, ch.appendix_anchor + "-", ch.name)


_CAPTION = re.compile(r"<caption\b([^>]*)>(?:Table:)?\s*|<figcaption\b([^>]*)>(?:\s*<span class=\"figure-label\">Figure:</span>)?\s*")


def number_captions(page: str) -> str:
    """Number the captioned tables and figures of the page in document order, "Table 3:", "Figure 5:", as the
    PDF numbers them (Typst counts each kind of captioned figure in document order)."""
    counts = {"table": 0, "figure": 0}

    def one(m: re.Match) -> str:
        kind = "table" if m.group(0).startswith("<caption") else "figure"
        counts[kind] += 1
        attrs = m.group(1) if kind == "table" else m.group(2)
        tag = "caption" if kind == "table" else "figcaption"
        return (f'<{tag}{attrs or ""}><span class="caption-label">{kind.capitalize()} {counts[kind]}:</span> ')
    return _CAPTION.sub(one, page)


def render_html(out_dir: Path, chapters: list[ChapterDoc], title: str, header_items, meta: dict) -> Path:
    import jinja2
    from markupsafe import Markup

    tdir = templates_dir()
    export = _Exporter.shared(tdir)
    for ch in chapters:
        if ch.status != "ok":
            continue
        try:
            _chapter_html(ch, export)
        except Exception as exc:  # one broken chapter must not lose the report
            log.warning("chapter %s could not be rendered to HTML: %s", ch.name, exc)
            ch.status, ch.error = "failed", f"The chapter could not be rendered: {type(exc).__name__}: {exc}"
            ch.appendix, ch.appendix_body = None, ""
    refs = references(chapters)
    refs_html = _MarkdownHTML(REFERENCES_ANCHOR + "-", tdir / "embeval.lua")(refs) if refs else ""
    appendices = [ch for ch in chapters if ch.appendix is not None and ch.appendix_body]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(tdir)), autoescape=True,
                             trim_blocks=False, lstrip_blocks=False)
    page = env.get_template("report.html.j2").render(
        title=title, header_items=header_items, meta=meta,
        css=Markup((tdir / "report.css").read_text(encoding="utf-8")),
        chapters=[{"name": ch.name, "title": ch.title, "status": ch.status, "anchor": ch.anchor,
                   "error": ch.error, "sections": ch.sections, "body": Markup(ch.body), "severity": ch.severity}
                  for ch in chapters],
        appendices=[{"anchor": ch.appendix_anchor, "letter": ch.letter, "title": ch.title,
                     "body": Markup(ch.appendix_body)} for ch in appendices],
        references={"anchor": REFERENCES_ANCHOR, "letter": _next_letter(appendices), "body": Markup(refs_html)}
        if refs_html else None)
    target = Path(out_dir) / "report.html"
    _atomic_write(target, sanitize_page(number_captions(page)).encode("utf-8"))
    return target


def _next_letter(appendices) -> str:
    """The letter after the last chapter appendix's (the References'), as Typst counts them."""
    from .common import _letters

    letters = _letters()
    for _ in range(len(appendices) + 1):
        letter = next(letters)
    return letter
