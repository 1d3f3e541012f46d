"""Shared fixtures of the suite."""
from __future__ import annotations

import pytest

from embeval_report.context import ComputeContext


# --------------------------------------------------------------------------- the compute context

@pytest.fixture
def enter():
    """``enter(**fields)`` enters a :class:`~embeval_report.context.ComputeContext` for the rest of the test (left
    again, in reverse order, when the test ends); returns it."""
    entered = []

    def _enter(**fields) -> ComputeContext:
        ctx = ComputeContext(**fields)
        ctx.__enter__()
        entered.append(ctx)
        return ctx

    yield _enter
    for ctx in reversed(entered):
        ctx.__exit__(None, None, None)
