"""Run settings, one meaning each: :class:`ChapterSettings`.

Every chapter of a run receives the same settings, resolved once (by the command line, or by
:func:`~embeval_report.chapters.registry.resolve_settings` when a notebook is re-run by hand):

* ``seed`` — the seed of every sampling step;
* ``device`` — ``"cpu"`` or ``"cuda"`` (``auto`` = CUDA when torch sees a GPU, resolved once);
* ``sample_size`` — the row/pair budget of sampled estimates, everywhere, and nothing else: ``None``
  keeps every metric that has an exact form exact (the default); a number makes whole-set estimates use
  at most that many rows or pairs (and say so next to the number);
* ``level`` — the confidence level of every interval;
* ``precision`` — ``"exact"`` (default) or ``"fast"``: cosine k-NN graphs from bfloat16 candidates on a
  GPU, re-ranked exactly, with their recall against exact lists measured and reported;
* ``memory_budget`` — working memory of each process in bytes (``None``: the default budget);
* ``scheduler`` — the address of the run's Dask scheduler (``--dask``, ``--scheduler``; set by the runner);
* ``options`` — every chapter option with its value (the default unless set; each option is declared
  once, in the chapter that reads it: :mod:`embeval_report.chapters.declaration`); ``explicit`` names
  the options the user set (``--set k=20``).

The compute part of the settings reaches the kernels as one
:class:`~embeval_report.context.ComputeContext` (:meth:`ChapterSettings.compute`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ChapterSettings:
    """The settings every chapter of a run receives (see the module docstring)."""

    seed: int = 0
    device: str = "cpu"
    sample_size: int | None = None
    level: float = 0.95
    options: dict = field(default_factory=dict)
    precision: str = "exact"
    memory_budget: int | None = None  # bytes (None: the default, :data:`~embeval_report.context.DEFAULT_BUDGET`)
    scheduler: str | None = None  # tcp://HOST:PORT of the run's Dask scheduler (None: every pass local)
    explicit: tuple[str, ...] = ()  # the options set by the user (the others hold their defaults)

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
            from .context import checked_budget

            object.__setattr__(self, "memory_budget", checked_budget(self.memory_budget, "--memory-budget"))
        if self.scheduler is not None and (not isinstance(self.scheduler, str) or "://" not in self.scheduler):
            raise ValueError(f"scheduler must be a Dask scheduler address such as tcp://HOST:PORT, not {self.scheduler!r}")
        object.__setattr__(self, "explicit", tuple(self.explicit))

    def option(self, name: str) -> Any:
        """The value of a chapter option (resolved settings hold every option; see the module docstring)."""
        try:
            return self.options[name]
        except KeyError:
            raise KeyError(f"option {name!r} is not among these settings' options ({', '.join(self.options) or 'none'}): "
                           "resolve the settings with embeval_report.chapters.registry.resolve_settings") from None

    @property
    def set_options(self) -> dict:
        """The options the user set, with their values (what run.json and the report header state)."""
        return {k: self.options[k] for k in self.explicit if k in self.options}

    def to_params(self) -> dict:
        """The plain dict papermill injects into a notebook's ``settings`` parameter (already resolved)."""
        return dict(seed=self.seed, device=self.device, sample_size=self.sample_size, level=self.level,
                    options=dict(self.options), precision=self.precision, memory_budget=self.memory_budget,
                    scheduler=self.scheduler, explicit=list(self.explicit))

    def compute(self, **caches):
        """The :class:`~embeval_report.context.ComputeContext` of these settings (``caches``: the
        graph and moments caches of the run, when there are)."""
        from .context import ComputeContext

        return ComputeContext(device=self.device, precision=self.precision, memory_budget=self.memory_budget,
                              scheduler=self.scheduler, seed=self.seed, **caches)

    def with_options(self, **options) -> "ChapterSettings":
        return replace(self, options={**self.options, **options}, explicit=tuple(dict.fromkeys((*self.explicit, *options))))
