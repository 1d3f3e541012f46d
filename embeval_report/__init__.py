"""embeval-report: evaluate an embedding set and write a trustworthy report.

The functions the chapter notebooks call are importable from here, e.g.::

    from embeval_report import load_source, measure_isotropy, all_but_the_top
"""
__version__ = "0.1.0"

from .errors import InputError  # noqa: E402
from .io import EmbeddingSet, load_source, load_vectors  # noqa: E402
from .isotropy import all_but_the_top, all_but_the_top_effect, measure_isotropy, spectral_metrics  # noqa: E402
from .results import Metric, Recorder  # noqa: E402
from .stats import bootstrap_ci, basic_interval  # noqa: E402

__all__ = ["InputError", "EmbeddingSet", "load_source", "load_vectors", "measure_isotropy", "all_but_the_top",
           "all_but_the_top_effect", "spectral_metrics", "Metric", "Recorder", "bootstrap_ci", "basic_interval",
           "__version__"]
