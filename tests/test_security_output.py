"""Issue 40, output: every user string is data in every output (HTML, Markdown, Typst, figures).

The escapers of :mod:`embeval_report.present.escape`, the allow-list sanitizer and Content-Security-Policy of every
HTML page (:mod:`embeval_report.report.render.sanitize`), raw Typst refused, the PDF's time limit, and one report
on a hostile copy of the demo (:mod:`hostile_set`: every string field carries HTML, Markdown, LaTeX, Typst and
``$`` payloads and bidi characters) whose every chapter runs and whose HTML and PDF hold the payloads as text.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
from html.parser import HTMLParser

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell, new_notebook

os.environ.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="ipython-"))

from embeval_report.present import escape as esc  # noqa: E402
from embeval_report.report.render import sanitize as san  # noqa: E402

import hostile_set as hs  # noqa: E402

# ------------------------------------------------------------------------------------------------ helpers


class _Live(HTMLParser):
    """What a browser would act on in a page: event handlers, non-http(s) URLs, scripts and frames."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.live, self.scripts, self.csp = [], [], []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            url = re.sub(r"[\x00-\x20]", "", value or "").lower()
            if name.startswith("on"):
                self.live.append((tag, name, value))
            elif re.match(r"(javascript|vbscript|data):", url) and not (
                    tag in ("img", "image") and name == "src" and url.startswith("data:image/")):
                self.live.append((tag, name, value[:60]))
        if tag in ("script", "iframe", "object", "embed", "frame", "base", "form"):
            self.scripts.append(tag)
        d = dict(attrs)
        if tag == "meta" and (d.get("http-equiv") or "").lower() == "content-security-policy":
            self.csp.append(d.get("content"))

    handle_startendtag = handle_starttag


def live(page: str) -> _Live:
    p = _Live()
    p.feed(page)
    p.close()
    return p


def _pandoc(text: str, to: str) -> str:
    from embeval_report.report.render.common import _pandoc as pandoc
    return pandoc(text, to, [])


def _pdf_text_and_uris(path):
    from pypdf import PdfReader

    reader = PdfReader(path)
    text = " ".join(p.extract_text() for p in reader.pages)
    uris = []
    for page in reader.pages:
        for a in page.get("/Annots") or []:
            action = a.get_object().get("/A")
            if action is not None and "/URI" in action.get_object():
                uris.append(str(action.get_object()["/URI"]))
    return re.sub(r"\s+", " ", text), uris


# ------------------------------------------------------------------------------------------------ escapers


def test_visible_shows_bidi_controls_and_zero_width_spaces():
    assert esc.visible("a\u202egnp.exe\u202c") == "a<U+202E>gnp.exe<U+202C>"
    assert esc.visible("x\u2066y\u2069\u200bz\ufeff") == "x<U+2066>y<U+2069><U+200B>z<U+FEFF>"
    assert esc.visible("ok\x00\x07 \t\n") == "ok \t\n"       # control characters dropped, tab and newline kept
    assert esc.visible("👩\u200d💻 داده") == "👩\u200d💻 داده"  # joiners and right-to-left scripts stay
    assert esc.visible(None) == ""
    for fn in (esc.html_text, esc.html_attr, esc.markdown, esc.typst_string, esc.mathtext, esc.markdown_code):
        assert "\u202e" not in fn("a\u202eb"), fn.__name__


def test_markdown_escape_is_literal_through_pandoc_html():
    html = _pandoc(esc.markdown(hs.NAME), "html5")
    p = live(html)
    assert not p.live and not p.scripts
    assert re.sub(r"</?p>", "", html).strip().count("<") == 0  # no element at all: text
    from html import unescape
    assert unescape(re.sub(r"</?p>", "", html)).strip() == esc.visible(hs.NAME)


def test_markdown_escape_is_literal_through_pandoc_typst():
    typ = _pandoc(esc.markdown(hs.NAME), "typst")
    assert "#eval(" not in typ.replace("\\#eval(", "") and "#link(" not in typ.replace("\\#link(", "")
    assert "#while" not in typ.replace("\\#while", "")


def test_markdown_escape_at_the_start_of_a_line():
    for s in ("# heading", "- item", "1. item", "> quote", ": def", "::: {.x}", "```{=typst}", "| a | b |"):
        html = _pandoc("x\n" + esc.markdown(s), "html5")
        assert re.fullmatch(r"<p>.*</p>", html.strip(), re.S), (s, html)


def test_markdown_code_span():
    assert esc.markdown_code("--mde a`b") == "``--mde a`b``"
    assert esc.markdown_code("`x`") == "`` `x` ``"
    html = _pandoc("x " + esc.markdown_code("a``b`{=typst}"), "html5")
    assert "<code>a``b`{=typst}</code>" in html


def test_typst_string_is_text_in_a_pdf(tmp_path):
    import typst

    quoted = esc.typst_string('a\\b"c')
    (tmp_path / "main.typ").write_text(f"#let s = {esc.typst_string(hs.NAME)}\n#s\n\n#text({quoted})\n", encoding="utf-8")
    typst.compile(str(tmp_path / "main.typ"), output=str(tmp_path / "out.pdf"), root=str(tmp_path))
    text, uris = _pdf_text_and_uris(tmp_path / "out.pdf")
    assert "#eval(" in text and "#link(" in text and "#while true" in text and 'a\\b"c' in text and not uris


def test_mathtext_shows_dollars_literally():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], label=esc.mathtext("run_$LR_$SEED"))
    ax.set_title(esc.mathtext(r"$\x$ and $5"))
    ax.set_xticks([0, 1], [esc.mathtext("a$b$c"), esc.mathtext(hs.DOLLARS)])
    ax.legend()
    fig.canvas.draw()
    drawn = [t._preprocess_math(t.get_text()) for t in fig.findobj(matplotlib.text.Text)]
    assert not any(math for _, math in drawn)  # nothing drawn as math
    shown = [s for s, _ in drawn]
    assert r"$\x$ and $5" in shown and "run_$LR_$SEED" in shown and "a$b$c" in shown
    plt.close(fig)


def test_a_figure_with_a_raw_dollar_label_still_renders():
    """show_figure's safety net: a user string a chapter did not escape is drawn literally, not a failure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embeval_report.present.display import _save_png

    fig, ax = plt.subplots()
    ax.plot([0, 1], label="run_$LR_$SEED")
    ax.set_xticks([0, 1], ["run_$LR_$SEED", r"$\x$"])
    ax.set_ylabel(r"$\sigma_k$")  # the package's own math stays math
    ax.legend()
    buf = io.BytesIO()
    _save_png(fig, buf)
    assert buf.getvalue().startswith(b"\x89PNG")
    plt.close(fig)


def test_definitions_escape_labels_and_references():
    from embeval_report.metrics.spec import Metric
    from embeval_report.present.display import definitions_markdown

    m = Metric("roc_auc__x", 0.5, "higher", f"ref {hs.HTML_IMG} {hs.MD_LINK}", label=f"ROC [{hs.NAME}]",
               formula=r"\mathrm{AUC}")
    md = definitions_markdown({"x": m})
    html = _pandoc(md, "html5")
    p = live(html)
    assert not p.live and not p.scripts and "<img" not in html and "<math" not in html.split("AUC")[-1]
    assert "$\\mathrm{AUC}$" in md  # the package's formula is still math


# ------------------------------------------------------------------------------------------------ sanitizer

ATTACKS = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title>
<meta http-equiv="refresh" content="0;url=javascript:alert(1)"><base href="javascript:/">
<link rel="stylesheet" href="https://evil.example/x.css"><script>alert(1)</script>
<meta http-equiv="Content-Security-Policy" content="default-src *"></head><body>
<p onclick="alert(1)" ONMOUSEOVER=alert(1)>p</p><img src=x onerror=alert(1)>
<a href="javascript:alert(1)">a</a><a href="jav&#x09;ascript:alert(1)">b</a><a href=" JaVaScRiPt:alert(1)">c</a>
<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">d</a><a href="vbscript:x">e</a>
<a href="#ok">f</a><a href="https://example.org/">g</a><a href="mailto:a@b.c">h</a><a href="../rel.html">i</a>
<img src="data:image/png;base64,iVBORw0KGgo=" alt="ok"><img src="data:text/html,<script>alert(1)</script>">
<img srcset="javascript:alert(1) 1x, data:image/png;base64,AAAA 2x"><iframe srcdoc="<script>alert(1)</script>"></iframe>
<object data="javascript:alert(1)"></object><embed src="javascript:alert(1)"><form action="javascript:alert(1)">
<button formaction="javascript:alert(1)">x</button><input type=image src="javascript:alert(1)"></form>
<svg><script>alert(1)</script><a xlink:href="javascript:alert(1)"><text>s</text></a>
<animate attributeName="href" to="javascript:alert(1)"/><set attributeName="onload" to="alert(1)"/>
<foreignObject><img src=x onerror=alert(1)></foreignObject><use href="data:image/svg+xml,<svg onload=alert(1)>"/>
<style><img src=x onerror=alert(1)></style></svg>
<math href="javascript:alert(1)"><mi>x</mi></math><div style="background:url(javascript:alert(1))">s</div>
<details open ontoggle=alert(1)>t</details><noscript><img src=x onerror=alert(1)></noscript>
<template><img src=x onerror=alert(1)></template><textarea><script>alert(1)</script></textarea>
<!-- <img src=x onerror=alert(1)> --><p>a &lt;b&gt; \u202egnp.exe</p><pre>  keep
 spaces</pre><main><script>alert(2)</script></main></body></html>"""


def test_sanitizer_leaves_nothing_live():
    page = san.sanitize_page(ATTACKS)
    p = live(page)
    assert not p.live, p.live
    assert not p.scripts, p.scripts
    assert p.csp == [san.csp()] and "default-src 'none'" in p.csp[0] and "script-src" not in p.csp[0]
    assert "https://evil" not in page and "refresh" not in page and "default-src *" not in page
    for kept in ('href="#ok"', 'href="https://example.org/"', 'href="mailto:a@b.c"', 'href="../rel.html"',
                 'src="data:image/png;base64,iVBORw0KGgo="', "<pre>  keep\n spaces</pre>", "a &lt;b&gt;",
                 "<details open>", "<math><mi>x</mi></math>", "<U+202E>".replace("<", "&lt;").replace(">", "&gt;")):
        assert kept in page, kept
    assert all("alert" not in tag for tag in re.findall(r"<[^>]*>", page))


def test_sanitizer_keeps_the_pages_own_scripts_by_hash():
    page = ("<html><head><meta charset=\"utf-8\"><script>var a = 1;</script>"
            "<script src=\"data:application/javascript;base64,dmFyIGIgPSAyOw==\"></script></head>"
            "<body><main><p>x</p><script>alert(1)</script></main><script id=\"after\">var c = 3;</script></body></html>")
    out = san.sanitize_page(page, scripts=True)
    assert "alert" not in out and "var a = 1;" in out and "var b = 2;" in out and "var c = 3;" in out
    csp = live(out).csp[0]
    import base64
    import hashlib
    for js in ("var a = 1;", "var b = 2;", "var c = 3;"):
        assert f"'sha256-{base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()}'" in csp
    assert "data:" not in csp.split("script-src")[1].split(";")[0]
    assert out.index("Content-Security-Policy") < out.index("<script")


def test_safe_url():
    assert san.safe_url("#x") and san.safe_url("a/b.html") and san.safe_url("HTTPS://x") and san.safe_url("")
    assert not san.safe_url("java\nscript:alert(1)") and not san.safe_url("data:image/png;base64,AA")
    assert san.safe_url("data:image/png;base64,AA", image=True) and not san.safe_url("data:text/html,x", image=True)
    assert san.safe_url("data:image/svg+xml;base64,AA", image=True) and not san.safe_url("\\\\evil/x")


# ------------------------------------------------------------------------------------------------ rendering


def _one_chapter(folder, source: str, title: str = "Chapter"):
    nb = new_notebook(cells=[new_markdown_cell(source)])
    nb.metadata["embeval"] = {"name": "isotropy", "title": title, "status": "ok"}
    (folder / "chapters").mkdir(parents=True)
    nbformat.write(nb, folder / "chapters" / "10_isotropy.ipynb")
    return folder


def test_raw_typst_and_javascript_links_in_content_are_refused(tmp_path):
    """Raw Typst in a chapter's markdown is shown as code, never run; a javascript: link is its text."""
    from embeval_report.report.render import render_report

    out = _one_chapter(tmp_path / "r", 'Before.\n\n```{=typst}\n#link("javascript:alert(1)")[RAWBLOCK]\n```\n\n'
                                       'Inline `#link("javascript:alert(2)")[RAWINLINE]`{=typst} and '
                                       '[LINK](javascript:alert(3)) and [ok](https://example.org).\n',
                       title=f"Title {hs.TYPST_LINK} {hs.HTML_IMG}")
    files = render_report(out, title=hs.NAME, renderer="builtin")
    text, uris = _pdf_text_and_uris(files["pdf"])
    assert uris == ["https://example.org"]
    assert '#link("javascript:alert(1)")[RAWBLOCK]' in text and "RAWINLINE" in text and "LINK" in text
    p = live(files["html"].read_text())
    assert not p.live and not p.scripts and len(p.csp) == 1


def test_refuse_raw_keeps_code_text():
    from embeval_report.report.render.pdf import refuse_raw

    md = 'a `x`{=typst} b\n\n````{=typst}\n#x {=typst}\n````\n\n~~~\ny {=html}\n~~~\n\\{=typst\\}'
    assert refuse_raw(md) == 'a `x`{.typst} b\n\n````{.typst}\n#x {=typst}\n````\n\n~~~\ny {=html}\n~~~\n\\{=typst\\}'


def test_pdf_time_limit(tmp_path, monkeypatch):
    """Past --pdf-timeout the PDF is not written, one line says why, the HTML is, and the exit status is 0."""
    from embeval_report.cli import main
    from embeval_report.report.render import pdf

    monkeypatch.setattr(pdf, "_TYPST", "import time\ntime.sleep(60)\n")  # a document that never finishes
    out = _one_chapter(tmp_path / "r", "Text.")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["render", str(out), "--renderer", "builtin", "--pdf-timeout", "2"])
    lines = err.getvalue().strip().splitlines()
    assert rc == 0 and (out / "report.html").exists() and not (out / "report.pdf").exists()
    assert len(lines) == 1 and "report.pdf was not rendered" in lines[0] and "limit of 2 s" in lines[0], lines
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as exc:
        main(["render", str(out), "--pdf-timeout", "-1"])
    assert exc.value.code == 2


def test_quarto_page_title_is_escaped():
    import yaml

    from embeval_report.report.render.quarto import _front_matter

    front = yaml.safe_load(_front_matter("</title><script>alert(1)</script>", [])[4:].split("---\n")[0])
    html = _pandoc(front["pagetitle"], "html5")
    assert "<script" not in html and "&lt;/title&gt;&lt;script&gt;" in html


# ------------------------------------------------------------------------------------------------ the hostile set


@pytest.fixture(scope="session")
def hostile_report(tmp_path_factory):
    """One report of the hostile set (every chapter, HTML and PDF, with a hostile --title), written once for both
    test workers (conftest.built_once)."""
    from conftest import built_once
    from embeval_report.cli import main

    def build(tmp):
        manifest = hs.write_hostile_set(tmp / "data")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["run", str(manifest), "--out", str(tmp / "out"), "--title",
                       f"{hs.NAME} </title><script>x</script>"])
        return {"rc": rc, "err": err.getvalue()}

    tmp, done = built_once(tmp_path_factory, "hostile-report", build)
    return tmp / "out", done["rc"], done["err"]


def test_every_chapter_runs_on_the_hostile_set(hostile_report):
    out, rc, err = hostile_report
    chapters = json.loads((out / "metrics.json").read_text())["chapters"]
    failed = {k: v["reason"] for k, v in chapters.items() if v["status"] == "failed"}
    assert not failed, failed
    skipped = {k: v["reason"] for k, v in chapters.items() if v["status"] == "skipped"}
    assert not skipped, skipped
    assert rc == 0, err[-2000:]
    assert "rendering failed" not in err


def test_no_live_markup_in_the_hostile_report(hostile_report):
    out = hostile_report[0]
    page = (out / "report.html").read_text()
    p = live(page)
    assert not p.live, p.live[:5]
    assert not p.scripts, p.scripts
    assert len(p.csp) == 1 and p.csp[0].startswith("default-src 'none'")
    assert "\u202e" not in page and "&lt;U+202E&gt;" in page
    assert "onerror=alert(1)" in page  # the payloads are there, as text


#: payloads as they read when not escaped: markup in markdown (all), tags and bidi controls in HTML (the first)
RAW_HTML = (r"<img[ /]src=x", r"<svg/onload", r"<a href=\"javascript", "\u202e")
RAW_MARKDOWN = RAW_HTML + (r"\[m\]\(javascript", r"\[i\]\(javascript", r"run_\$LR", r"(?<!\\)#(eval|link|while)\b")


def raw_payloads(out) -> list:
    """(notebook, kind, payload, context) of every payload a chapter wrote unescaped into a markdown cell or output
    (or a tag or bidi control into an HTML output)."""
    bad = []
    for path in sorted((out / "chapters").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            texts = [("text/markdown", cell.source)] if cell.cell_type == "markdown" else []
            for o in cell.get("outputs", []):
                data = o.get("data") or {}
                texts += [(k, data[k]) for k in ("text/markdown", "text/html") if k in data]
            for kind, t in texts:
                for pattern in RAW_HTML if kind == "text/html" else RAW_MARKDOWN:
                    m = re.search(pattern, t)
                    if m:
                        bad.append((path.name, kind, pattern, t[max(0, m.start() - 80):m.start() + 40]))
    return bad


def test_no_raw_payload_in_the_hostile_notebooks(hostile_report):
    """Each chapter escaped its user strings itself (the sanitizer is the second line): no markdown output or
    cell holds a payload unescaped, no HTML output a raw tag."""
    bad = raw_payloads(hostile_report[0])
    assert not bad, bad[:5]


def test_no_injected_typst_in_the_hostile_pdf(hostile_report):
    out = hostile_report[0]
    text, uris = _pdf_text_and_uris(out / "report.pdf")
    assert not [u for u in uris if not u.startswith(("http://", "https://", "mailto:"))], uris
    for s in hs.PDF_TEXTS:
        assert s in text, s  # shown as text, not run
    assert "\u202e" not in text
