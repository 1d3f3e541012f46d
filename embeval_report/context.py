"""The compute context of a run: one object with everything that shapes how (not what) the kernels compute.

A :class:`ComputeContext` holds the device, the precision of k-NN candidates, the working-memory budget
(and the chunk, block, resampling and cache sizes derived from it), the Dask engine, the run's graph and
moments caches, the seed and the chapter being computed (for progress lines). It is made once from the
resolved settings (:meth:`embeval_report.settings.ChapterSettings.compute`) and entered around the work
that uses it::

    with settings.compute(graph_cache=CacheFolder(cache / "neighbours", min_k=11)):
        ...   # every kernel called here reads it through current()

Entering it makes it the context of the calling thread (a :class:`contextvars.ContextVar`); leaving
restores the previous one, so nothing outlives the ``with`` block. Outside any block the default
context applies: CPU, exact, the default budget, in-memory caches only, local engine.

It lives at the bottom of the package (beside :mod:`.errors`) so that the readers (:mod:`.io`), the
kernels and the statistics can all read it without importing anything above them.
"""
from __future__ import annotations

import contextvars
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

#: the default working-memory budget: 4 GiB (the sizes the package has always used)
DEFAULT_BUDGET = 4 * 2**30
#: each size as a share of the budget: chunk of work, block read from a store, per-block resampling
#: moments, k-NN graphs kept in memory per process
SHARES = {"chunk": 16, "block": 64, "resampling": 8, "graphs": 8}
#: the smallest budget accepted: every size shared out of the budget keeps at least one row (or one stored
#: chunk), so a small budget costs time, not correctness; 16 MiB (chunks of work of 1 MiB) still refuses a
#: unit slip such as ``--memory-budget 16`` (bytes)
MIN_BYTES = 16 * 2**20

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}


def parse_bytes(text: str | int) -> int:
    """``"4GiB"``, ``"512MB"``, ``"2g"`` or a number of bytes, as bytes (G/M/K alone are binary units).

    >>> parse_bytes("4GiB"), parse_bytes("512MB"), parse_bytes(1024)
    (4294967296, 512000000, 1024)
    """
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"expected a size such as 4GiB, 512MB or 2G; got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def checked_budget(value: str | int, label: str = "memory budget") -> int:
    """A working-memory budget (:func:`parse_bytes`) in bytes, at least :data:`MIN_BYTES` (a ValueError naming
    ``label`` otherwise)."""
    budget = parse_bytes(value)
    if budget < MIN_BYTES:
        raise ValueError(f"{label} must be at least {MIN_BYTES // 2**20} MiB, not {budget:,} bytes")
    return budget


def describe_bytes(value: int) -> str:
    """``"4 GiB"``-style text of a size.

    >>> describe_bytes(4 * 2**30), describe_bytes(300 * 2**20)
    ('4 GiB', '300 MiB')
    """
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:,} bytes"


@dataclass(frozen=True)
class CacheFolder:
    """A run-level cache: where it is stored (``None``: in this process's memory only), the smallest k a
    k-NN graph is stored with, and ``log(event)`` told of every request (``{"source": "computed"|"cache", ...}``)."""

    folder: Path | None = None
    min_k: int = 0
    log: Callable[[dict], None] | None = field(default=None, compare=False)

    def __post_init__(self):
        if self.folder is not None:
            object.__setattr__(self, "folder", Path(self.folder))


@dataclass(frozen=True)
class ComputeContext:
    """How the kernels of one run compute (see the module docstring)."""

    device: str = "cpu"
    precision: str = "exact"             # "exact" | "fast" (bfloat16 k-NN candidates on a GPU, re-ranked exactly)
    memory_budget: int | None = None     # bytes; None: the default sizes
    scheduler: str | None = None         # tcp://HOST:PORT of the run's Dask scheduler; None: every pass local
    seed: int = 0
    graph_cache: CacheFolder = field(default_factory=CacheFolder)
    moments_cache: CacheFolder = field(default_factory=CacheFolder)
    chapter: str | None = None           # the chapter computing (named in progress lines)
    _tokens: list = field(default_factory=list, init=False, compare=False, repr=False)

    def __post_init__(self):
        if self.precision not in ("exact", "fast"):
            raise ValueError(f"precision must be 'exact' or 'fast', not {self.precision!r}")
        if self.memory_budget is not None:
            object.__setattr__(self, "memory_budget", checked_budget(self.memory_budget))

    @property
    def budget(self) -> int:
        """The working-memory budget in force, in bytes."""
        return DEFAULT_BUDGET if self.memory_budget is None else self.memory_budget

    def share(self, what: str) -> int | None:
        """Bytes of ``what`` (a key of :data:`SHARES`) under a budget the user set; ``None`` under the default
        budget, where each module's own default size applies (the same numbers: 4 GiB / share)."""
        return None if self.memory_budget is None else self.memory_budget // SHARES[what]

    def fits(self, nbytes: int) -> bool:
        """Whether an array of ``nbytes`` may be held whole: at most a quarter of the budget."""
        return nbytes <= self.budget // 4

    def __enter__(self) -> "ComputeContext":
        self._tokens.append(_CURRENT.set(self))
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._tokens.pop())

    def run(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` inside this context."""
        with self:
            return fn(*args, **kwargs)


_CURRENT: contextvars.ContextVar[ComputeContext] = contextvars.ContextVar("embeval_compute", default=ComputeContext())


def current() -> ComputeContext:
    """The compute context in force (the default one outside every ``with`` block)."""
    return _CURRENT.get()


def cache_folder(path: str | os.PathLike | None, **kw) -> CacheFolder:
    """A :class:`CacheFolder` at ``path`` (memory only when ``None``)."""
    return CacheFolder(None if path is None else Path(path), **kw)


def resolve_device(device="auto"):
    """Map ``"auto" | "cpu" | "cuda"`` to a torch device (``auto`` = cuda when available); one meaning for the
    whole package, from the command line's ``--device`` to a kernel's ``device=`` argument."""
    import torch

    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but torch sees no CUDA device; use 'auto' or 'cpu'")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', not {device!r}")
    return torch.device(device)


#: the address schemes of a Dask scheduler (distributed's comms); ``HOST:PORT`` alone is TCP
SCHEDULER_SCHEMES = ("tcp", "tls", "inproc", "ucx", "ws", "wss")


def check_scheduler(address: str) -> str:
    """``address`` if it reads as a Dask scheduler's (``tcp://HOST:PORT``, another comm scheme, or ``HOST:PORT``),
    else one InputError line (a dashboard's ``http://`` address was tried for 40 s, then a 50-line traceback)."""
    from .errors import InputError

    scheme, sep, rest = str(address).partition("://")
    if not sep:
        scheme, rest = "tcp", str(address)
    if scheme not in SCHEDULER_SCHEMES or not rest.strip("/"):
        hint = " (that is a web address, such as the dashboard's)" if scheme in ("http", "https") else ""
        raise InputError(f"--scheduler {address}: not a Dask scheduler address{hint}; expected tcp://HOST:PORT "
                         f"(or {', '.join(s + '://' for s in SCHEDULER_SCHEMES[1:])}...)")
    return address
