"""The built-in demo: a streaming platform's user and item embeddings with planted problems.

:mod:`.world` generates the set (and the editorial judgements and analogies of the semantic
chapter); :mod:`.stability`, :mod:`.drift` and :mod:`.graph` write the side data of those chapters;
:func:`write_demo` writes everything with its manifest. :mod:`.text` is the text demo (``demo --text``): the Lee
news corpus, embedded by a model during the run.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

import importlib

from ..chapters.registry import demo_writers
from .beside import Beside
from .text import write_text_demo
from .world import (
    GENRES,
    RELATED_GENRES,
    StreamingWorld,
    editorial_judgements,
    genre_analogies,
    streaming_embeddings,
    streaming_world,
    unit_vectors,
)

__all__ = ["GENRES", "RELATED_GENRES", "StreamingWorld", "editorial_judgements", "genre_analogies",
           "streaming_embeddings", "streaming_world", "unit_vectors", "write_demo", "write_text_demo"]


def write_demo(folder, *, seed: int = 0) -> Path:
    """Write the demo set (vectors.npy, ids.txt, metadata.csv, word_pairs.tsv, analogies.txt, the side data of
    every chapter that declares a demo module, manifest.yaml); return the manifest."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    writers = demo_writers()  # runs, snapshots, edges, queries, interactions, ... (``demo=`` of each chapter)
    module = lambda name: importlib.import_module(f"{__name__}.{name}")  # noqa: E731
    # the monitoring history (half of the demo data's CPU time) in a fork on the second core, from its own draws
    beside = {name: Beside(name, module(name).demo_side_data, folder, seed) for name in BESIDE if name in writers}
    try:
        return _write_demo(folder, seed, writers, module, beside)
    finally:
        for b in beside.values():
            b.stop()


#: the demo writers that run in a forked process beside the others (:mod:`.beside`)
BESIDE = ("monitoring",)


def _write_demo(folder: Path, seed: int, writers: list[str], module, beside: dict) -> Path:
    vectors, meta = streaming_embeddings(seed=seed)
    np.save(folder / "vectors.npy", vectors)
    (folder / "ids.txt").write_text("\n".join(meta["id"]) + "\n")
    meta.to_csv(folder / "metadata.csv", index=False)
    pairs = editorial_judgements(meta, seed=seed)
    (folder / "word_pairs.tsv").write_text(
        "# StreamCo editorial similarity of item pairs (synthetic demo data), 0 = unrelated, 10 = interchangeable\n"
        "# item 1\titem 2\teditors' score\n"
        + "".join(f"{a}\t{b}\t{s:.2f}\n" for a, b, s in pairs.itertuples(index=False)))
    (folder / "analogies.txt").write_text("".join(
        f": {name}\n" + "".join(" ".join(q) + "\n" for q in qs) for name, qs in genre_analogies(vectors, meta, seed=seed)))
    manifest = {
        "name": "StreamCo users and items (demo)",
        "vectors": "vectors.npy",
        "ids": "ids.txt",
        "metadata": "metadata.csv",
        "word_pairs": "word_pairs.tsv",
        "analogies": "analogies.txt",
    }
    entries = {name: module(name).demo_side_data(folder, seed=seed) for name in writers if name not in beside}
    for name in writers:  # the manifest in chapter order
        manifest.update(beside[name].result() if name in beside else entries[name])
    path = folder / "manifest.yaml"
    path.write_text("# embeval-report demo: a streaming platform's user and item embeddings\n"
                    + yaml.safe_dump(manifest, sort_keys=False))
    return path
