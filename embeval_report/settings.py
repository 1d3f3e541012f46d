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
* ``options`` — chapter-specific settings, each declared once in :data:`OPTIONS` with its
  default and meaning (``embeval-report run ... --set k=20 --set n_negatives=50``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Option:
    """A chapter-specific setting: its default, type, allowed values and meaning."""

    name: str               # what ``--set NAME=VALUE`` and ``ctx.option(NAME)`` call it
    default: Any            # the value used unless set; its type is the option's type
    help: str = ""
    chapters: tuple[str, ...] = ()            # the chapters that read it
    choices: tuple | None = None
    bounds: tuple[float, float] | None = None  # open interval (low, high) a number must lie in

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
        return kind(v) if kind in (int, float) else v


_LINK = ("link_prediction", "temporal_link_prediction")
_INF = float("inf")

#: every chapter-specific option (name -> Option); defaults live here and nowhere else
OPTIONS: dict[str, Option] = {o.name: o for o in (
    Option("k", 10, "neighbours per point for neighbour-based metrics",
           ("hubness", "correction", "stability", "training_stability"), bounds=(0, _INF)),
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
    Option("mde", 0.01, "the effect a user cares about, in a metric's own units: the statistical-rigor chapter gives "
           "the units needed to detect it, and `compare` calls a comparison underpowered when its minimum detectable "
           "effect is larger (also --mde)", ("rigor",), bounds=(0, _INF)),
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

    def __post_init__(self):
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be resolved to 'cpu' or 'cuda' (see resolve), not {self.device!r}")
        if self.sample_size is not None and (isinstance(self.sample_size, bool) or int(self.sample_size) < 2):
            raise ValueError(f"sample_size must be at least 2 (or None for exact), not {self.sample_size!r}")
        if self.precision not in ("exact", "fast"):
            raise ValueError(f"precision must be 'exact' or 'fast', not {self.precision!r}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must be between 0 and 1, not {self.level!r}")
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
                    options=dict(self.options), precision=self.precision)

    @classmethod
    def resolve(cls, params: dict | None = None, **overrides) -> "ChapterSettings":
        """Settings from a notebook's ``settings`` dict (or keywords), with ``device`` resolved once."""
        from .kernels.device import resolve_device

        p = dict(params or {}, **overrides)
        p["device"] = resolve_device(p.get("device", "auto")).type
        return cls(**p)

    def with_options(self, **options) -> "ChapterSettings":
        return replace(self, options={**self.options, **options})
