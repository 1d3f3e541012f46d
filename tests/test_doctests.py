"""The examples in the package's docstrings run (doctest), so they stay true."""
import doctest
import importlib
from pathlib import Path

import pytest

import embeval_report

PACKAGE = Path(embeval_report.__file__).parent
WITH_EXAMPLES = sorted(str(p.relative_to(PACKAGE.parent).with_suffix("")).replace("/", ".")
                       for p in PACKAGE.rglob("*.py") if ">>> " in p.read_text())


def test_there_are_examples():
    assert len(WITH_EXAMPLES) >= 10


@pytest.mark.parametrize("module", WITH_EXAMPLES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {module}"
