"""Reading an executed report folder: its chapters (filtered cells, status) and its header."""

import copy
import datetime as _dt
import json
import logging
import math
import os
import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ...chapters.findings import SEVERITIES, STATUSES
from ...chapters.recorder import read_adjusted
from ...chapters.registry import decision_chapter
from ...present.display import APPENDIX_TAG
from ...safe_files import replace_file
from ..rigor import with_adjusted_tests
from .references import cite_html, cite_markdown, cite_text, references_markdown

log = logging.getLogger(__name__)

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
HEADER_FIELDS = (("source", "Source"), ("model", "Model"), ("seed", "Seed"), ("device", "Device"),
                 ("engine", "Engine"), ("sample_size", "Sample size"), ("memory_budget", "Memory budget"),
                 ("version", "Version"), ("generated", "Generated"))

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_CHUNK_BREAK = "<!-- embeval-chunk-break -->"
_CHAPTER_BREAK = "// embeval-chapter-break"
_H1 = re.compile(r"^[ ]{0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")


def templates_dir() -> Path:
    """The report templates: ``templates/`` of the checkout, or the wheel's copy
    (``EMBEVAL_TEMPLATES`` overrides, for trying a changed look)."""
    env = os.environ.get("EMBEVAL_TEMPLATES")
    if env:
        return Path(env)
    from ...resources import templates_dir as _templates_dir
    return _templates_dir()


def _quarto_template() -> Path:
    from ...resources import quarto_template
    return quarto_template()


def quarto_available() -> bool:
    """Whether the ``quarto`` command is on PATH."""
    return shutil.which("quarto") is not None


def _pandoc(text: str, to: str, extra_args: list[str]) -> str:
    import pypandoc
    return pypandoc.convert_text(text, to, format=MARKDOWN_FORMAT, extra_args=["--wrap=none", "--quiet", *extra_args],
                                 sandbox=False, verify_format=False)  # fixed formats: not two more pandoc runs each


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text or "")


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
    appendix: object | None = None  # nbformat.NotebookNode of the reference material (APPENDIX_TAG), or None
    letter: str | None = None       # its appendix letter
    severity: str | None = None     # the worst severity of its findings (None: the report has no findings)
    appendix_body: str = ""
    source_text: str = ""           # its text before citations were named (what the References list)

    @property
    def anchor(self) -> str:
        return "chapter-" + _slug(self.name)

    @property
    def appendix_anchor(self) -> str:
        return "appendix-" + _slug(self.name)

    @property
    def appendix_title(self) -> str:
        return f"Appendix {self.letter}: {self.title}"


#: the References appendix (always the last one)
REFERENCES_ANCHOR = "appendix-references"


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


def _appendix_heading(out) -> str | None:
    """The appendix heading an output is marked for (``{"embeval": {"appendix": heading}}``), else None."""
    emb = (out.get("metadata") or {}).get("embeval") if isinstance(out.get("metadata"), dict) else None
    heading = emb.get("appendix") if isinstance(emb, dict) else None
    return str(heading) if heading else None


def _split_appendix(nb):
    """Move the reference material of a chapter notebook out of its body: cells tagged
    :data:`~embeval_report.present.display.APPENDIX_TAG`, and outputs marked for the appendix (each under its
    heading, e.g. the definitions under the metrics table). Returns the appendix notebook, or None."""
    import nbformat

    body, extra = [], []
    for cell in nb.cells:
        if APPENDIX_TAG in _cell_tags(cell):
            extra.append(cell)
            continue
        if cell.cell_type == "code":
            kept, moved = [], []
            for out in cell.get("outputs", []) or []:
                heading = _appendix_heading(out)
                if heading is None:
                    kept.append(out)
                elif moved and moved[-1][0] == heading:
                    moved[-1][1].append(out)
                else:
                    moved.append((heading, [out]))
            for heading, outs in moved:
                extra.append(nbformat.v4.new_markdown_cell(f"## {heading}"))
                for out in outs:  # "**Definitions.** λ are ..." under the heading "Definitions": said once
                    data = out.get("data") or {}
                    lead = f"**{heading}.** "
                    if str(data.get("text/markdown", "")).startswith(lead):
                        text = data["text/markdown"][len(lead):]
                        data["text/markdown"] = text[:1].upper() + text[1:]
                part = copy.deepcopy(cell)
                part.outputs = outs
                extra.append(part)
            if moved:
                if not kept:
                    continue
                cell.outputs = kept
        body.append(cell)
    nb.cells = body
    if not extra:
        return None
    return nbformat.v4.new_notebook(cells=extra, metadata=copy.deepcopy(nb.metadata))


_APPENDIX_PARTS = (("method", "Method"), ("definitions", "definitions"), ("protocol", "protocol"),
                   ("tests", "tests"))


def appendix_pointer(ch: ChapterDoc) -> str:
    """The line in a chapter's body naming what its appendix holds: ``Method, definitions and tests: Appendix C``."""
    heads = " ".join(c.source.lower() for c in ch.appendix.cells if c.cell_type == "markdown")
    found = [label for key, label in _APPENDIX_PARTS
             if re.search(rf"^#+ .*{'hypothesis tests' if key == 'tests' else key}", heads, re.M)]
    found = [found[0][:1].upper() + found[0][1:]] + found[1:] if found else ["Reference material"]
    what = found[0] if len(found) == 1 else ", ".join(found[:-1]) + " and " + found[-1]
    return f"*{what}: [Appendix {ch.letter}](#{ch.appendix_anchor}).*"


def _map_texts(nb, fn) -> None:
    """Replace every text of ``nb`` a reader sees by ``fn(kind, text)``: kind ``markdown`` (cells, markdown
    outputs), ``html`` (HTML outputs) or ``text`` (figure captions)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = fn("markdown", cell.source)
        for out in cell.get("outputs", []) or []:
            data = out.get("data") or {}
            for mime, kind in (("text/markdown", "markdown"), ("text/html", "html")):
                if mime in data:
                    data[mime] = fn(kind, data[mime])
            emb = (out.get("metadata") or {}).get("embeval")
            if isinstance(emb, dict) and emb.get("caption"):
                emb["caption"] = fn("text", emb["caption"])


_CITE = {"markdown": cite_markdown, "html": cite_html, "text": cite_text}


def _cite_notebook(nb) -> None:
    """Name the cited source documents in every text of ``nb`` (:mod:`.references`)."""
    _map_texts(nb, lambda kind, text: _CITE[kind](str(text)))


def _notebook_text(nb) -> str:
    """Every text of ``nb`` a reader sees, joined."""
    parts = []
    _map_texts(nb, lambda kind, text: parts.append(str(text)) or text)
    return "\n".join(parts)


def read_findings(out_dir: Path) -> dict | None:
    """``{"status", "findings"}`` of a report folder: ``results/findings.json``, else the same fields of
    ``metrics.json``; None for a report made before findings (or whose file is unreadable)."""
    doc = _read_json(Path(out_dir) / "results" / "findings.json")
    if not doc:
        doc = _read_json(Path(out_dir) / "metrics.json")
    status, findings = doc.get("status"), doc.get("findings")
    if status not in STATUSES or not isinstance(findings, list):
        return None
    return {"status": status, "findings": [f for f in findings if isinstance(f, dict)]}


def _severities(chapters: list[ChapterDoc], findings: dict | None) -> None:
    """Each chapter's worst severity: its worst finding's, healthy when it ran without one, failed / skipped
    when it did not run; the Summary carries the report's status. Nothing without findings."""
    if findings is None:
        return
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    decision = decision_chapter()
    for ch in chapters:
        if ch.name == decision:
            ch.severity = findings["status"]
        elif ch.status != "ok":
            ch.severity = ch.status
        else:
            mine = [f.get("severity") for f in findings["findings"] if f.get("chapter") == ch.name]
            ch.severity = max((s for s in mine if s in rank), key=rank.get, default="healthy")


def load_chapters(out_dir: Path) -> list[ChapterDoc]:
    """The chapters of a report folder, in filename order (the decision first), each split into its body and its
    appendix (lettered in report order), with citations named and its worst severity."""
    chapters_dir = Path(out_dir) / "chapters"
    paths = sorted(p for p in chapters_dir.glob("*.ipynb") if not p.name.startswith("."))
    decision = decision_chapter()
    paths.sort(key=lambda p: (re.sub(r"^\d+[_-]", "", p.stem) != decision,))  # stable: the decision first
    statuses = {}
    try:
        statuses = json.loads((Path(out_dir) / "metrics.json").read_text()).get("chapters") or {}
    except Exception:
        pass
    chapters = [_load_chapter(p, statuses if isinstance(statuses, dict) else {}) for p in paths]
    adjusted = read_adjusted(Path(out_dir) / "results")
    letters = _letters()
    for ch in chapters:
        if ch.nb is None:
            continue
        with_adjusted_tests(ch.nb, adjusted)
        ch.source_text = _notebook_text(ch.nb)
        _cite_notebook(ch.nb)
        ch.appendix = _split_appendix(ch.nb)
        if ch.appendix is not None:
            import nbformat

            ch.letter = next(letters)
            ch.nb.cells.insert(1 if ch.nb.cells and ch.nb.cells[0].cell_type == "markdown" else 0,
                               nbformat.v4.new_markdown_cell(appendix_pointer(ch)))
    _severities(chapters, read_findings(out_dir))
    return chapters


def references(chapters: list[ChapterDoc]) -> str:
    """The References appendix (markdown) of ``chapters``: the documents and papers their text cites."""
    return references_markdown("\n".join(ch.source_text for ch in chapters))


def _letters():
    """A, B, ..., Z, AA, AB, ...: appendix letters."""
    import itertools
    import string

    for n in itertools.count(1):
        for t in itertools.product(string.ascii_uppercase, repeat=n):
            yield "".join(t)


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


def _run_conditions(run: dict) -> dict:
    """Where and how the numbers were computed, for the header: the engine (with a Dask cluster's scheduler
    and workers), the sample size of sampled mode and the memory budget."""
    from ...context import describe_bytes as describe

    out = {}
    engine = run.get("engine")
    if isinstance(engine, dict):
        out["engine"] = (f"Dask cluster ({engine.get('scheduler')}, {engine.get('workers')} workers)"
                         if engine.get("name") == "dask" else "local (one process per chapter)")
    if run.get("sample_size"):
        out["sample_size"] = f"{run['sample_size']:,} (sampled mode)"
    if run.get("memory_budget"):
        out["memory_budget"] = describe(run["memory_budget"])
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
    if isinstance(run.get("model"), dict):  # the run embedded texts with a model
        model = run["model"]
        meta["model"] = f"{model['name']} (digest {model['digest']}), {model['n']:,} texts embedded in this run"
    meta.update(_run_conditions(run))
    if "source" in meta:  # the file, not the path on the machine that built the report
        meta["source"] = Path(str(meta["source"])).name or str(meta["source"])
    if "generated" in meta:
        meta["generated"] = _format_generated(meta["generated"])
    if "version" in meta:
        meta["version"] = str(meta["version"])
    final_title = title or meta.get("title") or DEFAULT_TITLE
    items = [(label, str(meta[key])) for key, label in HEADER_FIELDS if key in meta]
    items = [(lab, f"embeval-report {val}" if lab == "Version" else val) for lab, val in items]
    since = baseline_item(out_dir, run)
    if since:
        items.append(since)
    findings = read_findings(out_dir)
    if findings is not None:
        meta["status"] = findings["status"]
        meta["top_findings"] = [_cover_finding(f, out_dir) for f in findings["findings"]
                                if f.get("severity") in ("problematic", "concerning")][:TOP_FINDINGS]
    return str(final_title), items, meta


#: findings the cover shows
TOP_FINDINGS = 3


def baseline_item(out_dir: Path, run: dict) -> tuple[str, str] | None:
    """The header's line for a ``--baseline`` run: ``("Since v13", "Retrieval: 2 better, 9 worse of 15 · …")``."""
    from ...chapters.recorder import read_baseline
    from ...chapters.summary import baseline_counts_text

    try:
        base = read_baseline(Path(out_dir) / "results")
    except (OSError, ValueError):
        return None
    if not base or not base.get("comparisons"):
        return None
    titles = {c.get("name"): c.get("title") for c in run.get("chapters", []) if isinstance(c, dict)}
    return f"Since {base.get('name')}", baseline_counts_text(base, titles, sep=" · ")


def _cover_finding(f: dict, out_dir: Path) -> dict:
    """A finding as the cover shows it: severity, title, its number and the section it links to."""
    return {"severity": f.get("severity"), "title": str(f.get("title") or ""),
            "number": finding_number(f, out_dir), "section": str(f.get("section") or f"chapter-{f.get('chapter')}")}


def finding_number(f: dict, out_dir: Path | None = None) -> str:
    """The number a finding rests on, named: ``Mean pairwise cosine (APCS) 0.5843 [0.5705, 0.5946]``, with the
    baseline's value when it is compared with one (``… vs a most-popular list 0.4649``), or, for a regression since
    ``--baseline``, this model's value with its own interval and the change with its interval, each labelled
    (``Precision@1 0.35 [0.33, 0.37] (this model); change since v13 −0.06 [−0.106, −0.014]``); empty when the
    evidence does not say what its value is."""
    from ...present.format import scorecard_value

    ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
    v = ev.get("value")
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return ""
    label = ev.get("label")
    if not label and f.get("metrics") and out_dir is not None:  # the recorded metric of that value
        m = (_read_json(Path(out_dir) / "results" / f"{f.get('chapter')}.json").get("metrics") or {}).get(
            f["metrics"][0]) or {}
        if isinstance(m.get("value"), (int, float)) and math.isclose(m["value"], v, rel_tol=1e-9, abs_tol=1e-12):
            label = m.get("label") or f["metrics"][0]
    change = ev.get("difference_ci")
    if "previous" in ev and isinstance(change, list) and len(change) == 2:  # a regression since --baseline
        def signed(x):
            ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            return format(x, "+.3g").replace("-", "−") if ok else "—"
        return (f"{label + ' ' if label else ''}{scorecard_value(ev)} (this model); change since "
                f"{ev.get('baseline') or 'the baseline'} {signed(ev.get('difference'))} "
                f"[{signed(change[0])}, {signed(change[1])}]")
    bv = ev.get("baseline_value")
    versus = (f" vs {ev.get('baseline') or 'the baseline'} {scorecard_value({'value': bv})}"
              if isinstance(bv, (int, float)) and not isinstance(bv, bool) and math.isfinite(bv) else "")
    if not label and not versus:
        return ""
    return f"{label + ' ' if label else ''}{scorecard_value(ev)}{versus}"


def _atomic_write(target: Path, data: bytes) -> None:
    """A rendered file, whole or not at all, never through a link at its name (``render DIR`` writes into a
    report folder in place)."""
    replace_file(target, data, "render:")


def _md_codeblock(text) -> str:
    from ...present.escape import visible

    text = visible(text).rstrip("\n")  # a bidi control would reorder even code
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _status_box_md(ch: ChapterDoc) -> str:
    if ch.status == "failed":
        return ("::: {.callout .callout-danger}\n**This chapter failed**\n\n"
                "The rest of the report is unaffected. The error:\n\n"
                f"{_md_codeblock(ch.error or 'unknown error')}\n:::\n")
    from ...present.display import escape
    reason = f"\n\n{escape(ch.error)}" if ch.error else ""
    return f"::: {{.callout .callout-note}}\n**This chapter was not run**{reason}\n:::\n"
