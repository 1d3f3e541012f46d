"""embeval_report.report.render: one self-contained HTML and one PDF from executed chapter notebooks."""
import json
import os
import re
import stat
import sys
import tempfile

import nbformat
import pandas as pd
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

os.environ.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="ipython-"))

from embeval_report.present.display import Link, callout, show_figure, show_markdown, show_table  # noqa: E402
from embeval_report.report.render import quarto_available, render_report  # noqa: E402

ANSI_ERROR = "ValueError: planted \x1b[31mfailure\x1b[0m <x>"


def _outputs(fn):
    """Run display calls in-process and return them as notebook outputs (as papermill would)."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    with capture_output() as cap:
        fn()
    return [new_output("display_data", data=o.data, metadata=o.metadata) for o in cap.outputs]


def _figure():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot([0, 1, 2], [2, 0, 1])
    ax.set(xlabel="rank", ylabel="eigenvalue")
    return fig


def _code(outputs, tags=()):
    cell = new_code_cell("pass", metadata={"tags": list(tags)} if tags else {})
    cell.outputs = outputs
    return cell


def _chapter(name, title, cells, status="ok", error=None):
    nb = new_notebook(cells=[new_markdown_cell(f"# {title}"),
                             _code([new_output("stream", name="stdout", text="PARAMS_SHOULD_NOT_SHOW")],
                                   tags=["parameters"]),
                             _code([new_output("stream", name="stdout", text="INJECTED_SHOULD_NOT_SHOW")],
                                   tags=["injected-parameters"])] + cells)
    nb.metadata["embeval"] = {"name": name, "title": title, "status": status, "error": error}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("render") / "out"
    (out / "chapters").mkdir(parents=True)
    card = pd.DataFrame({"chapter": [Link("Isotropy", "#chapter-isotropy"), Link("Broken", "#chapter-broken")],
                         "metric": ["APCS", "kNN <overlap>"], "value": [0.2713, float("nan")],
                         "verdict": ["problematic", None]})
    summary = _chapter("summary", "Summary", [
        _code(_outputs(lambda: show_markdown("This report evaluates **tiny\\_set**."))),
        new_markdown_cell("## Scorecard"),
        _code(_outputs(lambda: show_table(card, caption="Scorecard of all verdicts", label="tbl-scorecard"))),
    ])
    iso = _chapter("isotropy", "Isotropy", [
        new_markdown_cell("An isotropic set uses every direction.\n- a list right after text\n- second"),
        new_markdown_cell("## What the numbers say"),
        _code(_outputs(lambda: (
            show_markdown(r"The cosine has variance $1/d$ and $$\mathrm{PR} = \frac{(\sum_i \lambda_i)^2}"
                          r"{\sum_i \lambda_i^2}$$ measures the effective dimension."),
            callout("warning", "Cosines are **inflated**.", title="Anisotropy detected")))),
        new_markdown_cell("## Metrics"),
        _code(_outputs(lambda: show_table(
            pd.DataFrame({"metric": ["APCS", "condition number"], "value": [0.27134, 1234.5],
                          "verdict": ["concerning", "healthy"]}),
            caption="Isotropy metrics", label="tbl-iso"))),
        _code([new_output("stream", name="stdout", text="REMOVED_CELL_OUTPUT")], tags=["remove-cell"]),
        new_markdown_cell("## Spectrum"),
        _code(_outputs(lambda: show_figure(_figure(), caption="Eigenvalue spectrum <log>", label="fig-spectrum"))
              + [new_output("stream", name="stderr", text="STDERR_NOISE")]),
        # an error output inside an ok chapter (e.g. allow_errors) still renders
        _code([new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                          traceback=["\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"])]),
        new_markdown_cell("See the [summary](#chapter-summary) and a [missing chapter](#chapter-nope)."),
    ])
    broken = _chapter("broken", "Broken <script>alert(1)</script>", [
        _code([new_output("error", ename="ValueError", evalue="planted", traceback=[ANSI_ERROR])]),
    ], status="failed", error=ANSI_ERROR)
    for fname, nb in (("00_summary", summary), ("10_isotropy", iso), ("20_broken", broken)):
        nbformat.write(nb, out / "chapters" / f"{fname}.ipynb")
    (out / "metrics.json").write_text(json.dumps({
        "version": "0.1.0", "source": "/data/set <x>.npy", "seed": 3, "device": "cpu",
        "generated": "2026-01-02T03:04:05+00:00", "chapters": {}}))
    files = render_report(out, title="Tiny <script>alert(1)</script> report", renderer="builtin")
    return out, files


def test_returns_both_files(report):
    out, files = report
    assert files == {"html": out / "report.html", "pdf": out / "report.pdf"}
    assert all(p.stat().st_size > 1000 for p in files.values())


def test_html_sections_toc_and_content(report):
    html = (report[0] / "report.html").read_text()
    for name in ("summary", "isotropy", "broken"):
        assert f'<section id="chapter-{name}"' in html
        assert f'href="#chapter-{name}"' in html  # contents
    assert '<nav class="toc"' in html
    # sections of chapters are listed in the contents and their ids exist
    for sid in re.findall(r'<ol class="toc-sections">(.*?)</ol>', html, re.S)[1:2]:
        for target in re.findall(r'href="#([^"]+)"', sid):
            assert f'id="{target}"' in html
    assert "What the numbers say" in html.split("</nav>")[0]
    assert '<table class="embeval-table" id="tbl-iso">' in html and '<span class="caption-label">Table 2:</span> Isotropy metrics' in html
    assert 'class="verdict verdict-problematic"' in html
    assert re.search(r'<figure class="figure" id="fig-spectrum">\s*<img [^>]*src="data:image/png;base64,', html)
    assert '<span class="caption-label">Figure 1:</span> Eigenvalue spectrum &lt;log&gt;' in html
    assert "<math" in html and "<mfrac>" in html  # MathML, no MathJax
    assert 'class="callout callout-warning"' in html
    assert "<li>a list right after text</li>" in html
    assert "ZeroDivisionError" in html and "\x1b" not in html
    assert 'href="#chapter-summary"' in html


def test_html_is_self_contained_and_escaped(report):
    html = (report[0] / "report.html").read_text()
    assert "<script" not in html
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<link" not in html and "@import" not in html
    assert "<title>Tiny &lt;script&gt;alert(1)&lt;/script&gt; report</title>" in html
    assert "Broken &lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "set &lt;x&gt;.npy" in html and "/data/" not in html and "2026-01-02 03:04 UTC" in html


def test_html_drops_parameters_removed_cells_and_stderr(report):
    html = (report[0] / "report.html").read_text()
    for text in ("PARAMS_SHOULD_NOT_SHOW", "INJECTED_SHOULD_NOT_SHOW", "REMOVED_CELL_OUTPUT", "STDERR_NOISE",
                 "pass"):
        assert text not in html.split("<main")[1], text


def test_html_failed_chapter_box(report):
    html = (report[0] / "report.html").read_text()
    section = html.split('<section id="chapter-broken"')[1].split("</section>")[0]
    assert "This chapter failed" in section and "callout-danger" in section
    assert "ValueError: planted failure &lt;x&gt;" in section and "\x1b" not in section
    assert 'toc-flag-failed' in html


def test_pdf_pages_and_text(report):
    from pypdf import PdfReader

    reader = PdfReader(report[0] / "report.pdf")
    assert len(reader.pages) >= 4  # title + contents, then one chapter per page at least
    text = " ".join(p.extract_text() for p in reader.pages)
    flat = re.sub(r"\s+", " ", text)
    for s in ("Tiny <script>alert(1)</script> report", "Summary", "Isotropy", "Broken", "Scorecard",
              "What the numbers say", "This chapter failed", "planted failure <x>", "Isotropy metrics",
              "Eigenvalue spectrum <log>", "Anisotropy detected", "set <x>.npy"):
        assert s in flat, s
    for s in ("PARAMS_SHOULD_NOT_SHOW", "REMOVED_CELL_OUTPUT", "STDERR_NOISE"):
        assert s not in flat
    # the figure is embedded as an image
    assert any(page.images for page in reader.pages)


def test_a_chapter_typst_rejects_is_isolated(report, tmp_path):
    import shutil

    from pypdf import PdfReader

    out = tmp_path / "bad"
    shutil.copytree(report[0] / "chapters", out / "chapters")
    nb = nbformat.read(out / "chapters" / "10_isotropy.ipynb", as_version=4)
    # a figure whose PNG Typst cannot decode (raw Typst in the content is shown as code, never run: issue 40)
    nb.cells.append(_code([new_output("display_data", data={"image/png": "bm90IGEgcG5n"},
                                      metadata={"embeval": {"role": "figure", "caption": "broken"}})]))
    nbformat.write(nb, out / "chapters" / "10_isotropy.ipynb")
    files = render_report(out, formats=("pdf",), renderer="builtin")
    text = re.sub(r"\s+", " ", " ".join(p.extract_text() for p in PdfReader(files["pdf"]).pages))
    assert "could not be typeset" in text and "image" in text
    assert "Scorecard" in text and "This chapter failed" in text  # the other chapters are intact


def test_missing_chapters_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="chapters"):
        render_report(tmp_path)


def test_quarto_explicit_without_quarto_raises(report, monkeypatch):
    monkeypatch.setenv("PATH", "")
    assert not quarto_available()
    with pytest.raises(RuntimeError, match="quarto is not on PATH"):
        render_report(report[0], renderer="quarto")


def _fake_quarto(folder, fail=()):
    """A stand-in `quarto` that records its calls, keeps each document it is given (``folder/seen-TO.qmd``)
    and writes placeholder outputs; it fails (as Quarto does: ANSI colours, several lines) for the `--to`
    values in ``fail``."""
    script = folder / "quarto"
    script.write_text(f"""#!{sys.executable}
import os, sys, pathlib
log = pathlib.Path({str(folder / 'calls.log')!r})
with log.open("a") as f:
    f.write(os.getcwd() + " " + " ".join(sys.argv[1:]) + "\\n")
to = sys.argv[sys.argv.index("--to") + 1]
cwd = pathlib.Path.cwd()
seen = pathlib.Path({str(folder)!r})
(seen / f"seen-{{to}}.qmd").write_text((cwd / "report.qmd").read_text())
(seen / "seen-files.txt").write_text("\\n".join(sorted(os.listdir(cwd))))
if to in {tuple(fail)!r}:
    sys.exit("\\x1b[31mERROR\\x1b[39m: planted failure\\n\\nStack trace:\\n  at render")
if to == "html":
    (cwd / "report.html").write_text("<html>fake quarto</html>")
else:
    (cwd / "report.pdf").write_bytes(b"%PDF-1.4 fake " + to.encode())
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


@pytest.fixture
def fake_quarto(report, tmp_path, monkeypatch):
    """A copy of the report folder, and a function putting the stand-in `quarto` first on PATH."""
    import shutil

    out = tmp_path / "q"
    shutil.copytree(report[0] / "chapters", out / "chapters")
    shutil.copy(report[0] / "metrics.json", out / "metrics.json")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return out, lambda fail=(): _fake_quarto(tmp_path, fail)


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stand-in")
def test_quarto_renderer_stages_one_document(fake_quarto, tmp_path):
    import yaml

    out, make = fake_quarto
    make()
    files = render_report(out, title="Q <title>", renderer="auto")
    assert files == {"html": out / "report.html", "pdf": out / "report.pdf"}
    assert (out / "report.html").read_text().endswith("<html>fake quarto</html>")
    assert (out / "report.pdf").read_bytes().endswith(b"typst")  # the PDF goes through Typst by default
    calls = [c.split(" ", 1)[1] for c in (tmp_path / "calls.log").read_text().splitlines()]
    assert calls == ["render report.qmd --to html", "render report.qmd --to typst"]
    staged = (tmp_path / "seen-files.txt").read_text().split()
    assert "embeval.typ" in staged and "_quarto.yml" not in staged and any(f.endswith(".png") for f in staged)
    assert not (out / "_quarto").exists()
    html = (tmp_path / "seen-html.qmd").read_text()
    front = yaml.safe_load(html.split("---\n")[1])
    assert front["title"] == front["pagetitle"] == "Q &lt;title&gt;"  # markdown: no raw HTML in <title> (issue 40)
    assert "Content-Security-Policy" in (out / "report.html").read_text()
    assert front["subtitle"] == ("Source: set &lt;x&gt;.npy\\\nSeed: 3\\\nDevice: cpu\\\n"
                                 "Version: embeval-report 0.1.0\\\nGenerated: 2026-01-02 03:04 UTC")  # hard breaks
    # the packaged options travel in the front matter (Quarto ignores project files in hidden folders)
    assert front["execute"]["enabled"] is False and "project" not in front
    assert front["format"]["html"]["embed-resources"] is True
    assert front["format"]["html"]["theme"] != "cosmo"  # a theme without Google Fonts
    assert '#import "embeval.typ"' in front["format"]["typst"]["include-in-header"]["text"]
    html = html.split("---\n", 2)[2]  # the body
    for name in ("summary", "isotropy", "broken"):  # each chapter once
        assert html.count(f"{{#chapter-{name}}}") == 1
    assert "PARAMS_SHOULD_NOT_SHOW" not in html and "REMOVED_CELL_OUTPUT" not in html
    assert ": Scorecard of all verdicts {#tbl-scorecard}" in html
    assert re.search(r"!\[Eigenvalue spectrum &lt;log&gt;\]\((\S+\.png)\)\{#fig-spectrum\}", html)
    assert "::: {.callout-warning}\n## Anisotropy detected" in html and "embeval-callout" not in html
    assert "::: {.callout-important}\n## This chapter failed" in html
    assert "[problematic]{.verdict .verdict-problematic}" in html
    assert "[summary](#chapter-summary)" in html and "a missing chapter." in html  # dangling link unlinked


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stand-in")
def test_quarto_typst_document_needs_no_quarto_callouts(fake_quarto, tmp_path):
    out, make = fake_quarto
    make()
    render_report(out, formats=("pdf",), renderer="quarto")
    typ = (tmp_path / "seen-typst.qmd").read_text()
    assert '#embeval-callout(kind: "warning", title: "Anisotropy detected")[' in typ
    assert '#embeval-callout(kind: "danger", title: "This chapter failed")[' in typ
    assert "{.callout" not in typ  # Quarto's Typst callouts import a package from the network
    assert '`#badge(kind: "problematic", "problematic")`{=typst}' in typ


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stand-in")
def test_quarto_latex_on_request(fake_quarto, tmp_path, monkeypatch):
    from embeval_report.report.render import quarto

    out, make = fake_quarto
    make()
    monkeypatch.setattr(quarto, "_tex_installed", lambda: True)
    assert render_report(out, formats=("pdf",), renderer="quarto", pdf_engine="latex") == {"pdf": out / "report.pdf"}
    assert (out / "report.pdf").read_bytes().endswith(b"pdf")
    tex = (tmp_path / "seen-pdf.qmd").read_text()
    assert "> **Anisotropy detected**" in tex and "{.callout" not in tex  # no fontawesome5 needed
    assert "--:|" in tex or ":-" in tex
    with pytest.raises(ValueError, match="pdf_engine"):
        render_report(out, formats=("pdf",), renderer="quarto", pdf_engine="context")


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stand-in")
def test_quarto_latex_without_tex_is_one_line_saying_what_to_install(fake_quarto, tmp_path, monkeypatch):
    from embeval_report.report.render import quarto

    out, make = fake_quarto
    make()
    monkeypatch.setattr(quarto, "_tex_installed", lambda: False)
    with pytest.raises(RuntimeError) as err:
        render_report(out, renderer="quarto", pdf_engine="latex")
    message = str(err.value)
    assert message.startswith("pdf: ") and "quarto install tinytex" in message and "--pdf-engine typst" in message
    assert "\n" not in message
    assert (out / "report.html").read_text().endswith("<html>fake quarto</html>")  # the HTML is still written


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stand-in")
def test_quarto_failing_pdf_keeps_the_html(fake_quarto, tmp_path):
    out, make = fake_quarto
    make(fail=("typst",))
    with pytest.raises(RuntimeError) as err:
        render_report(out, formats=("pdf", "html"), renderer="quarto")
    assert str(err.value) == "pdf: ERROR: planted failure"  # one line, no ANSI codes
    assert (out / "report.html").read_text().endswith("<html>fake quarto</html>")
    assert not (out / "report.pdf").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stand-in")
def test_auto_falls_back_to_builtin_for_the_formats_quarto_fails(fake_quarto, tmp_path):
    out, make = fake_quarto
    make(fail=("typst",))
    with pytest.warns(RuntimeWarning, match="quarto rendering failed"):
        files = render_report(out)
    assert (out / "report.html").read_text().endswith("<html>fake quarto</html>")  # Quarto's HTML stays
    assert files["pdf"].read_bytes().startswith(b"%PDF") and files["pdf"].stat().st_size > 1000  # builtin


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stand-in")
def test_auto_falls_back_to_builtin_when_quarto_fails(fake_quarto):
    out, make = fake_quarto
    make(fail=("html", "typst"))
    with pytest.warns(RuntimeWarning, match="quarto rendering failed"):
        files = render_report(out, formats=("html",))
    assert "chapter-isotropy" in files["html"].read_text()
    with pytest.raises(RuntimeError, match="planted failure"):
        render_report(out, formats=("html",), renderer="quarto")


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stand-in")
def test_cli_render_keeps_the_html_when_the_pdf_fails(fake_quarto, capsys):
    from embeval_report.cli import main

    out, make = fake_quarto
    make(fail=("typst",))
    assert main(["render", str(out), "--renderer", "quarto", "--formats", "pdf,html"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out / "report.html")
    assert captured.err == "embeval-report: warning: pdf rendering failed: pdf: ERROR: planted failure\n"


def test_set_intersection_survives_into_the_pdf(tmp_path):
    """pandoc writes TeX's \\cap as Typst's old name `sect`; the template defines it."""
    import nbformat
    from pypdf import PdfReader

    from embeval_report.report.render import render_report

    nb = nbformat.v4.new_notebook(metadata={"embeval": {"name": "m", "title": "Math", "status": "ok"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# Math\n\nOverlap $|N_i \\cap N_j| / k$ and $A \\cup B$.")]
    (tmp_path / "chapters").mkdir()
    nbformat.write(nb, tmp_path / "chapters" / "10_m.ipynb")
    files = render_report(tmp_path, title="t", formats=("pdf",), renderer="builtin")
    text = " ".join(p.extract_text() for p in PdfReader(files["pdf"]).pages)
    assert "could not be typeset" not in text and "∩" in text


def test_sorted_attributes_keeps_the_page_beautifulsoup_wrote():
    """The HTML exporter skips nbconvert's BeautifulSoup pass; once sanitized, the page is the same bytes."""
    from bs4 import BeautifulSoup

    from embeval_report.report.render.html import sorted_attributes
    from embeval_report.report.render.sanitize import sanitize_page

    body = ('<figure id="fig-a" class="figure"><img src="data:image/png;base64,AAAA" alt="a > b, &quot;q&quot;" '
            'width="40"></figure><math><mo stretchy="true" form="prefix">(</mo></math><p data-x="1" class=c>'
            'x &lt; y &amp; <a title="t" href="#fig-a">z</a><br/></p><section id="s" class="k" aria-labelledby="h">'
            '</section>')
    page = "<!DOCTYPE html><html><head><title>t</title></head><body><main>{}</main></body></html>"
    soup = str(BeautifulSoup(body, features="html.parser"))
    assert sorted_attributes(body) != body
    assert sanitize_page(page.format(sorted_attributes(body))) == sanitize_page(page.format(soup))


def _pdf_without_dates(path) -> bytes:
    """The PDF's bytes without what Typst stamps on each rendering (dates, and the document id made from them)."""
    data = path.read_bytes()
    data = re.sub(rb"D:\d{14}Z", b"D:", data)
    data = re.sub(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", b"T", data)
    return re.sub(rb"\((?:[A-Za-z0-9+/]{22}==)\)|>[A-Za-z0-9+/]{22}==<", b"ID", data)


def test_render_each_side_by_side_writes_the_files_of_one_after_the_other(report, tmp_path):
    """render_each: the builtin HTML and PDF side by side (two threads), the same files as render_report's, which
    renders them one after the other; each format's exception in place of its file."""
    import shutil

    from embeval_report.report.render import render_each
    from embeval_report.report.render import pdf as pdf_module

    out, files = report
    other = tmp_path / "out"
    shutil.copytree(out, other)
    for name in ("report.html", "report.pdf"):
        (other / name).unlink()
    done = render_each(other, title="Tiny <script>alert(1)</script> report", renderer="builtin")
    assert done == {"html": other / "report.html", "pdf": other / "report.pdf"}
    assert done["html"].read_bytes() == files["html"].read_bytes()
    assert _pdf_without_dates(done["pdf"]) == _pdf_without_dates(files["pdf"])

    boom = RuntimeError("typst exploded")
    original = pdf_module._compile
    try:
        def fail(*args):
            raise boom
        pdf_module._compile = fail
        (other / "report.html").unlink()
        done = render_each(other, formats=("pdf", "html"), renderer="builtin")
    finally:
        pdf_module._compile = original
    assert list(done) == ["pdf", "html"] and isinstance(done["pdf"], RuntimeError)
    assert done["html"] == other / "report.html" and done["html"].exists()
    original = pdf_module.report_parts
    try:  # the PDF fails before its markdown is made (before the HTML's thread would start): the HTML follows
        def fail_early(*args):
            raise boom
        pdf_module.report_parts = fail_early
        (other / "report.html").unlink()
        done = render_each(other, title="Tiny <script>alert(1)</script> report", renderer="builtin")
    finally:
        pdf_module.report_parts = original
    assert done["pdf"] is boom and done["html"].read_bytes() == files["html"].read_bytes()
    bad = render_each(other, formats=("html", "docx"), renderer="builtin")  # each on its own, as before
    assert bad["html"] == other / "report.html" and isinstance(bad["docx"], ValueError) and "docx" in str(bad["docx"])
