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

@pytest.fixture(scope="session")
def demo_data(tmp_path_factory):
    """The demo's manifest as ``write_demo(seed=0)`` writes it with every chapter's side data, written once per test
    process for the tests that check what it plants. Read it; do not write into its folder."""
    from embeval_report.demo import write_demo

    return write_demo(tmp_path_factory.mktemp("demo-data"), seed=0)


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


# ---------------------------------------------------------------------------------------------
# The longest tests first (issue 27 part 5): `make test` spreads the tests over two workers in collection order,
# so a test of minutes collected late ran alone at the end while the other worker idled. The files below hold
# the suite's longest tests (each > 30 s on the 2-core machine: the full demo, the Dask out-of-core run, the
# end-to-end fixtures); they start first, the short tests fill in around them. Order only: nothing is skipped.
# ---------------------------------------------------------------------------------------------
LONGEST_FIRST = ("test_demo.py", "test_dask_out_of_core.py", "test_end_to_end.py", "test_explore.py",
                 "test_drift.py", "test_model_run.py", "test_stability.py", "test_dask_engine.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order
