"""Shared fixtures and configuration of the test suite."""
from __future__ import annotations

import pytest
import torch

from embeval_report.context import ComputeContext

# ---------------------------------------------------------------------------------------------
# No silent skips in CI (issue 30): with CI set, a skip for a module the test extra installs is a failure;
# only the five optional peer libraries of the reference checks may be missing (see tests/no_silent_skips.py).
# ---------------------------------------------------------------------------------------------
from no_silent_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402,F401

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


# ---------------------------------------------------------------------------------------------
# Devices (issue 30 part 4): a kernel test that takes a ``device`` argument runs on the CPU and, where torch
# sees a GPU, on it too; the GPU cases carry "cuda" in their test id, so `pytest -k cuda` selects them all
# (what `make bench-gpu` runs first).
# ---------------------------------------------------------------------------------------------
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """``"cpu"``, then ``"cuda"`` when torch sees a GPU."""
    return request.param
