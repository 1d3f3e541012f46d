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
from __future__ import annotations

import importlib
import os

#: OpenMP's threads (torch's, scikit-learn's) and OpenBLAS' (NumPy's, SciPy's) sleep once their work ends instead of
#: spinning for the next: a spinning thread holds a core that another process (a chapter kernel, a test worker, the
#: user's own jobs) or this process's other thread needs. On a loaded two-core machine the isotropy metrics of
#: 10,000 x 384 took 8.9-10.7 CPU-s with OpenMP spinning and 3.7-5.5 passive; ten eigh of 384 x 384 on two OpenBLAS
#: threads 3.1-4.6 CPU-s and 0.6-0.9 with a timeout of 2^4 cycles. The same threads compute the same numbers. Read
#: when the libraries load (with torch, NumPy), so set before; a user's own setting is kept.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

#: the names importable from here -> the module that defines them, imported on first use (PEP 562), so that the
#: command line starts without torch and can start the chapter kernels' template while it imports the rest
_EXPORTS = {"ChapterSkipped": ".errors", "InputError": ".errors", "UndefinedMetricWarning": ".errors",
            "EmbeddingSet": ".io", "load_source": ".io", "load_vectors": ".io",
            "all_but_the_top": ".metrics.isotropy", "all_but_the_top_effect": ".metrics.isotropy",
            "measure_isotropy": ".metrics.isotropy", "spectral_metrics": ".metrics.isotropy",
            "Metric": ".metrics.spec", "MetricSpec": ".metrics.spec", "Recorder": ".chapters.recorder",
            "ChapterSettings": ".settings", "__version__": ".version", "Comparison": ".api", "Report": ".api",
            "compare": ".api", "evaluate": ".api", "basic_interval": ".stats", "bootstrap_ci": ".stats"}

__all__ = ["evaluate", "compare", "Report", "Comparison", "InputError", "ChapterSkipped", "UndefinedMetricWarning",
           "EmbeddingSet", "load_source", "load_vectors", "measure_isotropy", "all_but_the_top",
           "all_but_the_top_effect", "spectral_metrics", "Metric", "MetricSpec", "Recorder", "ChapterSettings",
           "bootstrap_ci", "basic_interval", "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
