"""The one setup call every chapter notebook makes: :func:`open_chapter`.

Every notebook has the same parameters cell (papermill injects the run's values below it)::

    source = ""            # manifest or vectors file (read when the notebook is re-run by hand)
    prepared = None        # the runner's validated cache of the input
    results_dir = "../results"
    settings = {}          # ChapterSettings: seed, device, sample_size, level, options

and then ``ctx = open_chapter("<name>", source, prepared, results_dir, settings)``, which returns
the loaded set, its side data, the settings and the recorder.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import UndefinedMetricWarning
from ..io import EmbeddingSet, load_prepared, load_source
from ..io.side_data import SideData, load_side_data
from ..kernels.budget import use_memory_budget
from ..kernels.dask_engine import use_engine
from ..kernels.device import use_precision
from ..kernels.graph_cache import use_graph_cache
from ..kernels.moments_cache import use_moments_cache
from ..progress import set_chapter
from ..report.recorder import Recorder
from ..settings import ChapterSettings

#: the parameters cell of every chapter notebook, letter for letter (a test checks it)
PARAMETERS_CELL = """\
# Parameters: papermill injects the run's values below this cell (see embeval_report.chapters.setup)
source = ""          # manifest or vectors file, read when the notebook is re-run by hand
prepared = None      # the runner's validated cache of the input
results_dir = "../results"
settings = {}        # seed, device, sample_size, level and options, e.g. {"seed": 1, "options": {"k": 20}}"""


@dataclass
class ChapterContext:
    """The embedding set, side data, settings and recorder of one chapter execution."""

    chapter: str
    es: EmbeddingSet
    side: SideData
    settings: ChapterSettings
    rec: Recorder

    #: settings read directly from the context: ``ctx.seed``, ``ctx.device``, ``ctx.sample_size``, ``ctx.level``
    SHORTCUTS = ("seed", "device", "sample_size", "level")

    def __getattr__(self, name: str):
        if name in ChapterContext.SHORTCUTS:
            return getattr(self.settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def option(self, name: str):
        """A chapter option's value (see :data:`embeval_report.settings.OPTIONS`)."""
        return self.settings.option(name)


def open_chapter(chapter: str, source: str = "", prepared: str | None = None, results_dir: str | None = "../results",
                 settings: dict | ChapterSettings | None = None) -> ChapterContext:
    """Load the set (the runner's prepared cache when it exists, else ``source``), resolve the settings,
    apply the report's figure style, and start recording.

    In JupyterLab, re-running a report's notebook reads the original ``source`` again (validating
    it and its side data) and writes its records next to the report (``../results``).
    """
    warnings.filterwarnings("ignore", category=FutureWarning)
    set_chapter(chapter)
    if prepared and Path(prepared).exists():
        es, side = load_prepared(prepared), SideData.open(Path(prepared) / "side")
    else:
        es = load_source(source)
        side = load_side_data(es)
    s = settings if isinstance(settings, ChapterSettings) else ChapterSettings.resolve(settings or {})
    from ..report.plotting import use_style

    use_style()
    rec = Recorder(chapter, results_dir)
    # one k-NN graph per vector space per run: stored next to the prepared set, read by every chapter;
    # k + 1 neighbours, so the tie check next to a k-NN list shares the same computation
    use_graph_cache(Path(prepared) / "neighbours" if prepared and Path(prepared).exists() else None,
                    min_k=int(s.option("k")) + 1, log=lambda event: rec.append("neighbour_graphs", event))
    # the column mean, second moments and principal directions of the set: one pass per run (moments_cache)
    use_moments_cache(Path(prepared) / "moments" if prepared and Path(prepared).exists() else None,
                      log=lambda event: rec.append("moment_passes", event))
    use_precision(s.precision)
    use_memory_budget(s.memory_budget)
    use_engine(s.scheduler)  # the run's Dask cluster, if any: connected at the first pass sent to it
    rec.note(n=es.n, d=es.d, seed=s.seed, device=s.device, sample_size=s.sample_size, precision=s.precision,
             **({"options": s.options} if s.options else {}))
    _show_undefined_warnings(rec)
    return ChapterContext(chapter, es, side, s, rec)


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
        from ..report.display import callout, escape

        callout("note", escape(text), title="Undefined for this input")
        return None

    warnings.showwarning = show
    warnings.simplefilter("always", UndefinedMetricWarning)
