"""Small sets and report folders for the task-scorer tests: a manifest from arrays and files, chapters computed in
this process (the notebook's own calls, without papermill) into a report folder, a scorer's units of a set, and
``compare`` of two such folders."""
from __future__ import annotations

import importlib
import json
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd


def write_set(folder: Path, X, ids, metadata: pd.DataFrame | None = None, files: dict | None = None,
              entries: dict | None = None) -> Path:
    """``folder/m.yaml`` for the vectors ``X`` with ``ids``, the ``metadata`` table (its ``id`` column first),
    side files (name -> text) and manifest ``entries`` (field -> value, written as given)."""
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "v.npy", np.asarray(X, np.float32))
    (folder / "ids.txt").write_text("\n".join(ids) + "\n")
    lines = ["vectors: v.npy", "ids: ids.txt"]
    if metadata is not None:
        metadata.to_csv(folder / "meta.csv", index=False)
        lines.append("metadata: meta.csv")
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    lines += [f"{k}: {v}" for k, v in (entries or {}).items()]
    (folder / "m.yaml").write_text("\n".join(lines) + "\n")
    return folder / "m.yaml"


def chapter_module(name: str):
    from embeval_report.chapters.registry import chapter

    return importlib.import_module(chapter(name).module)


def open_set(manifest: Path, chapter: str, results: Path | None = None, **settings):
    """The chapter's context on ``manifest`` (as its notebook opens it), recording into ``results``."""
    from embeval_report.chapters.setup import open_chapter

    return open_chapter(chapter, source=str(manifest), results_dir=None if results is None else str(results),
                        settings={"device": "cpu", **settings})


def run_report(manifest: Path, out: Path, chapters, name: str) -> Path:
    """A report folder ``out`` (results only) of ``chapters`` computed on ``manifest``."""
    for c in chapters:
        ctx = open_set(manifest, c, out / "results")
        ctx.run(chapter_module(c).compute)
    (out / "run.json").write_text(json.dumps({"name": name}))
    return out


def recorded(out: Path, chapter: str) -> dict:
    return json.loads((out / "results" / f"{chapter}.json").read_text())


def scorer_units(manifest: Path, chapter: str, vectors=None):
    """``(units, plan, scorer)``: the chapter's scorer run on the set of ``manifest`` (its own vectors, or
    ``vectors`` in their place)."""
    ctx = open_set(manifest, chapter)
    scorer = chapter_module(chapter).SCORER

    def score(c):
        inputs = scorer.inputs(c.es, c.side, c.settings)
        plan = scorer.plan(inputs, c.settings)
        return scorer.units(c.es.vectors if vectors is None else vectors, inputs, plan), plan

    units, plan = ctx.run(score)
    return units, plan, scorer


def compare(a: Path, b: Path, monkeypatch, resamples: int = 300) -> pd.DataFrame:
    """The comparison table of two report folders (whole-table metrics with fewer bootstrap resamples)."""
    from embeval_report.metrics import paired
    from embeval_report.report.pairing import ModelReport, compare_reports

    monkeypatch.setattr(paired, "paired_aggregate", partial(paired.paired_aggregate, n_resamples=resamples))
    table, _ = compare_reports([ModelReport.open(a), ModelReport.open(b)])
    return table


def assert_found_only_in(table: pd.DataFrame, chapter: str, metrics) -> None:
    """``compare`` finds B better on ``metrics`` of ``chapter`` and no difference anywhere else."""
    rows = table.set_index(["chapter", "metric"])
    for m in metrics:
        assert rows.loc[(chapter, m), "verdict"] == "B better", rows.loc[(chapter, m)].to_dict()
    others = table[table["chapter"] != chapter]
    assert len(others), "a second chapter to stay silent"
    assert not others["verdict"].isin(["B better", "A better"]).any(), others[["chapter", "metric", "verdict"]]
    assert (others["diff"].abs() < 1e-12).all(), others[["chapter", "metric", "diff"]]


def cosines(X, a, b) -> np.ndarray:
    X = np.asarray(X, float)
    return (X[a] * X[b]).sum(1) / (np.linalg.norm(X[a], axis=1) * np.linalg.norm(X[b], axis=1))


def annotations_text(X, ids, rows, n_pairs: int = 40, seed: int = 0) -> str:
    """Three raters grading ``n_pairs`` pairs of ``rows`` 0-4 by their cosine (with some noise): an annotations
    file of pairs (``item1``, ``item2``) with numeric grades."""
    rng = np.random.default_rng(seed)
    rows = np.asarray(rows)
    a, b = rows[rng.integers(0, len(rows), n_pairs)], rows[rng.integers(0, len(rows), n_pairs)]
    keep = a != b
    a, b = a[keep], b[keep]
    cos = cosines(X, a, b)
    lines = ["item1,item2,rater,label"]
    for r in range(3):
        grade = np.clip(np.round(2 + 4 * cos + rng.normal(0, 0.4, len(a))), 0, 4).astype(int)
        lines += [f"{ids[i]},{ids[j]},rater_{r},{g}" for i, j, g in zip(a, b, grade)]
    return "\n".join(lines) + "\n"


def word_pairs_text(T, ids, rows, n_pairs: int = 60, seed: int = 0) -> str:
    """Pairs of ``rows`` scored 0-10 by their cosine in the true vectors ``T`` (a word-pairs file)."""
    rng = np.random.default_rng(seed)
    rows = np.asarray(rows)
    a, b = rows[rng.integers(0, len(rows), n_pairs)], rows[rng.integers(0, len(rows), n_pairs)]
    keep = a != b
    a, b = a[keep], b[keep]
    score = 5 + 5 * cosines(T, a, b)
    return "".join(f"{ids[i]}\t{ids[j]}\t{s:.3f}\n" for i, j, s in zip(a, b, score))
