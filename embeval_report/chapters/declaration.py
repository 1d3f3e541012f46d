"""What a chapter is: one :class:`ChapterSpec` per chapter module, named ``CHAPTER``.

Everything the rest of the package needs to know about a chapter is declared there, once: its name,
title and place in the report, the inputs it needs (``requires``; ``"a|b"`` when either will do) and
those it reads when present (``optional``), its options (each an :class:`Option` with default, bounds
and help; options several chapters read, such as :data:`K`, are shared objects), whether it reads
the run's shared cosine k-NN graph, the check that skips it on valid but degenerate input
(``precheck``), which :mod:`embeval_report.demo` module writes its demo data, and the rules that turn
its results into findings. :mod:`~embeval_report.chapters.registry` derives the chapter list, the
options, the runner's graph decision and the demo's writers from these declarations.

Example::

    CHAPTER = ChapterSpec(
        name="anomaly", title="Anomaly detection", order=88,
        requires=("metadata.is_anomaly|metadata.anomaly",), optional=("anomaly_scores",),
        options=(K, Option("cost_fn", 10_000.0, "anomaly: cost of a missed anomaly", bounds=(0, INF))),
        graph=True, precheck=precheck, demo="anomaly", findings=findings)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..metrics import effects
from ..metrics.classification import MAX_PROBE_ENTITIES

INF = float("inf")
#: what a chapter's findings are about: the model's use ("model"), its geometry ("diagnostic")
KINDS = ("model", "diagnostic")


@dataclass(frozen=True)
class Option:
    """A chapter option: its default, type, allowed values and meaning.

    >>> Option("k", 10, bounds=(0, INF)).parse("20")
    20
    >>> Option("ties", "realistic", choices=("realistic", "optimistic")).parse("worst")
    Traceback (most recent call last):
    ...
    ValueError: option ties: expected one of realistic, optimistic, got 'worst'
    """

    name: str               # what ``--set NAME=VALUE`` and ``ctx.option(NAME)`` call it
    default: Any            # the value used unless set; its type is the option's type
    help: str = ""
    choices: tuple | None = None
    bounds: tuple[float, float] | None = None  # open interval (low, high) a number must lie in
    check: Callable[[Any], Any] | None = None  # validates and normalises the value (raises ValueError)

    def parse(self, value: Any) -> Any:
        """``value`` (a string from the command line, or a Python value) as this option's type."""
        kind = type(self.default)
        try:
            if isinstance(value, str) and kind is bool:
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                v = value.lower() in ("true", "1", "yes")
            elif isinstance(value, str) and kind in (int, float):
                v = kind(value)
            else:
                v = value
        except ValueError:
            raise ValueError(f"option {self.name}: expected a {kind.__name__}, got {value!r}") from None
        if kind in (int, float) and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ValueError(f"option {self.name}: expected a {kind.__name__}, got {value!r}")
        if self.choices is not None and v not in self.choices:
            raise ValueError(f"option {self.name}: expected one of {', '.join(map(str, self.choices))}, got {value!r}")
        if self.bounds is not None and not self.bounds[0] < v < self.bounds[1]:
            lo, hi = self.bounds
            raise ValueError(f"option {self.name}: expected a value above {lo:g}"
                             + (f" and below {hi:g}" if hi != INF else "") + f", got {value!r}")
        if self.check is not None:
            return self.check(v)
        return kind(v) if kind in (int, float) else v


#: options read by several chapters (each chapter lists the ones it reads among its ``options``)
K = Option("k", 10, "neighbours per point for neighbour-based metrics", bounds=(0, INF))


def graph_neighbours(settings) -> int:
    """The neighbours every shared k-NN graph of a run is stored with at least: the ``k`` option plus one (a
    chapter's list of k neighbours, and a row's own place in a self search; 1 when no chapter declares ``k``)."""
    return int(settings.options.get(K.name, 0)) + 1
PROBE_ENTITIES = Option("probe_entities", MAX_PROBE_ENTITIES, "node classification, fairness: entities the linear "
                        "probes use at most (a stratified sample); --sample-size caps it too", bounds=(1, INF))
#: options of both link-prediction chapters
LINK_OPTIONS = (
    Option("n_negatives", 100, "sampled negatives per test edge (ignored when a negatives file is given)",
           bounds=(0, INF)),
    Option("negative_strategy", "uniform", "how negatives are sampled: uniform, or batch (PyTorch-BigGraph's "
           "same-batch negatives)", ("uniform", "batch")),
    Option("negative_pool", "entities", "where negatives come from: entities (all ids) or destinations (ids that "
           "are destinations of the relation)", ("entities", "destinations")),
    Option("ties", "realistic", "tie policy of the headline ranks", ("realistic", "optimistic", "pessimistic")),
    Option("filtered", False, "headline ranks filtered (known edges removed from the negatives)"),
    Option("test_fraction", 0.2, "share of edges held out when no test_edges are given", bounds=(0, 1)),
    Option("heuristic_queries", 2000, "test edges ranked by the graph-heuristic baselines (the vectors rank all)",
           bounds=(0, INF)),
)
MDE = Option("mde", "auto", "the effect a user cares about per metric (also --mde): 0.01 (absolute), 2% (of the "
             "metric's value), chapter.metric=VALUE, comma-separated; auto: 0.01 for bounded metrics (less near a "
             "bound), 5% for unbounded ones such as ranks; the statistical-rigor chapter gives the units needed to "
             "detect it, `compare` shows equivalence within it (docs/compare.md)", check=effects.check)


@dataclass(frozen=True)
class ChapterSpec:
    """One chapter of the report (see the module docstring)."""

    name: str
    title: str
    order: int                       # position in the report (the notebook is ``notebooks/<order:02d>_<name>.ipynb``)
    description: str = ""
    requires: tuple[str, ...] = ()   # inputs as :meth:`EmbeddingSet.has` understands them; ``a|b``: either
    optional: tuple[str, ...] = ()   # inputs read when present
    needs: str = ""                  # how a "not run" line names ``requires`` (default: from the manifest schema)
    options: tuple[Option, ...] = ()
    graph: bool = False              # reads the run's shared cosine k-NN graph (k + 1 neighbours for option ``k``)
    graph_rescored: tuple[str, ...] = ()  # re-scored graphs of the same sweep it reads ("mutual_proximity")
    precheck: Callable[[Any, Any, Any], str | None] | None = None   # (es, side, settings) -> why it cannot run
    demo: str | None = None          # the module of :mod:`embeval_report.demo` that writes its demo side data
    effects: tuple = ()              # :class:`~.findings.Effect` groups of related thresholded metrics
    findings: Callable | None = None  # (ChapterResults) -> list[Finding]: baselines, events, groups; :mod:`.findings`
    scorer: Any = None               # a task chapter's :class:`~embeval_report.metrics.scoring.TaskScorer`
    kind: str = "model"              # "model": what the vectors do; "diagnostic": their geometry (at most concerning)
    remedies: tuple[str, ...] = ()   # a diagnostic's remedies (:data:`~embeval_report.metrics.remedies.REMEDIES`)
    standard_remedies: int = 1       # how many of ``remedies`` (the first) the remedy check tries by default
    stage: int = 0                   # 0: content; 1, 2: after every content chapter, in stage order (read results)
    decision: bool = False           # holds the report's decision: first in the report, its severity the status
    module: str = ""                 # set by the registry: the module declaring it

    @property
    def filename(self) -> str:
        """Executed notebook name inside ``OUT/chapters/``."""
        return f"{self.order:02d}_{self.name}.ipynb"

    @property
    def notebook(self) -> Path:
        """The template notebook of the chapter."""
        from ..resources import notebooks_dir

        return Path(notebooks_dir()) / self.filename

    def missing(self, es) -> list[str]:
        """Inputs this chapter needs that the embedding set lacks (``a|b``: either will do)."""
        return [r for r in self.requires if not any(es.has(alt) for alt in r.split("|"))]

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"chapter {self.name}: kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.graph_rescored and not self.graph:
            raise ValueError(f"chapter {self.name}: graph_rescored needs graph=True (the graphs of the shared sweep)")

    def check(self, es, side, settings) -> str | None:
        """Why the chapter cannot run on this set: a missing input, or its precheck's reason; ``None`` when it can."""
        from ..io.manifest import describe_input

        missing = self.missing(es)
        if missing:
            return "needs " + (self.needs or ", ".join(map(describe_input, missing)))
        return self.precheck(es, side, settings) if self.precheck is not None else None

    def option(self, name: str) -> Option:
        """The declaration of one of this chapter's options."""
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(f"chapter {self.name} has no option {name!r}; its options: "
                       f"{', '.join(o.name for o in self.options) or 'none'}")
