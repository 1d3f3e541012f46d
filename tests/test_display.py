"""embeval_report.present.display: escaping, Table (HTML + pandoc markdown), figures, callouts."""
import base64
import math
import os
import tempfile

import numpy as np
import pandas as pd
import pytest

os.environ.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="ipython-"))

from embeval_report.present.display import (  # noqa: E402
    Link, Table, callout, escape, show_figure, show_markdown, show_table,
)
from embeval_report.present.format import number as format_number  # noqa: E402


@pytest.fixture(scope="module")
def capture():
    """Capture what display() publishes, as a notebook kernel would."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    return capture_output


def test_escape_html_and_markdown_specials():
    assert escape("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert escape('a & b "c" \'d\'') == "a &amp; b &quot;c&quot; &#x27;d&#x27;"
    assert escape("a_b*c*`d`") == r"a\_b\*c\*\`d\`"
    assert escape("[x](y) #h | $5 @cite ~s~ ^t^ \\") == r"\[x\](y) \#h \| \$5 \@cite \~s\~ \^t\^ \\"
    assert escape("- item") == r"\- item" and escape("1. one") == r"1\. one"
    assert escape("bert-base-uncased v1.2") == "bert-base-uncased v1.2"  # no clutter mid-line
    assert escape(None) == "" and escape(42) == "42"


def test_escaped_strings_render_literally_through_pandoc():
    from embeval_report.report.render.common import _pandoc

    raw = "id_1 *not bold* <b>x</b> [link](http://e.com) $x$ @ref #tag | pipe"
    out = _pandoc(escape(raw), "plain", [])
    assert out.strip() == raw


def test_format_number():
    assert format_number(0.123456) == "0.1235"
    assert format_number(3) == "3" and format_number(np.int64(7)) == "7"
    assert format_number(float("nan")) == "—" and format_number(None) == "—" and format_number(pd.NA) == "—"
    assert format_number(1234567.8) == "1234568"
    assert format_number(1.23456e-7) == "1.235e-7"
    assert format_number(2.0, digits=3) == "2"
    assert format_number(math.inf) == "∞"


def test_link_is_escaped_and_safe():
    link = Link("a_b <c>", "#chapter-isotropy")
    assert link._repr_html_() == '<a href="#chapter-isotropy">a_b &lt;c&gt;</a>'
    assert link._repr_markdown_() == r"[a\_b &lt;c&gt;](#chapter-isotropy)"
    assert Link("x", "javascript:alert(1)").href == "#"


@pytest.fixture
def frame():
    return pd.DataFrame({
        "chapter": [Link("Isotropy", "#chapter-isotropy"), Link("Hubs", "#chapter-hubs"), "plain_<id>"],
        "value": [0.123456789, float("nan"), 12.0],
        "n": [10, 20, 30],
        "verdict": ["healthy", None, "problematic"],
        "label": ["a|b", "x*y", None],
    })


def test_table_html(frame):
    html = Table(frame, caption="Scores <of> things", label="tbl-scores")._repr_html_()
    assert '<table class="embeval-table" id="tbl-scores">' in html
    assert "<caption>Table: Scores &lt;of&gt; things</caption>" in html
    assert '<a href="#chapter-isotropy">Isotropy</a>' in html
    assert "0.1235" in html and "—" in html and ">10<" in html
    assert 'class="verdict verdict-healthy"' in html and 'class="verdict verdict-problematic"' in html
    assert html.count('class="verdict ') == 2  # None verdict: empty cell
    assert "plain_&lt;id&gt;" in html and "<id>" not in html
    assert 'class="num"' in html


def test_table_markdown_is_a_pandoc_pipe_table_with_caption(frame):
    md = Table(frame, caption="Scores <of> things", label="tbl-scores")._repr_markdown_()
    lines = md.strip().splitlines()
    assert lines[0].startswith("| chapter") and set(lines[1]) <= set("|-: ")
    assert lines[1].split("|")[2].endswith(":")  # numeric column right-aligned
    assert "[Isotropy](#chapter-isotropy)" in md
    assert "[healthy]{.verdict .verdict-healthy}" in md
    assert r"plain\_&lt;id&gt;" in md and r"a\|b" in md and r"x\*y" in md
    assert lines[-1] == ": Scores &lt;of&gt; things {#tbl-scores}"
    assert len(lines) == 2 + 3 + 2  # header, rule, 3 rows, blank, caption


def test_table_markdown_converts_to_a_table_with_caption():
    from embeval_report.report.render.common import _pandoc

    md = Table(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}), caption="Cap")._repr_markdown_()
    html = _pandoc(md, "html5", [])
    assert "<table" in html and "Cap</caption>" in html.replace("\n", "")


def test_table_index_and_digits():
    t = Table(pd.DataFrame({"v": [1.23456]}, index=pd.Index(["r1"], name="row")), index=True, digits=2)
    assert "r1" in t._repr_html_() and "1.2<" in t._repr_html_()


def test_show_table_and_markdown_publish(capture, frame):
    with capture() as cap:
        show_table(frame, caption="c", label="tbl-x")
        show_markdown("Some $x^2$ math")
    (table, md) = cap.outputs
    assert {"text/html", "text/markdown"} <= set(table.data)
    assert table.metadata["embeval"]["role"] == "table"
    assert md.data["text/markdown"] == "Some $x^2$ math"


def test_show_figure_publishes_png_and_caption(capture):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [1, 0])
    with capture() as cap:
        show_figure(fig, caption="A <b>line</b> of id_1", label="fig-line")
    assert not plt.fignum_exists(fig.number)  # closed
    img, cap_out = cap.outputs
    png = base64.b64decode(img.data["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    meta = img.metadata["embeval"]
    assert meta == {"role": "figure", "caption": "A <b>line</b> of id_1", "label": "fig-line", "dpi": 150}
    assert 300 < img.metadata["image/png"]["width"] < 500  # ~4 in at 100 px/in
    assert cap_out.metadata["embeval"]["role"] == "figure-caption"
    assert cap_out.data["text/markdown"].strip() == r"Figure: A &lt;b&gt;line&lt;/b&gt; of id\_1"
    assert "Figure: A &lt;b&gt;line&lt;/b&gt; of id_1" in cap_out.data["text/html"]


def _figures_to_save():
    """Figures like the chapters': constrained layout with log axes, mathtext, a legend outside, a suptitle and
    a text beyond the axes; a colorbar (its axes have a locator); one without a layout engine."""
    import matplotlib.pyplot as plt

    from embeval_report.present.plotting import use_style

    use_style()
    rng = np.random.default_rng(0)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3))
    a.loglog(np.arange(1, 100), np.arange(1, 100) ** 1.5, label="$n^{1.5}$ data")
    a.set(xlabel="rank", ylabel="eigenvalue", title="Spectrum")
    b.hist(rng.standard_normal(500), bins=30)
    b.legend(["draws"], loc="upper left", bbox_to_anchor=(1.02, 1))
    b.text(1.05, 0.1, "a note beyond the axes", transform=b.transAxes)
    fig.suptitle("Two panels")
    yield fig
    fig, ax = plt.subplots(figsize=(5, 4))
    fig.colorbar(ax.imshow(rng.random((8, 8))), ax=ax, label="share")
    yield fig
    fig = plt.figure(figsize=(4, 3), layout="none")
    fig.add_subplot().plot([0, 1], [1, 0])
    yield fig


def test_figure_png_is_savefigs_tight_png():
    """_save_png skips savefig's draw without rendering (the layout engine runs alone before the tight box is
    measured): the same PNG bytes as savefig(bbox_inches="tight"), the figure's layout engine and dpi kept."""
    import io
    import pickle

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embeval_report.present.display import _FIGURE_DPI, _save_png

    for fig in _figures_to_save():
        twin = pickle.loads(pickle.dumps(fig))
        engine, dpi = type(fig.get_layout_engine()), fig.dpi
        ours, theirs = io.BytesIO(), io.BytesIO()
        _save_png(fig, ours)
        twin.savefig(theirs, format="png", dpi=_FIGURE_DPI, bbox_inches="tight", facecolor="white")
        assert ours.getvalue() == theirs.getvalue()
        assert type(fig.get_layout_engine()) is engine and fig.dpi == dpi
        plt.close(fig)
        plt.close(twin)


def test_callout(capture):
    with capture() as cap:
        callout("warning", "Cosines are **inflated**; try $D = 2$.", title="Anisotropy <x>")
    (out,) = cap.outputs
    md = out.data["text/markdown"]
    assert md.startswith("<!-- embeval-callout:warning -->")
    assert "> **Anisotropy &lt;x&gt;**" in md and "> Cosines are **inflated**" in md
    assert 'class="callout callout-warning"' in out.data["text/html"]
    assert "Anisotropy &lt;x&gt;" in out.data["text/html"]
    with pytest.raises(ValueError):
        callout("shout", "x")
