"""A second, offline model of the text demo's corpus: TF-IDF + truncated SVD (latent semantic analysis) vectors of the
same texts, written as an embedding set with the same ids and side data, to compare with the demo's MiniLM:

    .venv/bin/embeval-report demo --text --out minilm/
    .venv/bin/python benchmarks/lsa_model.py minilm/demo-data lsa/      # writes lsa/manifest.yaml
    .venv/bin/embeval-report compare minilm/ lsa/manifest.yaml --names minilm,lsa --out cmp/

The corpus's and the queries' texts are read from the demo's ``corpus.jsonl`` and ``queries.jsonl``; the TF-IDF
vocabulary and the SVD are fitted on the corpus only (the queries are projected, as a deployed index would), with a
fixed seed. ``qrels.txt`` and ``metadata.csv`` are copied, so both models are scored on the same judgements.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer


def lsa_set(data: Path, out: Path, *, dims: int = 100, seed: int = 0) -> Path:
    """Write ``out/manifest.yaml`` with LSA vectors of ``data``'s corpus and queries; return the manifest."""
    corpus = pd.read_json(data / "corpus.jsonl", lines=True, dtype={"id": str})
    queries = pd.read_json(data / "queries.jsonl", lines=True, dtype={"id": str})
    tfidf = TfidfVectorizer(sublinear_tf=True, stop_words="english", min_df=2)
    svd = TruncatedSVD(n_components=dims, random_state=seed)
    X = svd.fit_transform(tfidf.fit_transform(corpus["text"]))
    Q = svd.transform(tfidf.transform(queries["text"]))
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "corpus.npy", X.astype(np.float32))
    np.save(out / "queries.npy", Q.astype(np.float32))
    (out / "corpus_ids.txt").write_text("".join(f"{i}\n" for i in corpus["id"]))
    (out / "query_ids.txt").write_text("".join(f"{i}\n" for i in queries["id"]))
    for name in ("qrels.txt", "metadata.csv"):
        if (data / name).exists():
            shutil.copy(data / name, out / name)
    lines = [f"name: TF-IDF + LSA ({dims} d) on the Lee news corpus", "vectors: corpus.npy", "ids: corpus_ids.txt",
             "queries: {vectors: queries.npy, ids: query_ids.txt}", "qrels: qrels.txt", "exclude_self: true"]
    if (out / "metadata.csv").exists():
        lines.insert(3, "metadata: metadata.csv")
    (out / "manifest.yaml").write_text("\n".join(lines) + "\n")
    return out / "manifest.yaml"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", type=Path, help="the text demo's data folder (a demo report's demo-data/)")
    p.add_argument("out", type=Path, help="the folder to write the LSA set into")
    p.add_argument("--dims", type=int, default=100, help="SVD components (default 100)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(lsa_set(args.data, args.out, dims=args.dims, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
