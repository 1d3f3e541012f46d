"""Run settings, one meaning each: :class:`ChapterSettings` and the chapter options.

Every chapter receives the same :class:`ChapterSettings`:

* ``seed`` — the seed of every sampling step;
* ``device`` — ``"cpu"`` or ``"cuda"``, resolved once for the whole run (``auto`` = CUDA when
  torch sees a GPU);
* ``sample_size`` — the row/pair budget of sampled estimates, everywhere: ``None`` keeps every
  metric that has an exact form exact (the default); a number makes whole-set estimates use at
  most that many rows or pairs (and say so next to the number);
* ``level`` — the confidence level of every interval;
* ``precision`` — ``"exact"`` (default) or ``"fast"``: cosine k-NN graphs from bfloat16 candidates on a
  GPU, re-ranked exactly, with their recall against exact lists measured and reported;
* ``scheduler`` — the address of the run's Dask scheduler (``--dask``, ``--scheduler``; set by the runner):
  each chapter's decomposable passes over the set run on that cluster
  (:func:`~embeval_report.kernels.dask_engine.use_engine`); None runs them in the chapter's process;
* ``options`` — chapter-specific settings, each declared once in :data:`OPTIONS` with its
  default and meaning (``embeval-report run ... --set k=20 --set n_negatives=50``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable


@dataclass(frozen=True)
class Option:
    """A chapter-specific setting: its default, type, allowed values and meaning."""

    name: str               # what ``--set NAME=VALUE`` and ``ctx.option(NAME)`` call it
    default: Any            # the value used unless set; its type is the option's type
    help: str = ""
    chapters: tuple[str, ...] = ()            # the chapters that read it
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
                             + (f" and below {hi:g}" if hi != float("inf") else "") + f", got {value!r}")
        if self.check is not None:
            return self.check(v)
        return kind(v) if kind in (int, float) else v


def _check_mde(value) -> str:
    from .metrics.effects import check

    return check(value)


_LINK = ("link_prediction", "temporal_link_prediction")
_INF = float("inf")
_TD = ("training_diagnostics",)

#: every chapter-specific option (name -> Option); defaults live here and nowhere else
OPTIONS: dict[str, Option] = {o.name: o for o in (
    Option("k", 10, "neighbours per point for neighbour-based metrics",
           ("hubness", "correction", "stability", "training_stability", "fairness", "anomaly"),
           bounds=(0, _INF)),
    Option("n_negatives", 100, "sampled negatives per test edge (ignored when a negatives file is given)", _LINK,
           bounds=(0, _INF)),
    Option("negative_strategy", "uniform", "how negatives are sampled: uniform, or batch (PyTorch-BigGraph's "
           "same-batch negatives)", _LINK, ("uniform", "batch")),
    Option("negative_pool", "entities", "where negatives come from: entities (all ids) or destinations (ids that "
           "are destinations of the relation)", _LINK, ("entities", "destinations")),
    Option("ties", "realistic", "tie policy of the headline ranks", _LINK, ("realistic", "optimistic", "pessimistic")),
    Option("filtered", False, "headline ranks filtered (known edges removed from the negatives)", _LINK),
    Option("test_fraction", 0.2, "share of edges held out when no test_edges are given", _LINK, bounds=(0, 1)),
    Option("heuristic_queries", 2000, "test edges ranked by the graph-heuristic baselines (the vectors rank all)",
           _LINK, bounds=(0, _INF)),
    Option("mmd_sample", 1000, "rows per side of the MMD permutation test", ("drift",), bounds=(1, _INF)),
    Option("silhouette_sample", 10_000, "rows the cosine silhouette is computed on", ("clustering",),
           bounds=(1, _INF)),
    Option("mde", "auto", "the effect a user cares about per metric (also --mde): 0.01 (absolute), 2% (of the "
           "metric's value), chapter.metric=VALUE, comma-separated; auto: 0.01 for bounded metrics (less near a "
           "bound), 5% for unbounded ones such as ranks; the statistical-rigor chapter gives the units needed to detect it, "
           "`compare` shows equivalence within it (docs/compare.md)", ("rigor",), check=_check_mde),
    Option("rec_holdout", 2, "recommendation: interactions held out per user when no test_interactions are given "
           "(the latest when timestamped, else a seeded draw)", ("recommendation",), bounds=(0, _INF)),
    Option("rec_sampled_negatives", 0, "recommendation: also rank each test item among this many sampled negatives "
           "(0 = off; sampled metrics disagree with full ranking)", ("recommendation",), bounds=(-1, _INF)),
    Option("rec_min_rating", -_INF, "recommendation: held-out interactions rated below this are not relevant",
           ("recommendation",)),
    Option("min_rater_accuracy", 0.7, "a rater is flagged below this gold accuracy or agreement with the other raters "
           "(seed 001 §21.3.2)", ("human_evaluation",), bounds=(0, 1)),
    Option("min_rater_tasks", 10, "gold (or shared) items a rater needs before being judged on them (seed 001 §21.3.2)",
           ("human_evaluation",), bounds=(0, _INF)),
    Option("min_seconds", 10.0, "a rater whose median time per rating is below this is flagged (seed 001 §21.3.2)",
           ("human_evaluation",), bounds=(0, _INF)),
    Option("min_group_size", 30, "fairness: groups with fewer members are reported as too small to compare",
           ("fairness",), bounds=(1, _INF)),
    Option("weat_permutations", 10_000, "fairness: sampled partitions of a WEAT permutation test (exact when the "
           "partitions are fewer)", ("fairness",), bounds=(99, _INF)),
    Option("cost_fn", 10_000.0, "anomaly: cost of a missed anomaly (false negative), e.g. the fraud loss",
           ("anomaly",), bounds=(0, _INF)),
    Option("cost_fp", 100.0, "anomaly: cost of a false alarm (false positive), e.g. the investigation",
           ("anomaly",), bounds=(0, _INF)),
    Option("min_delta", 0.001, "training diagnostics: smallest improvement early stopping counts (relative to the best "
           "value with min_delta_mode=rel, absolute with abs as in Lightning)", _TD, bounds=(-1e-300, _INF)),
    Option("min_delta_mode", "rel", "training diagnostics: min_delta relative to the best value (rel) or absolute (abs)",
           _TD, ("rel", "abs")),
    Option("patience", 5, "training diagnostics: checks without improvement before early stopping fires", _TD,
           bounds=(0, _INF)),
    Option("monitor", "auto", "training diagnostics: the log column early stopping watches (auto: val_loss when "
           "logged, else the smoothed training loss)", _TD),
    Option("monitor_mode", "min", "training diagnostics: whether the monitored value should fall (min) or rise (max)",
           _TD, ("min", "max")),
    Option("smoothing", 0.1, "training diagnostics: weight of the exponential moving average (seed's smoothing_alpha)",
           _TD, bounds=(0, 1)),
    Option("tail_window", 50, "training diagnostics: final checks of the tail tests (seed's window_size)", _TD,
           bounds=(4, _INF)),
    Option("convergence_tol", 0.01, "training diagnostics: converged when within this share of the total change of "
           "the final level", _TD, bounds=(0, 1)),
    Option("cp_penalty", 3.0, "training diagnostics: PELT penalty of the change-point search (seed: 3)", _TD,
           bounds=(0, _INF)),
    Option("log_scale", "auto", "training diagnostics: loss axis on a log scale (auto: when the loss spans a decade)",
           _TD, ("auto", "true", "false")),
    # (new options: one Option(...) entry each, above this line)
)}


@dataclass(frozen=True)
class ChapterSettings:
    """The settings every chapter of a run receives (see the module docstring)."""

    seed: int = 0
    device: str = "cpu"
    sample_size: int | None = None
    level: float = 0.95
    options: dict = field(default_factory=dict)
    precision: str = "exact"
    memory_budget: int | None = None  # bytes (None: the default of :mod:`~embeval_report.kernels.budget`)
    scheduler: str | None = None  # tcp://HOST:PORT of the run's Dask scheduler (None: every pass local)

    def __post_init__(self):
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be resolved to 'cpu' or 'cuda' (see resolve), not {self.device!r}")
        if self.sample_size is not None and (isinstance(self.sample_size, bool) or int(self.sample_size) < 2):
            raise ValueError(f"sample_size must be at least 2 (or None for exact), not {self.sample_size!r}")
        if self.precision not in ("exact", "fast"):
            raise ValueError(f"precision must be 'exact' or 'fast', not {self.precision!r}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must be between 0 and 1, not {self.level!r}")
        if self.memory_budget is not None:
            from .kernels.budget import MIN_BYTES, parse_bytes

            object.__setattr__(self, "memory_budget", parse_bytes(self.memory_budget))
            if self.memory_budget < MIN_BYTES:
                raise ValueError(f"--memory-budget must be at least {MIN_BYTES // 2**20} MiB, not "
                                 f"{self.memory_budget:,} bytes")
        if self.scheduler is not None and (not isinstance(self.scheduler, str) or "://" not in self.scheduler):
            raise ValueError(f"scheduler must be a Dask scheduler address such as tcp://HOST:PORT, not {self.scheduler!r}")
        unknown = [k for k in self.options if k not in OPTIONS]
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
        object.__setattr__(self, "options", {k: OPTIONS[k].parse(v) for k, v in self.options.items()})

    def option(self, name: str) -> Any:
        """The value of a chapter option (its default from :data:`OPTIONS` unless set)."""
        return self.options.get(name, OPTIONS[name].default)

    def to_params(self) -> dict:
        """The plain dict papermill injects into a notebook's ``settings`` parameter."""
        return dict(seed=self.seed, device=self.device, sample_size=self.sample_size, level=self.level,
                    options=dict(self.options), precision=self.precision, memory_budget=self.memory_budget,
                    scheduler=self.scheduler)

    @classmethod
    def resolve(cls, params: dict | None = None, **overrides) -> "ChapterSettings":
        """Settings from a notebook's ``settings`` dict (or keywords), with ``device`` resolved once."""
        from .kernels.device import resolve_device

        p = dict(params or {}, **overrides)
        p["device"] = resolve_device(p.get("device", "auto")).type
        return cls(**p)

    def with_options(self, **options) -> "ChapterSettings":
        return replace(self, options={**self.options, **options})
