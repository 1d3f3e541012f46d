"""The built-in HTML renderer: one self-contained file (CSS inlined, figures as data URIs, MathML, no scripts)."""

import html as _html
import logging
import re
from pathlib import Path

from .common import _CHUNK_BREAK, ChapterDoc, _atomic_write, _pandoc, _slug, templates_dir

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
