"""The report-wide multiple-testing step, run once every content chapter has executed.

:func:`adjust_report` collects every test the chapters recorded, adjusts them together
(:func:`embeval_report.metrics.rigor.adjust_tests`), writes ``results/rigor_tests.csv`` (what the
Statistical rigor chapter shows) and re-renders each chapter's table of tests
(:func:`embeval_report.report.display.hypothesis_table`) in its executed notebook with the adjusted values,
so a chapter shows the report-wide adjusted p-value next to the raw one.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd

from ..metrics.rigor import adjust_tests, collect_tests
from .display import hypothesis_table
from .recorder import read_results

#: the adjusted tests of a run, in its results folder
TESTS_FILE = "rigor_tests.csv"


def adjust_report(staging: Path, order: list[str]) -> pd.DataFrame:
    """Adjust every recorded test of the run in ``staging`` (chapters in report ``order``), write
    :data:`TESTS_FILE` and fill the chapters' test tables; return the adjusted tests."""
    records = read_results(staging / "results")
    adjusted = adjust_tests(collect_tests(records, [c for c in order if c in records]))
    adjusted.to_csv(staging / "results" / TESTS_FILE, index=False)
    fill_test_tables(staging / "chapters", adjusted)
    return adjusted


def read_adjusted(results_dir) -> pd.DataFrame | None:
    """The adjusted tests written by :func:`adjust_report` (``None`` when the run has not written them)."""
    path = Path(results_dir) / TESTS_FILE
    if not path.exists():
        return None
    frame = pd.read_csv(path, dtype={"n": str, "null": str, "family": str, "name": str, "test": str},
                        keep_default_na=False, na_values={"p_value": [""], "statistic": [""], "p_holm": [""],
                                                          "p_bh": [""]})
    for c in ("rejected_holm", "rejected_bh"):
        frame[c] = frame[c].astype(str).str.lower().eq("true")
    return frame


def fill_test_tables(chapters_dir: Path, adjusted: pd.DataFrame) -> int:
    """Re-render every test table in the executed notebooks of ``chapters_dir`` with the adjusted p-values;
    returns how many tables were filled."""
    filled = 0
    for path in sorted(Path(chapters_dir).glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        changed = False
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                chapter = out.get("metadata", {}).get("embeval", {}).get("tests")
                if out.get("output_type") != "display_data" or not chapter:
                    continue
                part = adjusted[adjusted["chapter"] == chapter].reset_index(drop=True)
                if not len(part):
                    continue
                data, meta = hypothesis_table(part, chapter)._repr_mimebundle_()
                out["data"], out["metadata"] = data, meta
                changed, filled = True, filled + 1
        if changed:
            nbformat.write(nb, path)
    return filled
