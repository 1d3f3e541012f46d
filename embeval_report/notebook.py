"""What a chapter notebook calls first: load the embedding set, set up recording and style."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from .io import EmbeddingSet, load_prepared, load_source
from .kernels import resolve_device
from .plotting import use_style
from .results import Recorder


@dataclass
class ChapterContext:
    """The embedding set and run settings of one chapter execution."""

    chapter: str
    es: EmbeddingSet
    rec: Recorder
    seed: int
    device: str
    sample_size: int | None


def open_chapter(chapter: str, source: str, prepared: str | None = None, results_dir: str | None = "../results",
                 seed: int = 0, device: str = "auto", sample_size: int | None = None) -> ChapterContext:
    """Load the set (from the runner's prepared cache when it still exists, else ``source``).

    In JupyterLab, re-running a report's notebook reads the original ``source`` again and
    writes its records next to the report (``../results``).
    """
    warnings.filterwarnings("ignore", category=FutureWarning)
    es = load_prepared(prepared) if prepared and Path(prepared).exists() else load_source(source)
    use_style()
    dev = str(resolve_device(device))
    rec = Recorder(chapter, results_dir)
    rec.note(n=es.n, d=es.d, seed=seed, device=dev, sample_size=sample_size)
    return ChapterContext(chapter, es, rec, seed, dev, sample_size)
