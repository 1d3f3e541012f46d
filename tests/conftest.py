"""Shared pytest configuration of the test suite."""

# ---------------------------------------------------------------------------------------------
# No silent skips in CI (issue 30): with CI set, a skip for a module the test extra installs is a failure;
# only the optional peer libraries of the drift checks may be missing (see tests/no_silent_skips.py).
# ---------------------------------------------------------------------------------------------
from no_silent_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402,F401

# ---------------------------------------------------------------------------------------------
