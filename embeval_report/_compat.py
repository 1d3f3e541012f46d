"""Old flat module names (``embeval_report.isotropy``, ``embeval_report.display``, ...) keep working.

Until version 0.1 the package was one flat folder; its modules now live in ``io/``, ``kernels/``,
``metrics/``, ``chapters/``, ``report/`` and ``demo/``. Importing an old name gives a module that
looks each attribute up in the new modules listed in :data:`MOVED` and warns
(:class:`DeprecationWarning`) once per old name. New code imports the new modules.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

#: old module -> the new modules its names now live in, searched in order
MOVED = {
    "isotropy": ("metrics.isotropy", "chapters.isotropy", "io"),
    "uniformity": ("metrics.uniformity", "chapters.uniformity", "io.pairs"),
    "collapse": ("metrics.collapse", "chapters.collapse"),
    "hubness": ("metrics.hubness", "metrics.hubness_measures", "metrics.hubness_reduction", "chapters.hubness",
                "kernels.neighbours"),
    "correction": ("metrics.correction", "chapters.correction"),
    "semantic": ("metrics.semantic", "chapters.semantic", "io.words", "stats"),
    "stability": ("metrics.stability", "metrics.training_stability", "chapters.stability",
                  "chapters.training_stability", "io.runs", "demo.stability", "stats"),
    "drift": ("metrics.drift", "metrics.two_sample", "chapters.drift", "io.snapshots", "demo.drift", "stats"),
    "linkpred": ("metrics.linkpred", "metrics.temporal", "metrics.ranks", "metrics.edge_probes",
                 "chapters.link_prediction", "chapters.temporal_link_prediction", "metrics.spec",
                 "metrics.thresholds", "stats"),
    "graph": ("io.graph", "metrics.graph", "demo.graph"),
    "classification": ("metrics.classification", "metrics.clustering", "metrics.labels", "chapters.node_classification",
                       "chapters.clustering", "stats"),
    "procrustes": ("metrics.procrustes",),
    "thresholds": ("metrics.thresholds",),
    "results": ("metrics.spec", "report.recorder", "report.display", "report.format"),
    "display": ("report.display", "report.format"),
    "plotting": ("report.plotting", "chapters.isotropy"),
    "summary": ("report.summary",),
    "runner": ("report.runner", "report.outdir"),
    "render": ("report.render", "report.render.common", "report.render.html", "report.render.pdf",
               "report.render.quarto"),
    "notebook": ("chapters.setup",),
}
_PACKAGE = __name__.rpartition(".")[0]


class _MovedModule(types.ModuleType):
    def __init__(self, old: str, targets: tuple[str, ...]):
        super().__init__(f"{_PACKAGE}.{old}", f"Moved: see {', '.join(targets)}.")
        self._targets = targets
        self._warned = False

    def _modules(self):
        for t in self._targets:
            try:
                yield importlib.import_module(f"{_PACKAGE}.{t}")
            except ModuleNotFoundError:
                continue

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        for mod in self._modules():
            if hasattr(mod, name):
                if not self._warned:
                    self._warned = True
                    warnings.warn(f"{self.__name__} moved to {', '.join(self._targets)}; import from there",
                                  DeprecationWarning, stacklevel=2)
                return getattr(mod, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} (it moved to "
                             f"{', '.join(self._targets)})")

    def __dir__(self):
        return sorted({n for m in self._modules() for n in dir(m) if not n.startswith("__")})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        pkg, _, old = fullname.rpartition(".")
        if pkg == _PACKAGE and old in MOVED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return _MovedModule(spec.name.rpartition(".")[2], MOVED[spec.name.rpartition(".")[2]])

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_Finder())
