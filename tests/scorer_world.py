"""Small worlds for the task scorers of the ranking chapters (retrieval, recommendation, link prediction, temporal
link prediction): one manifest per chapter and model, each chapter computed as a report computes it (the chapter's
``compute`` in its context, without the notebook), and the comparison of two such reports.

``world(folder, chapter, planted)`` writes the chapter's manifest; ``planted=True`` gives model B's vectors, which
fit the task better (less noise) — the only difference between the two models.
"""
from __future__ import annotations

import importlib
import json
import shutil
import tempfile
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

CHAPTERS = ("retrieval", "recommendation", "link_prediction", "temporal_link_prediction")
SETTINGS = {"device": "cpu", "seed": 0}
#: vector noise of model A in each world; model B's (planted: B fits the task better) is 0.3
NOISE = {"retrieval": 1.4, "recommendation": 1.4, "link_prediction": 2.5, "temporal_link_prediction": 2.5}


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def _write_set(folder: Path, X: np.ndarray, ids: list[str], fields: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "vectors.npy", X.astype(np.float32))
    (folder / "ids.txt").write_text("".join(f"{i}\n" for i in ids))
    (folder / "m.yaml").write_text("vectors: vectors.npy\nids: ids.txt\n" + fields)
    return folder / "m.yaml"


def world(folder, chapter: str, planted: bool = False) -> Path:
    """The manifest of ``chapter``'s world for model A (``planted=False``) or model B; the side data is the same."""
    folder = Path(folder)
    rng = np.random.default_rng(7)
    noise = 0.3 if planted else NOISE[chapter]
    if chapter == "retrieval":  # queries: noisy copies of a target document (grade 2) and its neighbour (grade 1)
        n, m, d = 150, 60, 16
        C = rng.standard_normal((n, d))
        target = rng.choice(n, m, replace=False)
        base = rng.standard_normal((m, d))
        Q = C[target] + noise * base
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "queries.npy", Q.astype(np.float32))
        (folder / "query_ids.txt").write_text("".join(f"q{i:03d}\n" for i in range(m)))
        (folder / "qrels.txt").write_text("".join(f"q{i:03d} 0 d{t:03d} 2\nq{i:03d} 0 d{(t + 1) % n:03d} 1\n"
                                                  for i, t in enumerate(target)))
        return _write_set(folder, C, _ids("d", n), "queries: {vectors: queries.npy, ids: query_ids.txt}\n"
                                                    "qrels: qrels.txt\n")
    if chapter == "recommendation":  # users interact with the items their latent factors score highest
        nu, ni, d = 60, 90, 8
        U, V = rng.standard_normal((nu, d)), rng.standard_normal((ni, d))
        S = U @ V.T + 0.5 * rng.standard_normal((nu, ni))
        top = np.argsort(-S, axis=1)[:, :8]
        users, items = _ids("u", nu), _ids("i", ni)
        rows = [(users[u], items[i], f"2024-01-{1 + r:02d}") for u in range(nu) for r, i in enumerate(top[u])]
        folder.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"]).to_csv(folder / "interactions.csv",
                                                                              index=False)
        X = np.vstack([U, V]) + noise * rng.standard_normal((nu + ni, d))
        return _write_set(folder, X, users + items, "interactions: interactions.csv\n")
    if chapter in ("link_prediction", "temporal_link_prediction"):  # a block model: vectors = block centre + noise
        n, blocks, d, n_edges = 120, 20, 12, 500
        block = rng.integers(0, blocks, n)
        centre = 2.0 * rng.standard_normal((blocks, d))
        src = rng.integers(0, n, n_edges)
        dst = np.array([rng.choice(np.flatnonzero(block == block[s])) for s in src])
        keep = src != dst
        edges = pd.DataFrame({"src": np.array(_ids("e", n), dtype=object)[src[keep]],
                              "dst": np.array(_ids("e", n), dtype=object)[dst[keep]]}).drop_duplicates()
        if chapter == "temporal_link_prediction":
            edges["timestamp"] = np.sort(rng.integers(0, 10_000, len(edges)))
        folder.mkdir(parents=True, exist_ok=True)
        edges.to_csv(folder / "edges.csv", index=False)
        X = centre[block] + noise * rng.standard_normal((n, d))
        return _write_set(folder, X, _ids("e", n), "edges: edges.csv\n")
    raise ValueError(chapter)


def chapter_report(folder, manifests: dict, name: str) -> Path:
    """A report folder with each chapter of ``manifests`` (chapter -> manifest) computed as a run computes it."""
    from embeval_report.chapters.setup import open_chapter

    folder = Path(folder)
    (folder / "results").mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"name": name}))
    for chapter, manifest in manifests.items():
        module = importlib.import_module(f"embeval_report.chapters.{chapter}")
        ctx = open_chapter(chapter, str(manifest), None, str(folder / "results"), dict(SETTINGS))
        ctx.run(module.compute)
    return folder


@lru_cache(maxsize=None)
def model_a() -> Path:
    """Model A's report over the four chapters (made once per test session; its manifests: :func:`manifest_a`)."""
    root = Path(tempfile.mkdtemp(prefix="scorer-world-"))
    return chapter_report(root / "A", {c: world(root / "data-a" / c, c) for c in CHAPTERS}, "A")


def manifest_a(chapter: str) -> Path:
    """Model A's manifest of ``chapter``."""
    return model_a().parent / "data-a" / chapter / "m.yaml"


def planted_comparison(tmp_path, chapter: str) -> pd.DataFrame:
    """Model A against model B, which differs from A in ``chapter``'s vectors only: the comparison table of the
    four chapters. B's ``chapter`` is computed afresh; its other chapters have A's inputs, so they are A's records
    (the same inputs give the same records: :func:`assert_aggregates_are_recorded` scores them afresh)."""
    from embeval_report.report.pairing import ModelReport, compare_reports

    b = chapter_report(Path(tmp_path) / "B", {chapter: world(Path(tmp_path) / "data-b", chapter, planted=True)}, "B")
    for other in CHAPTERS:
        if other != chapter:
            shutil.copy(model_a() / "results" / f"{other}.json", b / "results")
            shutil.copy(model_a() / "results" / "units" / f"{other}.csv", b / "results" / "units")
    table, _ = compare_reports([ModelReport.open(model_a()), ModelReport.open(b)])
    return table


def assert_found_only_in(table: pd.DataFrame, chapter: str, headline) -> None:
    """The comparison finds B better on every ``headline`` metric of ``chapter``, A better nowhere, and no difference
    at all in the other chapters (both models scored every chapter on the same plan)."""
    assert set(table["chapter"]) == set(CHAPTERS), set(table["chapter"])
    mine, others = table[table["chapter"] == chapter].set_index("metric"), table[table["chapter"] != chapter]
    for metric in headline:
        assert mine.loc[metric, "verdict"] == "B better", (metric, mine.loc[metric].to_dict())
    assert "A better" not in set(mine["verdict"])
    assert not others["verdict"].isin(["B better", "A better"]).any(), others[["chapter", "metric", "verdict"]]
    assert (others["diff"] == 0).all(), others.loc[others["diff"] != 0, ["chapter", "metric", "diff"]]
    assert table["same_plan"].all()


def scorer_setup(manifest, chapter: str):
    """The chapter's scorer and, for ``manifest``, its loaded set, side data and settings."""
    from embeval_report.chapters.registry import resolve_settings
    from embeval_report.io import load_source
    from embeval_report.io.side_data import load_side_data

    module = importlib.import_module(f"embeval_report.chapters.{chapter}")
    es = load_source(str(manifest))
    return module.SCORER, es, load_side_data(es), resolve_settings(dict(SETTINGS))


def recorded(folder, chapter: str) -> dict:
    """The chapter's recorded metrics (name -> value) in a report folder."""
    doc = json.loads((Path(folder) / "results" / f"{chapter}.json").read_text())
    return {k: v["value"] for k, v in doc["metrics"].items()}


def assert_aggregates_are_recorded(chapter: str) -> None:
    """The scorer's aggregates of its units, scored afresh, equal the numbers the chapter recorded, bit for bit."""
    scorer, es, side, settings = scorer_setup(manifest_a(chapter), chapter)
    inputs = scorer.inputs(es, side, settings)
    units = scorer.units(es.vectors, inputs, scorer.plan(inputs, settings))
    values, numbers = scorer.values(units), recorded(model_a(), chapter)
    for metric, value in values.items():
        if metric in numbers or np.isfinite(value):
            assert numbers[metric] == value, (metric, numbers[metric], value)
    written = pd.read_csv(model_a() / "results" / "units" / f"{chapter}.csv", dtype={scorer.key: str},
                          keep_default_na=False)
    assert list(written[scorer.key]) == list(units[scorer.key])
    # the paired bootstrap's vectorised form of each whole-table aggregate: fn of the resampled table
    rng = np.random.default_rng(3)
    draws = [rng.integers(0, len(units), len(units)) for _ in range(3)]
    W = np.stack([np.bincount(d, minlength=len(units)) for d in draws]).astype(float)
    for a in scorer.aggregates:
        if a.boot is not None:
            np.testing.assert_allclose(a.boot(units, W), [a.fn(units.iloc[d]) for d in draws], rtol=1e-12,
                                       atol=1e-12, err_msg=a.metric)


def assert_plan_ignores_the_vectors(chapter: str) -> None:
    """The plan made from a set and from the same set with other vectors (2X + noise) is the same plan, and the
    units of the two differ (the vectors do matter)."""
    from embeval_report.metrics.scoring import plan_fingerprint

    scorer, es, side, settings = scorer_setup(manifest_a(chapter), chapter)
    other = replace(es, vectors=2 * es.vectors + np.random.default_rng(1).standard_normal(es.vectors.shape))
    inputs, inputs2 = scorer.inputs(es, side, settings), scorer.inputs(other, side, settings)
    if scorer.map_inputs is not None:
        inputs2 = scorer.map_inputs(inputs2, lambda Q: 2 * Q + np.random.default_rng(2).standard_normal(Q.shape))
    plan, plan2 = scorer.plan(inputs, settings), scorer.plan(inputs2, settings)
    assert plan_fingerprint(plan) == plan_fingerprint(plan2)
    a, b = scorer.units(es.vectors, inputs, plan), scorer.units(other.vectors, inputs2, plan2)
    assert list(a[scorer.key]) == list(b[scorer.key])
    assert not a[list(scorer.columns)].equals(b[list(scorer.columns)])
