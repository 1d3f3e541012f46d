"""The working-memory budget of a run (``--memory-budget``): chunk, block, resampling and cache sizes follow it.

The default of 4 GiB gives the sizes the package has always used (256 MiB chunks of work, 64 MiB
blocks of a streamed source, 512 MiB of per-block moments, 512 MiB of k-NN graphs per process), so a
run without the option computes exactly what it did before. An array derived from the whole set (a
transformed copy of the vectors) is only materialised when it fits in a quarter of the budget; above
that it is a :class:`~embeval_report.kernels.device.RowMap` computed chunk by chunk where it is read.
The memory-mapped inputs and neighbour graphs are page cache, not part of the budget.
"""
from __future__ import annotations

import re

#: the default budget: 4 GiB
DEFAULT_BYTES = 4 * 2**30
#: the smallest budget accepted
MIN_BYTES = 256 * 2**20

_budget = DEFAULT_BYTES
_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}


def parse_bytes(text: str | int) -> int:
    """``"4GiB"``, ``"512MB"``, ``"2g"`` or a number of bytes, as bytes (G/M/K alone are binary units)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"expected a size such as 4GiB, 512MB or 2G; got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def memory_budget() -> int:
    """The budget in force, in bytes."""
    return _budget


def use_memory_budget(nbytes: int | str | None) -> None:
    """Set the budget (``None``: the default) and every size derived from it, in this process."""
    global _budget
    from .. import kernels, stats
    from ..io import stores
    from . import graph_cache

    value = DEFAULT_BYTES if nbytes is None else parse_bytes(nbytes)
    if value < MIN_BYTES:
        raise ValueError(f"memory budget must be at least {MIN_BYTES // 2**20} MiB, not {value:,} bytes")
    _budget = value
    kernels.CHUNK_BYTES = value // 16
    stores.BLOCK_BYTES = value // 64
    stats.RESAMPLING_BYTES = value // 8
    graph_cache.MEMORY_BYTES = value // 8


def fits(nbytes: int) -> bool:
    """Whether an array of ``nbytes`` may be held whole: at most a quarter of the budget."""
    return nbytes <= _budget // 4


def describe(nbytes: int | None = None) -> str:
    """``"4 GiB"``-style text of the budget (or of ``nbytes``)."""
    value = _budget if nbytes is None else nbytes
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:,} bytes"
