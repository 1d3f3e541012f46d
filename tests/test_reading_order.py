"""The report's reading order: cover (status, top findings), one-page contents with badges, chapter bodies, then
each chapter's reference material in its appendix (PDF) or a closed <details> (HTML), and the References;
citations named; tables and figures numbered alike in both formats."""
import json
import re
import shutil

import nbformat
import pandas as pd
import pytest
from nbformat.v4 import new_markdown_cell
from test_render import _chapter, _code, _figure, _outputs

from embeval_report.present.display import APPENDIX_TAG, show_definitions, show_figure, show_markdown, show_table
from embeval_report.report.render import render_report
from embeval_report.report.render.common import finding_number
from embeval_report.report.render.references import cite_html, cite_markdown, cite_text, references_markdown

FINDINGS = {"status": "problematic", "findings": [
    {"severity": "problematic", "category": "model", "chapter": "isotropy", "title": "The vectors crowd into a cone",
     "sentence": "APCS is 0.584.", "metrics": ["apcs"], "section": "chapter-isotropy", "rule": "threshold",
     "effect": "anisotropy", "evidence": {"metric": "apcs", "label": "Mean pairwise cosine (APCS)", "value": 0.5843,
                                          "ci_low": 0.5705, "ci_high": 0.5946}},
    {"severity": "problematic", "category": "model", "chapter": "retrieval", "title": "Loses to most-popular",
     "sentence": "…", "metrics": ["ndcg"], "section": "chapter-retrieval", "rule": "baseline", "effect": "ndcg",
     "evidence": {"value": 0.0054, "ci_low": None, "ci_high": None, "baseline": "a most-popular list",
                  "baseline_value": 0.4649}},
    {"severity": "concerning", "category": "training process", "chapter": "isotropy", "title": "A third finding",
     "sentence": "…", "metrics": [], "section": "chapter-isotropy", "rule": "event", "effect": "x", "evidence": {}},
    {"severity": "concerning", "category": "protocol", "chapter": "isotropy", "title": "A fourth finding, not on the cover",
     "sentence": "…", "metrics": [], "section": "chapter-isotropy", "rule": "event", "effect": "y", "evidence": {}},
]}


def _tagged(cell):
    cell.metadata["tags"] = [APPENDIX_TAG]
    return cell


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An executed report folder: a Summary, a chapter with a body and reference material, a chapter that ran
    without findings, one not run; its findings; the source an absolute path."""
    out = tmp_path_factory.mktemp("frame") / "out"
    (out / "chapters").mkdir(parents=True)
    (out / "results").mkdir()
    summary = _chapter("summary", "Summary", [_code(_outputs(lambda: show_markdown("The report decides.")))])
    iso = _chapter("isotropy", "Isotropy", [
        new_markdown_cell("How much of the dimension the set uses (seed 000 §217.0.2, seed 001 §21.1.1)."),
        new_markdown_cell("## What the numbers say"),
        _code(_outputs(lambda: show_markdown("APCS is problematic by Table 217.2 (seed 000 §217.0.7)."))),
        new_markdown_cell("## Metrics"),
        _code(_outputs(lambda: (
            show_table(pd.DataFrame({"metric": ["APCS"], "value": [0.58]}), caption="Headline metrics",
                       label="tbl-iso-metrics"),
            show_definitions("- **APCS**: $\\overline{\\cos}$ — lower is better; seed 000 §217.0.5.2.3; "
                             "verdict Table 217.2 (seed 000 §217.0.7).")))),
        new_markdown_cell("## Spectrum"),
        _code(_outputs(lambda: show_figure(_figure(), caption="Spectrum (seed 000 §217.0.10)", label="fig-spec"))),
        _tagged(new_markdown_cell("## Hypothesis tests")),
        _tagged(_code(_outputs(lambda: show_table(pd.DataFrame({"test": ["KS"], "p": [0.01]}),
                                                  caption="Tests of this chapter", label="tbl-iso-tests")))),
        _tagged(new_markdown_cell("## Method\n\nAll-but-the-top (Mu et al. 2018) and RANDOM_METHOD_TEXT.")),
        _tagged(_code(_outputs(lambda: show_figure(_figure(), caption="Method figure", label="fig-method")))),
    ])
    plain = _chapter("uniformity", "Uniformity", [
        new_markdown_cell("## What the numbers say"),
        _code(_outputs(lambda: show_table(pd.DataFrame({"a": [1]}), caption="Uniformity table"))),
    ])
    skipped = _chapter("retrieval", "Retrieval", [], status="skipped", error="no queries")
    for fname, nb in (("00_summary", summary), ("10_isotropy", iso), ("20_uniformity", plain),
                      ("85_retrieval", skipped)):
        nbformat.write(nb, out / "chapters" / f"{fname}.ipynb")
    (out / "metrics.json").write_text(json.dumps({"version": "0.1.0", "source": "/home/builder/data/set.yaml",
                                                  "seed": 0, "chapters": {}}))
    (out / "results" / "findings.json").write_text(json.dumps(FINDINGS))
    render_report(out, title="Frame", renderer="builtin")
    return out


def _pdf_pages(path):
    from pypdf import PdfReader

    reader = PdfReader(path)
    return reader, [re.sub(r"\s+", " ", p.extract_text()) for p in reader.pages]


def _bookmarks(reader):
    out = []

    def walk(items, depth=0):
        for x in items:
            if isinstance(x, list):
                walk(x, depth + 1)
            else:
                out.append((reader.get_destination_page_number(x), depth, x.title))
    walk(reader.outline)
    return out


def test_pdf_cover_contents_body_then_appendix(folder):
    reader, pages = _pdf_pages(folder / "report.pdf")
    cover, contents = pages[0], pages[1]
    assert "PROBLEMATIC" in cover
    assert "The vectors crowd into a cone" in cover and "Mean pairwise cosine (APCS) 0.5843 [0.5705, 0.5946]" in cover
    assert "Loses to most-popular" in cover and "0.0054 vs a most-popular list 0.4649" in cover
    assert "A third finding" in cover and "A fourth finding" not in cover       # the top three
    assert "set.yaml" in cover and "/home/builder" not in " ".join(pages)       # the file name, not the path
    # one page of contents, chapter level, each with its worst severity
    for line in ("Summary problematic", "Isotropy problematic", "Uniformity healthy", "Retrieval not run"):
        assert line in contents, line
    assert "What the numbers say" not in contents and "References" in contents
    assert "Summary" in pages[2][:200]
    marks = _bookmarks(reader)
    first_appendix = next(p for p, depth, title in marks if depth == 0 and title.startswith("Appendix"))
    body, appendix = " ".join(pages[:first_appendix]), " ".join(pages[first_appendix:])
    assert [t for _, d, t in marks if d == 0 and t.startswith("Appendix")] == [
        "Appendix A Isotropy", "Appendix B References"]
    assert any(d == 1 and t == "A.1 Definitions" for _, d, t in marks)          # deeper levels stay bookmarked
    assert "Headline metrics" in body and "Method, definitions and tests: Appendix A" in body
    for ref in ("RANDOM_METHOD_TEXT", "Tests of this chapter", "lower is better", "Method figure"):
        assert ref not in body and ref in appendix, ref
    assert "Evaluating Embedding Models" in appendix and "Mu, J., Bhat, S., Viswanath, P. (2018)" in appendix
    text = " ".join(pages)
    assert "seed 000" not in text.split("Source documents")[0]                 # the References explain the form
    assert "[Evaluating Embedding Models §217.0.2]" in text
    assert "[Evaluating Embedding Models, Table 217.2, §217.0.7]" in text


def _captions(text, kind):
    return [int(n) for n in re.findall(rf"{kind} (\d+):", text)]


def test_html_appendix_is_closed_and_after_every_chapter(folder):
    html = (folder / "report.html").read_text()
    main = html.split("<main", 1)[1]
    assert main.index('id="chapter-retrieval"') < main.index('<details id="appendix-isotropy"')
    details = re.search(r'<details id="appendix-isotropy"[^>]*>(.*?)</details>', main, re.S)
    assert details and " open" not in details.group(0).split(">", 1)[0]
    assert "RANDOM_METHOD_TEXT" in details.group(1) and "Tests of this chapter" in details.group(1)
    assert "lower is better" in details.group(1)
    chapter = main.split('<section id="chapter-isotropy"')[1].split("</section>")[0]
    assert "RANDOM_METHOD_TEXT" not in chapter and 'href="#appendix-isotropy"' in chapter
    assert 'id="ref-seed-000"' in html and 'href="#ref-seed-000"' in chapter
    assert not re.search(r">[^<]*seed 000", html.split('id="appendix-references"')[0])  # no machine citation


def test_html_and_pdf_number_tables_and_figures_alike(folder):
    html = (folder / "report.html").read_text()
    visible = re.sub(r"<[^>]+>", "", html.split("<main", 1)[1])
    pdf = " ".join(_pdf_pages(folder / "report.pdf")[1])
    for kind in ("Table", "Figure"):
        assert _captions(visible, kind) == _captions(pdf, kind) == list(range(1, len(_captions(pdf, kind)) + 1))
    assert _captions(pdf, "Table") == [1, 2, 3] and _captions(pdf, "Figure") == [1, 2]
    assert "Table 1: Headline metrics" in visible and "Figure 2: Method figure" in visible


def test_html_header_shows_the_status_and_the_sidebar_the_badges(folder):
    html = (folder / "report.html").read_text()
    header = html.split('<header class="report-header">')[1].split("</header>")[0]
    assert 'class="status-badge verdict verdict-problematic"' in header
    assert header.count("<li>") - header.count('class="toc-compact"') >= 3
    assert '<a href="#chapter-isotropy">The vectors crowd into a cone</a>' in header
    assert "set.yaml" in header and "/home/builder" not in html
    assert '<details class="toc-compact">' in header                           # narrow screens: closed contents
    nav = html.split('<nav class="toc"')[1].split("</nav>")[0]
    assert re.search(r'Uniformity</a> <span class="verdict verdict-healthy">healthy</span>', nav)
    assert re.search(r'Retrieval</a> <span class="verdict verdict-skipped">not run</span>', nav)
    css = html.split("<style>")[1]
    assert re.search(r"@media \(max-width: [\d.]+rem\) \{\s*nav\.toc \{ display: none; \}", css)


def test_a_report_without_findings_shows_no_status(folder, tmp_path):
    out = tmp_path / "old"
    shutil.copytree(folder / "chapters", out / "chapters")
    shutil.copy(folder / "metrics.json", out / "metrics.json")
    render_report(out, renderer="builtin")
    html = (out / "report.html").read_text()
    header = html.split('<header class="report-header">')[1].split("</header>")[0]
    assert 'class="status-badge' not in header and "verdict" not in header and "top-findings" not in header
    cover = _pdf_pages(out / "report.pdf")[1][0]
    assert "Status" not in cover and "PROBLEMATIC" not in cover


def test_citations_name_their_document():
    assert cite_text("seed 000 §217.2") == "[Evaluating Embedding Models §217.2]"
    assert cite_text("Table 217.2 (seed 000 §217.0.7)") == "[Evaluating Embedding Models, Table 217.2, §217.0.7]"
    assert cite_text("verdict Table 217.3") == "verdict [Evaluating Embedding Models, Table 217.3]"
    assert cite_text("seed 000 §217.0.5.2.1; verdict Table 217.2 (seed 000 §217.0.7)") == (
        "[Evaluating Embedding Models §217.0.5.2.1; verdict Table 217.2, §217.0.7]")  # one document, one citation
    assert cite_text("seed 001 §21.1.1, §21.1.2 and seed 003") == (
        "[Embedding Quality Evaluation §21.1.1, §21.1.2] and [stability_metrics.py]")
    assert cite_text("seed 000 line 619") == "[Evaluating Embedding Models, line 619]"
    assert cite_text("Table 3 of this report, seed 009") == "Table 3 of this report, seed 009"  # unknown: kept
    assert cite_markdown("(seed 002)") == "(\\[[PyTorch-BigGraph: Evaluation](#ref-seed-002)\\])"
    html = '<td title="seed 000 §1">seed 000 §1</td>'
    assert cite_html(html) == ('<td title="seed 000 §1">[<a href="#ref-seed-000">Evaluating Embedding Models</a>'
                               ' §1]</td>')                                 # attributes untouched


def test_references_list_what_is_cited():
    refs = references_markdown("seed 001 §21.2; Wang & Isola (2020); Holm 1979")
    assert "Embedding Quality Evaluation" in refs and "Evaluating Embedding Models" not in refs
    assert "Wang, T., Isola, P. (2020)" in refs and "Holm, S. (1979)" in refs and "Fleiss" not in refs
    assert references_markdown("nothing cited") == ""


def test_cited_papers_equal_the_look_behind_patterns():
    """cited_papers finds each paper's pattern where no ``[\\w-]`` precedes it, as ``(?<![\\w-])pattern`` did
    (without the look-behind's scan of every position): the same answer on citations preceded by a letter, a
    hyphen, an accent, a digit or nothing, overlapping and repeated."""
    import random

    from embeval_report.report.render.references import PAPERS, _PAPERS, _cites

    rng, cited = random.Random(0), 0
    for (pattern, _), (rx, _) in zip(PAPERS, _PAPERS):
        behind = re.compile(rf"(?<![\w-]){pattern}")
        cite = (re.sub(r"\(\?:([^|)]*)\|[^)]*\)", r"\1", pattern).replace("\\.", ".").replace(",?", ",")
                .replace("\\(?", "(").replace("\\(", "("))
        cited += bool(behind.search(cite))
        for before in ("", "x", "-", " ", "é", "_", "1", "(", "xx-"):
            for text in (before + cite, f"{before}{cite} and {cite}", f"a{cite} {cite}", f"-{cite}-{cite}",
                         before + cite[:-1], "".join(rng.sample(before + cite, len(before + cite)))):
                assert _cites(rx, text) == bool(behind.search(text)), (pattern, text)
    assert cited >= 100                                                      # most texts do cite their paper


def test_finding_number_names_its_value():
    f = FINDINGS["findings"]
    assert finding_number(f[0]) == "Mean pairwise cosine (APCS) 0.5843 [0.5705, 0.5946]"
    assert finding_number(f[1]) == "0.0054 vs a most-popular list 0.4649"
    assert finding_number(f[2]) == ""
    assert finding_number({"evidence": {"value": 0.3333}}) == ""                # a value without a name: none


def test_quarto_document_has_the_same_frame(folder, tmp_path, monkeypatch):
    from test_render import _fake_quarto

    out = tmp_path / "q"
    shutil.copytree(folder, out, ignore=shutil.ignore_patterns("report.*"))
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    _fake_quarto(tmp_path)
    render_report(out, renderer="quarto")
    for to, start in (("html", "# Appendices"), ("typst", "#counter(heading).update(0)")):
        doc = (tmp_path / f"seen-{to}.qmd").read_text().split("---\n", 2)[2]
        assert doc.index("Status") < doc.index("{#chapter-summary}") < doc.index(start)
        body, appendix = doc.split(start)
        assert "The vectors crowd into a cone" in body and "RANDOM_METHOD_TEXT" not in body
        assert "RANDOM_METHOD_TEXT" in appendix and "{#appendix-isotropy" in appendix
        assert "seed 000" not in doc.split("Source documents")[0]
    assert "Appendix A: Isotropy" in (tmp_path / "seen-html.qmd").read_text()
    html = (tmp_path / "seen-html.qmd").read_text()
    assert "# Isotropy [problematic]{.verdict .verdict-problematic} {#chapter-isotropy}" in html
    assert '::: {#appendix-isotropy .callout-note collapse="true"}' in html
    assert "[Appendix A](#appendix-isotropy)" in html
    typ = (tmp_path / "seen-typst.qmd").read_text()
    assert '#badge(kind: "problematic", "problematic")' in typ.split("{#chapter-isotropy}")[0]
