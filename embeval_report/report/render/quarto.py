"""The Quarto renderer: a book from ``_quarto.yml`` over the executed notebooks."""

import copy
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .common import _quarto_template, _slug, _status_box_md, load_chapters

log = logging.getLogger(__name__)

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

    from ..display import escape

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
