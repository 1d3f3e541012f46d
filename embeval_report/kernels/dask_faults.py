"""When the Dask engine's cluster fails: a scheduler address that cannot be one (refused before anything runs:
:func:`~embeval_report.context.check_scheduler`), a scheduler gone, workers that die again and again under one task.

A cluster fault during a pass ends it with one line naming the cluster (:class:`ClusterLost`, raised by
:func:`guarded`) and turns the engine off in this process (:data:`LOST`: every later pass runs here, no further
wait for a scheduler that is gone). A pass marked :func:`falls_back` then runs here instead when its rows fit the
memory budget, said in a warning; a set larger than the budget, which went to the cluster for its size, fails its
chapter with the line. Imports ``distributed`` only when a fault is being told apart.
"""
from __future__ import annotations

import functools
import warnings
from contextlib import contextmanager

from ..context import check_scheduler, current, describe_bytes

__all__ = ["LOST", "ClusterLost", "check_scheduler", "falls_back", "fits", "guarded", "lost"]

#: the scheduler addresses whose cluster was lost in this process
LOST: set[str] = set()


class ClusterLost(RuntimeError):
    """The engine's Dask cluster stopped serving this process: its scheduler is gone, or its workers died again
    and again under one task. The message is one line naming the cluster and the cause."""


def _faults() -> tuple:
    """The exceptions that mean the cluster failed, not the task."""
    from concurrent.futures import CancelledError

    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    return KilledWorker, CommClosedError, CancelledError, TimeoutError


def lost(address: str | None, exc: BaseException) -> ClusterLost:
    """The one line of the cluster fault ``exc`` at ``address``; the engine is off in this process from now on
    (the address in :data:`LOST`; its client is left to whoever closes it, the runner or the process's end)."""
    where = f"the Dask cluster at {address}" if address else "the Dask cluster"
    text = " ".join(str(exc).split())
    first = text.split(". ")[0].rstrip(".") if text else ""
    cause = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if type(exc).__name__ == "KilledWorker":
        line = f"{where} lost its workers again and again under one task ({cause})"
    else:
        line = f"{where} is gone: its scheduler stopped answering ({cause})"
    if address is not None:
        LOST.add(address)
    return ClusterLost(line)


@contextmanager
def guarded(client):
    """Within the block, a cluster fault of ``client`` (None: nothing) is raised as :class:`ClusterLost`."""
    if client is None:
        yield
        return
    try:
        yield
    except _faults() as exc:
        raise lost(_address_of(client), exc) from None


def _address_of(client) -> str | None:
    try:
        return client.scheduler.address
    except Exception:  # pragma: no cover - a client already closed
        return None


def fits(*arrays) -> bool:
    """Whether the rows of ``arrays`` together fit the memory budget in force (a pass over them may run here)."""
    return sum(int(getattr(a, "nbytes", 0)) for a in arrays) <= current().budget


def falls_back(fn):
    """``fn``, a pass over the rows in its first argument(s), run again in this process when the engine's cluster
    is lost during it (the engine is off by then) and those rows fit the memory budget, with a warning naming the
    cluster; otherwise the :class:`ClusterLost` line fails the chapter."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ClusterLost as exc:
            rows = [a for a in args[:2] if getattr(a, "ndim", 0) == 2]
            if not fits(*rows):
                nbytes = sum(int(a.nbytes) for a in rows)
                raise ClusterLost(f"{exc}; its rows ({describe_bytes(nbytes)}) do not fit the memory budget "
                                  f"({describe_bytes(current().budget)}) to be computed here instead") from None
            warnings.warn(f"{exc}; this pass and the later ones were computed in this process instead (the same "
                          "numbers to rounding)", RuntimeWarning, stacklevel=2)
            return fn(*args, **kwargs)
    return run
