"""The one setup call every chapter notebook makes: :func:`open_chapter`.

Every notebook has the same parameters cell (papermill injects the run's values below it)::

    source = ""            # manifest or vectors file (read when the notebook is re-run by hand)
    prepared = None        # the runner's validated cache of the input
    results_dir = "../results"
    settings = {}          # ChapterSettings: seed, device, sample_size, level, options

and then::

    ctx = open_chapter("<name>", source, prepared, results_dir, settings)
    report = ctx.run(chapter.compute)

:func:`open_chapter` returns the loaded set, its side data, the resolved settings, the recorder and the
chapter's compute context; :meth:`ChapterContext.run` computes inside that context (the run's graph and
moments caches, precision, memory budget, Dask engine), which is left again when the computation ends.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..context import CacheFolder, ComputeContext
from ..errors import ChapterSkipped, UndefinedMetricWarning
from ..io import EmbeddingSet, load_prepared, load_source
from ..io.side_data import SideData, load_side_data
from ..settings import ChapterSettings
from .declaration import ChapterSpec, graph_neighbours
from .recorder import Recorder
from .registry import chapter as declared_chapter
from .registry import resolve_settings

#: the parameters cell of every chapter notebook, letter for letter (a test checks it)
PARAMETERS_CELL = """\
# Parameters: papermill injects the run's values below this cell (see embeval_report.chapters.setup)
source = ""          # manifest or vectors file, read when the notebook is re-run by hand
prepared = None      # the runner's validated cache of the input
results_dir = "../results"
settings = {}        # seed, device, sample_size, level and options, e.g. {"seed": 1, "options": {"k": 20}}"""


@dataclass
class ChapterContext:
    """The embedding set, side data, settings, recorder and compute context of one chapter execution."""

    chapter: str
    es: EmbeddingSet
    side: SideData
    settings: ChapterSettings
    rec: Recorder
    compute: ComputeContext = field(default_factory=ComputeContext)
    spec: ChapterSpec | None = None

    #: settings read directly from the context: ``ctx.seed``, ``ctx.device``, ``ctx.sample_size``, ``ctx.level``
    SHORTCUTS = ("seed", "device", "sample_size", "level")

    def __getattr__(self, name: str):
        if name in ChapterContext.SHORTCUTS:
            return getattr(self.settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def option(self, name: str):
        """A chapter option's value (declared in the chapter's :data:`CHAPTER`; the default unless set)."""
        return self.settings.option(name)

    def run(self, compute):
        """``compute(self)`` inside this chapter's compute context (see the module docstring)."""
        return self.compute.run(compute, self)


def open_chapter(chapter: str, source: str = "", prepared: str | None = None, results_dir: str | None = "../results",
                 settings: dict | ChapterSettings | None = None) -> ChapterContext:
    """Load the set (the runner's prepared cache when it exists, else ``source``), resolve the settings,
    apply the report's figure style, and start recording.

    In JupyterLab, re-running a report's notebook reads the original ``source`` again (validating
    it and its side data and checking the chapter can run on it) and writes its records next to the report
    (``../results``).
    """
    warnings.filterwarnings("ignore", category=FutureWarning)
    spec = declared_chapter(chapter)
    s = settings if isinstance(settings, ChapterSettings) else resolve_settings(settings or {})
    runner_cache = Path(prepared) if prepared and Path(prepared).exists() else None
    if runner_cache is not None:  # the runner validated the input and ran the chapter's check
        es, side = load_prepared(prepared), SideData.open(runner_cache / "side")
    else:
        es = load_source(source)
        side = load_side_data(es)
        reason = spec.check(es, side, s)
        if reason:
            raise ChapterSkipped(reason)
    from ..present.plotting import use_style

    use_style()
    rec = Recorder(chapter, results_dir)
    # one k-NN graph per vector space per run: stored next to the prepared set, read by every chapter;
    # k + 1 neighbours, so the tie check next to a k-NN list shares the same computation
    compute = s.compute(
        chapter=chapter,
        graph_cache=CacheFolder(runner_cache and runner_cache / "neighbours", min_k=graph_neighbours(s),
                                log=lambda event: rec.append("neighbour_graphs", event)),
        # the column mean, second moments and principal directions of the set: one pass per run
        moments_cache=CacheFolder(runner_cache and runner_cache / "moments",
                                  log=lambda event: rec.append("moment_passes", event)))
    rec.note(n=es.n, d=es.d, seed=s.seed, device=s.device, sample_size=s.sample_size, precision=s.precision,
             **({"options": s.set_options} if s.set_options else {}))
    _show_undefined_warnings(rec)
    return ChapterContext(chapter, es, side, s, rec, compute, spec)


def _show_undefined_warnings(rec: Recorder) -> None:
    """Show each :class:`UndefinedMetricWarning` once as a note in the chapter, and record it."""
    previous = warnings.showwarning
    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, UndefinedMetricWarning):
            return previous(message, category, filename, lineno, file, line)
        text = str(message)
        if text in seen:
            return None
        seen.add(text)
        rec.append("warnings", text)
        from ..present.display import callout, escape

        callout("note", escape(text), title="Undefined for this input")
        return None

    warnings.showwarning = show
    warnings.simplefilter("always", UndefinedMetricWarning)
