"""Under CI a test skipped because a module could not be imported fails instead, unless the module is one of the
optional peer libraries of the drift checks (:data:`reference.OPTIONAL_PEERS`).

The ``test`` extra installs every other library a test imports (h5py, zarr, distributed, pykeen, ...), so in CI a
``could not import`` skip means a broken install, which would otherwise pass quietly as a skip. CI is on when the
environment variable ``CI`` is set to anything but ``""``, ``0``, ``false``, ``no`` or ``off`` (.ci/run sets
``CI=1``). Loaded by tests/conftest.py (or ``pytest -p no_silent_skips``); covers module-level and in-test
``pytest.importorskip`` and any skip whose reason uses its words ``could not import 'name'``.
"""
from __future__ import annotations

import os
import re

import pytest

from reference import OPTIONAL_PEERS

_IMPORT_SKIP = re.compile(r"could not import '([\w.]+)'")


def ci_enabled() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")


def required_missing(report) -> str | None:
    """The module a skip report could not import, when CI is on and the module is not an optional peer."""
    if not (report.skipped and ci_enabled()):
        return None
    found = _IMPORT_SKIP.search(str(report.longrepr))
    if found is None or found.group(1).split(".")[0] in OPTIONAL_PEERS:
        return None
    return found.group(1)


def _fail(report, module: str) -> None:
    report.outcome = "failed"
    report.longrepr = (f"{report.nodeid or report.fspath}: could not import '{module}' under CI; the test extra "
                       f"installs it (pip install -e '.[test]'), so this is a broken install, not a skip")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    module = required_missing(report)
    if module:
        _fail(report, module)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    report = (yield).get_result()
    module = required_missing(report)
    if module:
        _fail(report, module)
