"""Issue 40's cases as docs/security.md states them: every regression test its table names exists, and the norm
bound of case 12 is enough for the chapters that broke (isotropy, collapse) just below it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SECURITY = ROOT / "docs" / "security.md"


def _table_rows() -> dict[int, str]:
    """The rows of the issue-40 table: {case number: row}."""
    text = SECURITY.read_text(encoding="utf-8").split("## The cases of issue 40", 1)[1]
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^\| (\d+) \|.*$", text, re.M)}


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_case_has_a_row_naming_tests_that_exist():
    rows = _table_rows()
    assert sorted(rows) == list(range(1, 16)), sorted(rows)
    for case, row in rows.items():
        named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row)
        assert named, f"case {case}: no regression test named"
        for file, test in named:
            assert (ROOT / file).is_file(), f"case {case}: {file} does not exist"
            assert test in _tests_in(ROOT / file), f"case {case}: no {test} in {file}"


def test_vectors_just_under_the_norm_bound_measure_as_at_unit_scale(tmp_path):
    """Case 12: a set whose every row is near the largest accepted length (the longest 0.98 of the bound) is read,
    and isotropy and collapse, which failed or flipped on 1e38 values, give the numbers of the same set at unit
    scale (their moments and distances do not overflow below the bound)."""
    from embeval_report import load_vectors, measure_isotropy
    from embeval_report.io.matrix import MAX_ROW_NORM
    from embeval_report.metrics.collapse import measure_collapse

    rng = np.random.default_rng(0)
    unit = rng.standard_normal((300, 8))
    unit[:150] += 2.0
    unit /= np.linalg.norm(unit, axis=1).max()
    np.save(tmp_path / "big.npy", (unit * (0.98 * MAX_ROW_NORM)).astype(np.float32))
    big = load_vectors(tmp_path / "big.npy")[0]
    small = (big / (0.98 * MAX_ROW_NORM)).astype(np.float32)
    for measure in (measure_isotropy, measure_collapse):
        at_bound, at_unit = measure(big).metrics, measure(small).metrics
        assert at_bound.keys() == at_unit.keys()
        for name, metric in at_unit.items():
            if metric.value is None:
                assert at_bound[name].value is None, name
                continue
            assert np.isfinite(at_bound[name].value), (measure.__name__, name)
            assert at_bound[name].value == pytest.approx(metric.value, rel=1e-5, abs=1e-9), (measure.__name__, name)
            assert at_bound[name].verdict == metric.verdict, (measure.__name__, name)
