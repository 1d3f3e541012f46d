"""The chapter registry: one notebook per chapter in ``notebooks/``, described by its metadata.

Each chapter notebook carries ``metadata["embeval"]``::

    {"name": "isotropy", "title": "Isotropy", "order": 10,
     "requires": ["vectors"], "description": "..."}

``"stage": 1`` (or higher) marks a chapter that reads the other chapters' results: it runs after
all of them, in stage order (statistical rigor 1, the summary 2).

``requires`` lists inputs (``"a|b"`` when either will do) as :meth:`embeval_report.io.EmbeddingSet.has`
understands them (``"metadata.label"``, ``"runs"``, ...). The chapter's code is the module
``embeval_report.chapters.<name>`` (``"module"`` in the metadata when it differs); its optional
``precheck(es, side, settings)`` returns the reason a chapter cannot run on valid but degenerate
input, so the runner skips it with that reason instead of starting a kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..resources import notebooks_dir

#: human wording of each input a chapter may need, used for "not run" explanations
INPUT_HELP = {
    "vectors": "the embedding vectors",
    "ids": "an `ids` file or column",
    "metadata": "a `metadata` table keyed by id",
    "runs": "a `runs` list of other training runs",
    "snapshots": "a `snapshots` list of later versions",
    "tranches": "`tranches` (checkpoints along training)",
    "edges": "an `edges` list (src, dst)",
    "positive_pairs": "`positive_pairs` (CSV of id pairs)",
    "word_pairs": "`word_pairs` (word1, word2, human score)",
    "analogies": "`analogies` (a:b::c:d)",
    "test_edges": "`test_edges` (held-out src, dst)",
    "negatives": "`negatives` (src, dst, negative)",
    "vocabularies": "`vocabularies` (named id lists)",
    "qrels": "`qrels` (relevance judgements of queries; `queries` for query vectors)",
    "training_log": "a `training_log` (CSV/TSV/JSONL of step, loss, ... or a TensorBoard folder)",
    "monitor_history": "`monitor_history` (the JSONL file `embeval-report monitor --history` writes)",
    "metadata.is_anomaly": "an `is_anomaly` 0/1 column in `metadata` (1 = anomaly; blank = unlabelled)",
    "anomaly_scores": "`anomaly_scores` (your detector's scores: id, score)",
    "fairness": "`fairness: {attributes: [...]}` (protected-attribute columns of `metadata`)",
    "association_tests": "`association_tests` (WEAT target and attribute word sets)",
    "annotations": "`annotations` (human ratings: item, rater, label)",
    "interactions": "`interactions` (user_id, item_id[, timestamp][, rating])",
}


@dataclass(frozen=True)
class Chapter:
    name: str
    title: str
    order: int
    requires: tuple[str, ...]
    description: str
    notebook: Path
    module: str = ""
    stage: int = 0       # 0: content; 1, 2, ...: run after every content chapter, in stage order (they read results)

    @property
    def filename(self) -> str:
        """Executed notebook name inside ``OUT/chapters/``."""
        return f"{self.order:02d}_{self.name}.ipynb"

    def missing(self, es) -> list[str]:
        """Inputs this chapter needs that the embedding set lacks (``a|b``: either will do)."""
        return [r for r in self.requires if not any(es.has(alt) for alt in r.split("|"))]

    def precheck(self, es, side, settings) -> str | None:
        """Why the chapter cannot run on this (valid but degenerate) input, or ``None``."""
        import importlib

        try:
            mod = importlib.import_module(f"embeval_report.chapters.{self.module or self.name}")
        except ModuleNotFoundError:
            return None
        check = getattr(mod, "precheck", None)
        return check(es, side, settings) if check else None


def describe_input(req: str) -> str:
    """Human wording of a requirement such as ``metadata.label`` or ``word_pairs|analogies``."""
    if "|" in req:
        return " or ".join(describe_input(alt) for alt in req.split("|"))
    if req.startswith("metadata."):
        return f"a `{req.split('.', 1)[1]}` column in `metadata`"
    return INPUT_HELP.get(req, f"manifest field `{req}`")


def discover(folder: Path | None = None) -> list[Chapter]:
    """All chapters, in report order (the summary, order 0, first)."""
    import nbformat  # here, not at import: its JSON-schema validator costs every chapter kernel 1.4 s

    out = []
    for path in sorted(Path(folder or notebooks_dir()).glob("*.ipynb")):
        meta = nbformat.read(path, as_version=4).metadata.get("embeval")
        if not meta:
            continue
        out.append(Chapter(name=meta["name"], title=meta["title"], order=int(meta["order"]),
                           requires=tuple(meta.get("requires", ())), description=meta.get("description", ""),
                           notebook=path, module=meta.get("module", ""), stage=int(meta.get("stage", 0))))
    return sorted(out, key=lambda c: c.order)


def select(chapters: list[Chapter], names: list[str] | None) -> list[Chapter]:
    """The chapters named in ``names`` (all when ``None``); the chapters that read the others' results
    (``stage`` > 0: statistical rigor, the summary) are always kept."""
    if not names:
        return chapters
    known = {c.name for c in chapters}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"--chapters: unknown chapter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [c for c in chapters if c.name in names or c.stage > 0]
