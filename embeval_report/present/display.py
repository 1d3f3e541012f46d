"""What chapter notebooks call to show things in the report.

Every display object carries two representations:

* ``text/html`` -- what JupyterLab and the HTML report show (self-styled, so it also looks
  right in JupyterLab where the report's CSS is absent);
* ``text/markdown`` -- pandoc markdown, what the PDF renderer (and Quarto) consume.

User strings (ids, labels, titles, captions) are plain text: the functions here escape them.
Narrative passed to :func:`show_markdown` or :func:`callout` is markdown (LaTeX math allowed)
and is *not* escaped -- wrap user strings inside it with :func:`escape`.

Output metadata under the ``"embeval"`` key tells the report renderer what an output is
(``role``: ``"table"``, ``"figure"``, ``"figure-caption"``, ``"callout"``, ``"definitions"``). An output whose
metadata names ``"appendix"`` (the heading it goes under) is reference material: the report moves it to the
chapter's appendix (:data:`APPENDIX_TAG` marks whole cells the same way).
"""
from __future__ import annotations

import base64
import html as _html
import io
import numbers
import re
from typing import Any

import numpy as np
import pandas as pd

from . import escape as _escape
from .format import MARK, MARK_NOTE, interval, is_missing, marked_value, number, p_value

__all__ = ["escape", "Badge", "Link", "Table", "show_table", "show_figure", "show_markdown", "callout", "metrics_table",
           "definitions_markdown", "show_definitions", "show_metrics", "show_tests", "hypothesis_table", "TESTS_CAPTION",
           "VERDICT_COLORS", "CALLOUT_KINDS", "APPENDIX_TAG"]

#: the cell tag of a chapter notebook's reference material (Method, Protocol, Hypothesis tests): the report puts
#: tagged cells in the chapter's appendix (PDF) or its collapsed part (HTML), after every chapter
APPENDIX_TAG = "appendix"

VERDICT_COLORS = {"healthy": "#2e7d32", "concerning": "#b26a00", "problematic": "#c62828", "neutral": "#2f6fb3"}
CALLOUT_KINDS = ("note", "warning", "danger", "success")
_CALLOUT_STYLE = {  # border, background (inline styles for JupyterLab; the report CSS matches)
    "note": ("#2f6fb3", "#eef4fb"),
    "warning": ("#b26a00", "#fdf5e6"),
    "danger": ("#c62828", "#fdecec"),
    "success": ("#2e7d32", "#edf7ee"),
}
_FIGURE_DPI = 150


def escape(text: Any) -> str:
    """Make a user string safe inside markdown *and* HTML (:func:`.escape.markdown`).

    HTML-escapes ``<>&"'`` and backslash-escapes markdown specials (``*_`[]#|$`` ...), so an id
    like ``a_b*<c>`` shows literally in both renderings; bidi controls show as ``<U+202E>``. ``None`` becomes ``""``.
    """
    return _escape.markdown(text)


def _html_text(text: Any) -> str:
    return _escape.html_text(text)


def _one_line(s: str) -> str:
    return re.sub(r"\s*[\r\n]+\s*", " ", s)


_SAFE_HREF = re.compile(r"^(#|https?:|mailto:|\.{0,2}/|[\w.-]+(?:/|\.html?\b|#|$))", re.IGNORECASE)


def _safe_href(href: Any) -> str:
    href = str(href or "").strip()
    return href if _SAFE_HREF.match(href) and not href.lower().startswith("javascript:") else "#"


class Link:
    """A table cell that renders as a link; ``text`` is a plain string (escaped)."""

    def __init__(self, text, href):
        self.text = "" if text is None else str(text)
        self.href = _safe_href(href)

    def _repr_html_(self) -> str:
        return f'<a href="{_html.escape(self.href, quote=True)}">{_html_text(self.text)}</a>'

    def _repr_markdown_(self) -> str:
        href = self.href
        if re.search(r"[\s()<>]", href):
            href = "<" + href.replace("<", "%3C").replace(">", "%3E") + ">"
        return f"[{escape(_one_line(self.text))}]({href})"

    def __repr__(self) -> str:
        return f"Link({self.text!r}, {self.href!r})"

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other):
        return isinstance(other, Link) and (self.text, self.href) == (other.text, other.href)

    def __hash__(self):
        return hash((self.text, self.href))


def _is_numeric(v: Any) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


def _badge_class(kind: str) -> str:
    """One CSS class word from a verdict or kind (``"A better"`` → ``a-better``)."""
    return re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") or "unknown"


def _badge_html(v: str, kind: str | None = None) -> str:
    kind = _badge_class(kind or v)
    color = VERDICT_COLORS.get(kind, "#666")
    return (f'<span class="verdict verdict-{kind}" style="background:{color};color:#fff;'
            f'padding:0.1em 0.55em;border-radius:0.7em;font-size:0.85em;font-weight:600;white-space:nowrap">'
            f"{_html_text(v)}</span>")


def _badge_md(v: str, kind: str | None = None) -> str:
    return f"[{escape(v)}]{{.verdict .verdict-{_badge_class(kind or v)}}}"


class Badge:
    """A table cell shown as a verdict badge reading ``text`` in the colour of ``kind`` (healthy, concerning,
    problematic, neutral; any other kind is grey), e.g. a comparison's "prod better"."""

    def __init__(self, text, kind: str):
        self.text, self.kind = str(text), str(kind)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Badge({self.text!r}, {self.kind!r})"

    def __eq__(self, other):
        return isinstance(other, Badge) and (self.text, self.kind) == (other.text, other.kind)

    def __hash__(self):
        return hash((self.text, self.kind))


def _label_id(label: str | None) -> str | None:
    if not label:
        return None
    s = re.sub(r"[^A-Za-z0-9_.:-]+", "-", str(label)).strip("-")
    return s or None


class Table:
    """An IPython display object for a DataFrame, as HTML (JupyterLab, HTML report) and as a
    pandoc pipe table with caption (PDF)."""

    def __init__(self, df, caption: str | None = None, label: str | None = None, index: bool = False,
                 digits: int = 4, meta: dict | None = None):
        import pandas as pd

        if not isinstance(df, pd.DataFrame):
            df = pd.DataFrame(df)
        if index:
            df = df.reset_index()
        self.df = df
        self.caption = caption
        self.label = _label_id(label)
        self.index = index
        self.digits = digits
        self.meta = dict(meta or {})

    # -- cells -------------------------------------------------------------------------------
    def _columns(self) -> list[str]:
        cols = []
        for c in self.df.columns:
            if isinstance(c, tuple):
                c = " / ".join(str(x) for x in c if str(x))
            cols.append(str(c))
        return cols

    def _numeric_columns(self) -> list[bool]:
        out = []
        for j in range(self.df.shape[1]):
            vals = [v for v in self.df.iloc[:, j].tolist() if not is_missing(v)]
            out.append(bool(vals) and all(_is_numeric(v) for v in vals))
        return out

    def _cell(self, v: Any, verdict: bool, fmt: str) -> str:
        if isinstance(v, Badge):
            return _badge_html(v.text, v.kind) if fmt == "html" else _badge_md(v.text, v.kind)
        if verdict:
            if is_missing(v) or str(v).strip() == "":
                return ""
            return _badge_html(str(v)) if fmt == "html" else _badge_md(str(v))
        if isinstance(v, Link):
            return v._repr_html_() if fmt == "html" else v._repr_markdown_()
        if is_missing(v) or _is_numeric(v):
            return number(v, self.digits)
        s = _one_line(str(v))
        return _html_text(s) if fmt == "html" else escape(s)

    # -- representations ---------------------------------------------------------------------
    def _repr_html_(self) -> str:
        cols = self._columns()
        numeric = self._numeric_columns()
        verdict = [c.strip().lower() == "verdict" for c in cols]
        ident = f' id="{_html.escape(self.label)}"' if self.label else ""
        parts = [f'<div class="embeval-table-wrap" style="overflow-x:auto">'
                 f'<table class="embeval-table"{ident}>']
        if self.caption:
            parts.append(f'<caption>Table: {_html_text(self.caption)}</caption>')
        parts.append("<thead><tr>")
        for c, num in zip(cols, numeric):
            parts.append(f'<th class="{"num" if num else "text"}">{_html_text(c)}</th>')
        parts.append("</tr></thead><tbody>")
        for row in self.df.itertuples(index=False, name=None):
            parts.append("<tr>")
            for v, num, ver in zip(row, numeric, verdict):
                cls = "num" if num else ("verdict-cell" if ver else "text")
                parts.append(f'<td class="{cls}">{self._cell(v, ver, "html")}</td>')
            parts.append("</tr>")
        parts.append("</tbody></table></div>")
        return "".join(parts)

    def _repr_markdown_(self) -> str:
        cols = self._columns()
        numeric = self._numeric_columns()
        verdict = [c.strip().lower() == "verdict" for c in cols]
        header = [escape(_one_line(c)) or " " for c in cols]
        rows = [[self._cell(v, ver, "md") for v, ver in zip(row, verdict)]
                for row in self.df.itertuples(index=False, name=None)]
        # Dash counts set the relative column widths pandoc uses when a line is long.
        widths = []
        for j, h in enumerate(header):
            longest = max([len(h)] + [len(r[j]) for r in rows])
            widths.append(min(max(3, longest), 40))
        def line(cells):
            return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
        sep = "|" + "|".join(("-" * (w + 1) + ":") if num else (":" + "-" * (w + 1))
                             for w, num in zip(widths, numeric)) + "|"
        out = [line(header), sep] + [line(r) for r in rows]
        if not rows:  # pandoc needs at least the header; say so explicitly
            out.append(line(["—"] + [""] * (len(header) - 1)) if header else "")
        text = "\n".join(out)
        if self.caption or self.label:
            cap = escape(_one_line(self.caption or ""))
            text += f"\n\n: {cap}" + (f" {{#{self.label}}}" if self.label else "")
        return text + "\n"

    def _repr_mimebundle_(self, include=None, exclude=None):
        data = {"text/html": self._repr_html_(), "text/markdown": self._repr_markdown_(),
                "text/plain": self.__repr__()}
        return data, {"embeval": {"role": "table", "label": self.label, **self.meta}}

    def __repr__(self) -> str:
        head = f"Table: {self.caption}\n" if self.caption else ""
        return head + self.df.to_string(index=False, max_rows=30)


def show_table(df, caption=None, label=None, **kw) -> None:
    """Display a :class:`Table` (see its arguments)."""
    from IPython.display import display
    display(Table(df, caption=caption, label=label, **kw))


#: tests of one family shown one by one in a chapter's table up to this many; beyond, one summary row
FAMILY_ROWS = 5


def hypothesis_rows(tests: pd.DataFrame, *, family_rows: int = FAMILY_ROWS, chapter_column: bool = False
                  ) -> pd.DataFrame:
    """The tests as a reader sees them: one row per test, or one row per family with more than
    ``family_rows`` tests (its count, smallest p and rejections). Adjusted columns appear when
    ``tests`` has them (after :func:`adjust_tests`), else they say the run adjusts them at the end."""
    adjusted = "p_holm" in tests.columns
    rows = []
    families = tests["family"].fillna("")
    done = set()
    for i, t in tests.iterrows():
        fam = families[i]
        key = (t["chapter"], fam)
        members = tests[(families == fam) & (tests["chapter"] == t["chapter"])] if fam else None
        if fam and len(members) > family_rows:
            if key in done:
                continue
            done.add(key)
            row = {"test": f"{len(members)} tests: {fam}", "null hypothesis": str(t["null"] or ""),
                   "n": str(t["n"] or ""), "statistic": "", "p": f"min {p_value(members['p_value'].min())}"}
            if adjusted:
                row["Holm (report)"] = f"{int(members['rejected_holm'].sum())} rejected, min {p_value(members['p_holm'].min())}"
                row["BH (report)"] = f"{int(members['rejected_bh'].sum())} rejected, min {p_value(members['p_bh'].min())}"
        else:
            stat = t["statistic"]
            row = {"test": f"{t['name']}: {t['test']}", "null hypothesis": str(t["null"] or ""), "n": str(t["n"] or ""),
                   "statistic": "" if stat is None or not np.isfinite(stat) else f"{stat:.4g}", "p": p_value(t["p_value"])}
            if adjusted:
                row["Holm (report)"] = p_value(t["p_holm"]) + (" *" if t["rejected_holm"] else "")
                row["BH (report)"] = p_value(t["p_bh"]) + (" *" if t["rejected_bh"] else "")
        if not adjusted:
            row["adjusted"] = "at the end of the run (see Statistical rigor)"
        if chapter_column:
            row = {"chapter": t["chapter"], **row}
        rows.append(row)
    return pd.DataFrame(rows)



#: caption of every chapter's table of hypothesis tests
TESTS_CAPTION = ("Hypothesis tests of this chapter: raw p-values, and the p-values adjusted over every test in the "
                 "report (Holm: family-wise error; Benjamini–Hochberg: false-discovery rate; * rejected at α = 0.05). "
                 "Families of many tests are summarised in one row; the Statistical rigor chapter lists them all.")


def hypothesis_table(tests, chapter: str) -> Table:
    """The table of a chapter's hypothesis tests (``tests``: :func:`embeval_report.metrics.rigor.collect_tests`
    rows, adjusted or not; shown by :func:`embeval_report.report.rigor.hypothesis_rows`). Its output is marked ``{"tests": chapter}``: the runner re-renders it with the
    report-wide adjusted p-values once every chapter has run."""
    return Table(hypothesis_rows(tests), caption=TESTS_CAPTION, label=f"tbl-{chapter}-tests", meta={"tests": chapter})


def show_tests(rec) -> None:
    """Show the hypothesis tests a chapter's recorder holds (nothing when it ran none)."""
    from IPython.display import display

    from ..metrics.rigor import collect_tests

    frame = collect_tests({rec.chapter: {"tests": list(rec.tests.values())}})
    if len(frame):
        display(hypothesis_table(frame, rec.chapter))


def _png_size(data: bytes) -> tuple[int, int]:
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return 0, 0


def _set_layout_engine(fig, engine) -> None:
    """``fig.set_layout_engine(engine)``, where None means none (not the style's default engine)."""
    import matplotlib

    with matplotlib.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(engine)


def _save_tight(fig, buf) -> None:
    """``fig.savefig(buf, png, _FIGURE_DPI, bbox_inches="tight", white)``, the same bytes with one pass less.

    savefig draws the figure once without rendering (which runs its layout engine), measures its tight box,
    then draws it for real; here the layout engine runs alone before the box is measured, then savefig draws
    the figure once at that box (the layout turned off, as savefig turns it off after its own pass). The
    demo's 49 figures come out byte for byte the same with 11 % less CPU. A figure with subfigures, or whose
    axes have a locator (a colorbar's, inset axes: placed at draw), or not on an Agg canvas takes savefig's
    own way."""
    import matplotlib

    engine = fig.get_layout_engine()
    if (not hasattr(fig.canvas, "get_renderer") or getattr(fig, "subfigs", None)
            or any(ax.get_axes_locator() is not None for ax in fig.axes)):
        fig.savefig(buf, format="png", dpi=_FIGURE_DPI, bbox_inches="tight", facecolor="white")
        return
    dpi = fig.dpi
    fig.set_dpi(_FIGURE_DPI)
    try:
        renderer = fig.canvas.get_renderer()
        if engine is not None:
            engine.execute(fig)
        box = fig.get_tightbbox(renderer).padded(matplotlib.rcParams["savefig.pad_inches"])
        _set_layout_engine(fig, None)  # no engine at all: savefig draws once ("none" would keep a placeholder)
        try:
            fig.savefig(buf, format="png", dpi=_FIGURE_DPI, bbox_inches=box, facecolor="white")
        finally:
            _set_layout_engine(fig, engine)
    finally:
        fig.set_dpi(dpi)


def _save_png(fig, buf) -> None:
    """The figure as PNG. A text that is not valid mathtext (a user string with ``$`` the chapter did not pass
    through :func:`.escape.mathtext`) is shown literally rather than failing the figure; should drawing still
    fail on one, every text of the figure is drawn without mathtext."""
    import matplotlib

    def save():
        _save_tight(fig, buf)

    try:
        return save()
    except ValueError:
        from matplotlib.mathtext import MathTextParser
        from matplotlib.text import Text

        parser = MathTextParser("path")
        for t in fig.findobj(Text):
            try:
                parser.parse(t.get_text())
            except ValueError:
                t.set_text(_escape.mathtext(t.get_text()))
    buf.seek(0)
    buf.truncate()
    try:
        return save()
    except ValueError:
        from matplotlib.text import Text

        for t in fig.findobj(Text):
            t.set_parse_math(False)
        buf.seek(0)
        buf.truncate()
        with matplotlib.rc_context({"text.parse_math": False}):
            save()


def show_figure(fig, caption: str, label: str | None = None) -> None:
    """Display a matplotlib figure as PNG (150 dpi) followed by its caption, then close it.

    Emits two outputs: the image (``image/png``; its metadata carries the caption for the report
    renderer) and a caption output (``text/html`` + ``text/markdown``, "Figure: ...") that any
    notebook viewer shows below the image.
    """
    from IPython.display import display

    if not hasattr(fig, "savefig"):  # seaborn grids, axes
        fig = getattr(fig, "figure", None) or getattr(fig, "fig", None) or fig
    buf = io.BytesIO()
    _save_png(fig, buf)
    try:
        import matplotlib.pyplot as plt
        plt.close(fig)
    except Exception:  # pragma: no cover - not a pyplot figure
        pass
    data = buf.getvalue()
    w, h = _png_size(data)
    lab = _label_id(label)
    meta_img: dict = {"embeval": {"role": "figure", "caption": caption, "label": lab, "dpi": _FIGURE_DPI}}
    if w and h:
        # CSS pixels at 100 px per inch of figure: sharp on high-density screens
        meta_img["image/png"] = {"width": round(w * 100 / _FIGURE_DPI), "height": round(h * 100 / _FIGURE_DPI)}
    display({"image/png": base64.b64encode(data).decode("ascii"),
             "text/plain": f"<Figure: {_one_line(str(caption))}>"}, raw=True, metadata=meta_img)
    display({"text/html": f'<p class="figure-caption" style="text-align:center;font-size:0.9em;color:#444">'
                          f"Figure: {_html_text(_one_line(str(caption)))}</p>",
             "text/markdown": f"Figure: {escape(_one_line(str(caption)))}\n",
             "text/plain": f"Figure: {_one_line(str(caption))}"},
            raw=True, metadata={"embeval": {"role": "figure-caption", "label": lab}})


def show_markdown(text: str) -> None:
    """Display markdown narrative (LaTeX math ``$...$`` / ``$$...$$`` allowed)."""
    from IPython.display import Markdown, display
    display(Markdown(text))


def _markdown_to_html(text: str) -> str:
    """Best-effort markdown -> HTML for JupyterLab (the report renders the markdown itself)."""
    try:
        import mistune
        return mistune.html(text)
    except Exception:  # pragma: no cover - mistune comes with nbconvert
        return "".join(f"<p>{_html_text(p)}</p>" for p in text.split("\n\n"))


def callout(kind: str, text: str, title: str | None = None) -> None:
    """Display a boxed note. ``kind``: note | warning | danger | success; ``text`` is markdown,
    ``title`` plain text (defaults to the kind)."""
    from IPython.display import display

    kind = str(kind).lower()
    if kind not in CALLOUT_KINDS:
        raise ValueError(f"callout kind must be one of {', '.join(CALLOUT_KINDS)}, not {kind!r}")
    title = kind.capitalize() if title is None else str(title)
    border, bg = _CALLOUT_STYLE[kind]
    html_out = (f'<div class="callout callout-{kind}" style="border-left:4px solid {border};background:{bg};'
                f'padding:0.6em 1em;margin:1em 0;border-radius:4px">'
                f'<p class="callout-title" style="margin:0 0 0.3em;font-weight:700;color:{border}">'
                f"{_html_text(title)}</p>{_markdown_to_html(text)}</div>")
    body = "\n".join("> " + line if line.strip() else ">" for line in str(text).strip().splitlines())
    md = f"<!-- embeval-callout:{kind} -->\n\n> **{escape(_one_line(title))}**\n>\n{body}\n"
    display({"text/html": html_out, "text/markdown": md, "text/plain": f"[{kind}] {title}: {text}"},
            raw=True, metadata={"embeval": {"role": "callout", "kind": kind}})


def metrics_table(metrics):
    """The headline table a chapter shows for its :class:`~embeval_report.metrics.spec.Metric` records:
    value, 95 % CI, which way is better and verdict (``metrics``: name -> Metric). Formulas and references are
    reference material: :func:`definitions_markdown`, shown in the chapter's appendix."""
    import pandas as pd

    def value(v):  # counts read with thousands separated
        whole = v is not None and not is_missing(v) and float(v).is_integer() and abs(v) >= 1000
        return f"{int(v):,}" if whole else number(v)

    rows = [{"metric": m.label or m.name,
             "value": marked_value(m.value, m.ci_low, m.ci_high, m.bias_corrected, value(m.value)),
             "95 % CI": interval(m.ci_low, m.ci_high, sep=" – ") if m.has_ci else (
                 f"— ({m.note})" if m.note else "—"),
             "better": m.direction or "", "verdict": m.verdict} for m in metrics.values()]
    return pd.DataFrame(rows, columns=["metric", "value", "95 % CI", "better", "verdict"])


def with_mark_note(table, caption: str) -> str:
    """``caption``, followed by what :data:`~.format.MARK` means when a cell of ``table`` is marked with it."""
    marked = bool(table.astype(str).apply(lambda c: c.str.contains(MARK, regex=False)).any().any()) if len(table) \
        else False
    if not marked:
        return caption
    caption = caption.rstrip()
    return f"{caption}{'' if caption.endswith(('.', ')')) else '.'} {MARK_NOTE}"


def definitions_markdown(metrics) -> str:
    """A bullet list giving each metric's formula (where it has one), direction and reference."""
    def item(m):  # the formula is the package's LaTeX; the label and reference may carry user strings
        formula = f"${m.formula}$ — " if m.formula else ""
        direction = f"{m.direction} is better" if m.direction else "a count: neither way is better"
        reference = f"; {escape(m.reference)}" if m.reference else ""
        return f"- **{escape(m.label or m.name)}** ({_escape.markdown_code(m.name)}): {formula}{direction}{reference}."
    return "\n".join(item(m) for m in metrics.values() if m.formula or m.reference)


def show_definitions(text: str) -> None:
    """Display a chapter's definitions (markdown): reference material, which the report moves to the chapter's
    appendix under "Definitions"."""
    from IPython.display import display

    if text:
        display({"text/markdown": text, "text/plain": text}, raw=True,
                metadata={"embeval": {"role": "definitions", "appendix": "Definitions"}})


def show_metrics(metrics, caption: str, label: str, definitions: str | None = None) -> None:
    """Show the headline metrics table, then the definitions (``definitions``: markdown put before the list),
    which the report moves to the chapter's appendix."""
    table = metrics_table(metrics)
    show_table(table, caption=with_mark_note(table, caption), label=label)
    show_definitions("\n\n".join(x for x in (definitions, definitions_markdown(metrics)) if x))


def smaller_k_note(k: int, requested: int, why: str) -> None:
    """Say that neighbourhoods use a smaller k than requested, and why (nothing when they do not)."""
    if k != requested:
        callout("note", f"{why}, so neighbourhoods use k = {k} instead of the requested {requested} (a k-NN overlap "
                        "needs k ≤ n − 2 for n shared entities).", title="Smaller k")
