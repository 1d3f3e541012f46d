"""The Quarto renderer with a real `quarto` (skipped when it is not on PATH): HTML, PDF through Typst and LaTeX."""
import re
import shutil

import pytest

from embeval_report.report.render import quarto_available, render_report
from embeval_report.report.render import quarto as quarto_renderer

pytestmark = pytest.mark.skipif(not quarto_available(), reason="quarto is not on PATH")

from test_render import report  # noqa: E402,F401  (the executed report folder fixture)


def _copy(folder, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(folder / "chapters", out / "chapters")
    shutil.copy(folder / "metrics.json", out / "metrics.json")
    return out


def _pages(pdf):
    """The text of each page, whitespace collapsed."""
    from pypdf import PdfReader

    return [re.sub(r"\s+", " ", p.extract_text()) for p in PdfReader(pdf).pages]


@pytest.fixture(scope="module")
def long_report(report, tmp_path_factory):  # noqa: F811
    """The test report with a scorecard of 120 rows: longer than a page."""
    import nbformat
    import pandas as pd
    from test_render import _code, _outputs

    from embeval_report.present.display import show_table

    out = _copy(report[0], tmp_path_factory.mktemp("long"))
    rows = pd.DataFrame({"chapter": [f"chapter {i}" for i in range(120)], "metric": [f"metric-{i:03d}" for i in range(120)],
                         "value": [i / 7 for i in range(120)], "verdict": ["healthy", "concerning", "problematic"] * 40,
                         "reference": ["seed 000 §217.0.5.2.1; verdict Table 217.2 ≈ bands"] * 120})
    path = out / "chapters" / "00_summary.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(_code(_outputs(lambda: show_table(rows, caption="Long scorecard", label="tbl-long"))))
    nbformat.write(nb, path)
    return out


@pytest.fixture(scope="module")
def quarto_html(long_report):
    return render_report(long_report, title="Tiny <b>report</b>", formats=("html",), renderer="quarto")["html"]


def test_html_title_chapters_figures_tables(quarto_html):
    html = quarto_html.read_text()
    assert "<title>Tiny &lt;b&gt;report&lt;/b&gt;</title>" in html
    assert re.search(r'<h1 class="title">Tiny &lt;b&gt;report&lt;/b&gt;</h1>', html)
    assert "Source: set &lt;x&gt;.npy" in html and "Generated: 2026-01-02 03:04 UTC" in html
    for name in ("summary", "isotropy", "broken"):  # each chapter once
        assert len(re.findall(rf'<section id="chapter-{name}"', html)) == 1
    assert html.count('<h1 class="title"') == 1
    assert re.search(r'<img [^>]*src="data:image/png;base64,', html)  # the figure, embedded
    assert "Eigenvalue spectrum &lt;log&gt;" in html
    assert 'id="tbl-scorecard"' in html and "Scorecard of all verdicts" in html and "<table" in html
    assert 'class="verdict verdict-problematic"' in html
    assert "<math" in html  # MathML
    assert "callout-warning" in html and "Anisotropy detected" in html and "This chapter failed" in html
    assert "\x1b" not in html and "<script>alert" not in html


def test_html_is_self_contained(quarto_html):
    html = quarto_html.read_text()
    sources = re.findall(r'<(?:script|img|link|iframe)\b[^>]*\s(?:src|href)="([^"]*)"', html)
    assert sources and all(src.startswith(("data:", "#")) for src in sources), sources
    assert "fonts.googleapis" not in html and "@import url(http" not in html


def test_typst_pdf_needs_no_tex(long_report, monkeypatch):
    monkeypatch.setattr(quarto_renderer, "_tex_installed", lambda: False)
    pdf = render_report(long_report, formats=("pdf",), renderer="quarto")["pdf"]
    pages = _pages(pdf)
    assert 4 <= len(pages) <= 40
    text = " ".join(pages)
    for s in ("Summary", "Isotropy", "Broken", "Scorecard of all verdicts", "Eigenvalue spectrum <log>",
              "Anisotropy detected", "This chapter failed", "planted failure <x>", "≈"):
        assert s in text, s
    # the long scorecard breaks across consecutive pages instead of overprinting one
    on = [i for i, p in enumerate(pages) if re.search(r"metric-\d{3}", p)]
    assert len(on) >= 2 and on == list(range(on[0], on[-1] + 1))
    found = sorted(int(m) for p in pages for m in re.findall(r"metric-(\d{3})", p))
    assert found == list(range(120))


def _image_widths(pdf):
    """(drawn width of each image, page width) in points, from the transformation at each ``Do``."""
    from pypdf import PdfReader

    widths = []
    for page in PdfReader(pdf).pages:
        images = set(page.images.keys()) if page.images else set()
        if not images:
            continue
        def visit(op, args, cm, tm, page=page):
            if op == b"Do" and args and f"/{str(args[0]).lstrip('/')}" in {f"/{k.split('/')[-1]}" for k in images}:
                widths.append((abs(cm[0]) + abs(cm[2]), float(page.mediabox.width)))
        page.extract_text(visitor_operand_before=visit)
    return widths


def test_typst_figures_fit_the_text_width(long_report):
    pdf = render_report(long_report, formats=("pdf",), renderer="quarto")["pdf"]
    widths = _image_widths(pdf)
    assert widths
    for drawn, page in widths:
        assert drawn <= page - 2 * 62 + 1, (drawn, page)  # A4 less the 2.2 cm margins


@pytest.mark.skipif(not quarto_renderer._tex_installed(), reason="no TeX installation")
def test_latex_pdf_on_request(long_report):
    pdf = render_report(long_report, formats=("pdf",), renderer="quarto", pdf_engine="latex")["pdf"]
    pages = _pages(pdf)
    text = " ".join(pages)
    for s in ("Summary", "Isotropy", "Scorecard of all verdicts", "Anisotropy detected", "≈"):
        assert s in text, s
    on = [i for i, p in enumerate(pages) if re.search(r"metric-\d{3}", p)]
    assert len(on) >= 2 and on == list(range(on[0], on[-1] + 1))


def test_latex_without_tex_says_what_to_install(long_report, tmp_path, monkeypatch):
    monkeypatch.setattr(quarto_renderer, "_tex_installed", lambda: False)
    out = _copy(long_report, tmp_path)
    with pytest.raises(RuntimeError) as err:
        render_report(out, renderer="quarto", pdf_engine="latex")
    message = str(err.value)
    assert "\n" not in message and "\x1b" not in message
    assert "quarto install tinytex" in message and "--pdf-engine typst" in message
    assert (out / "report.html").exists() and not (out / "report.pdf").exists()  # the HTML is not lost


def test_a_hidden_folder_renders_the_same(report, tmp_path):  # noqa: F811
    """The runner renders in a hidden staging folder, where Quarto ignores project files."""
    out = _copy(report[0], tmp_path / ".staging-1")
    files = render_report(out, renderer="quarto")
    html = files["html"].read_text()
    assert not re.search(r'<script[^>]*\ssrc="(?!data:)', html)  # embedded: the options were applied
    assert "Anisotropy detected" in " ".join(_pages(files["pdf"]))
