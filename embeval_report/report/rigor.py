"""The report-wide multiple-testing step, run once every content chapter has executed.

:func:`adjust_report` collects every test the chapters recorded, adjusts them together
(:func:`embeval_report.metrics.rigor.adjust_tests`), writes ``results/rigor_tests.csv`` (what the
Statistical rigor chapter shows). The executed notebooks are never edited afterwards: when the report is
rendered, :func:`with_adjusted_tests` shows each chapter's table of tests
(:func:`embeval_report.present.display.hypothesis_table`) with the report-wide adjusted p-value next to the
raw one, read from that file.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..metrics.rigor import adjust_tests, collect_tests
from ..chapters.recorder import TESTS_FILE, read_results


def adjust_report(staging: Path, order: list[str]) -> pd.DataFrame:
    """Adjust every recorded test of the run in ``staging`` (chapters in report ``order``), write
    :data:`~embeval_report.chapters.recorder.TESTS_FILE`; return the adjusted tests."""
    records = read_results(staging / "results")
    adjusted = adjust_tests(collect_tests(records, [c for c in order if c in records]))
    adjusted.to_csv(staging / "results" / TESTS_FILE, index=False)
    return adjusted


def with_adjusted_tests(nb, adjusted: pd.DataFrame | None) -> int:
    """Show the report-wide adjusted p-values in the test tables of ``nb`` (a notebook being rendered, not the
    executed file): each output marked ``{"tests": chapter}`` is re-made from that chapter's rows of
    ``adjusted``. Returns how many tables were filled."""
    from ..present.display import hypothesis_table

    filled = 0
    if adjusted is None:
        return filled
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            chapter = out.get("metadata", {}).get("embeval", {}).get("tests")
            if out.get("output_type") != "display_data" or not chapter:
                continue
            part = adjusted[adjusted["chapter"] == chapter].reset_index(drop=True)
            if len(part):
                out["data"], out["metadata"] = hypothesis_table(part, chapter)._repr_mimebundle_()
                filled += 1
    return filled
