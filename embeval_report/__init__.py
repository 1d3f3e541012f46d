"""embeval-report: evaluate an embedding set and write a trustworthy report.

The package follows the flow of a run:

* :mod:`.io` — load and validate the input (vectors, ids, metadata, every side-data field);
* :mod:`.kernels` — chunked torch kernels (GPU when present);
* :mod:`.metrics` — the metrics: one spec per metric, pure computation, result records;
* :mod:`.stats` — intervals, resampling and multiple testing;
* :mod:`.chapters` — each chapter's declaration, what it shows and records (and the summary);
* :mod:`.present` — formatting, tables, callouts and figure style the chapters show with;
* :mod:`.report` — runner, report-wide adjustment and findings, renderers, ``compare``;
* :mod:`.demo` — the built-in demo set; :mod:`.cli` — the command line; :mod:`.api` — the same from Python.

The functions a user calls most are importable from here, e.g.::

    from embeval_report import evaluate, compare, load_source, measure_isotropy
"""
from .errors import ChapterSkipped, InputError, UndefinedMetricWarning  # noqa: E402
from .io import EmbeddingSet, load_source, load_vectors  # noqa: E402
from .metrics.isotropy import all_but_the_top, all_but_the_top_effect, measure_isotropy, spectral_metrics  # noqa: E402
from .metrics.spec import Metric, MetricSpec  # noqa: E402
from .chapters.recorder import Recorder  # noqa: E402
from .settings import ChapterSettings  # noqa: E402
from .version import __version__  # noqa: E402
from .api import Comparison, Report, compare, evaluate  # noqa: E402
from .stats import basic_interval, bootstrap_ci  # noqa: E402

__all__ = ["evaluate", "compare", "Report", "Comparison", "InputError", "ChapterSkipped", "UndefinedMetricWarning", "EmbeddingSet", "load_source", "load_vectors",
           "measure_isotropy", "all_but_the_top", "all_but_the_top_effect", "spectral_metrics", "Metric",
           "MetricSpec", "Recorder", "ChapterSettings", "bootstrap_ci", "basic_interval", "__version__"]
