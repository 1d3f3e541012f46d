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
import numpy as np
import pandas as pd

from ..metrics.rigor import adjust_tests, collect_tests
from .display import hypothesis_table
from .format import p_value
from .recorder import read_results

#: the adjusted tests of a run, in its results folder
TESTS_FILE = "rigor_tests.csv"
#: tests of one family shown one by one in a chapter's table up to this many; beyond, one summary row
FAMILY_ROWS = 5


def adjust_report(staging: Path, order: list[str]) -> pd.DataFrame:
    """Adjust every recorded test of the run in ``staging`` (chapters in report ``order``), write
    :data:`TESTS_FILE` and fill the chapters' test tables; return the adjusted tests."""
    records = read_results(staging / "results")
    adjusted = adjust_tests(collect_tests(records, [c for c in order if c in records]))
    adjusted.to_csv(staging / "results" / TESTS_FILE, index=False)
    fill_test_tables(staging / "chapters", adjusted)
    return adjusted


def hypothesis_rows(tests: pd.DataFrame, *, family_rows: int = FAMILY_ROWS, chapter_column: bool = False
                  ) -> pd.DataFrame:
    """The tests as a reader sees them: one row per test, or one row per family with more than
    ``family_rows`` tests (its count, smallest p and rejections). Adjusted columns appear when
    ``tests`` has them (after :func:`adjust_tests`), else they say the run adjusts them at the end."""
    adjusted = "p_holm" in tests.columns
    rows = []
    families = tests["family"].fillna("")
    done = set()
    for i, t in tests.iterrows():
        fam = families[i]
        key = (t["chapter"], fam)
        members = tests[(families == fam) & (tests["chapter"] == t["chapter"])] if fam else None
        if fam and len(members) > family_rows:
            if key in done:
                continue
            done.add(key)
            row = {"test": f"{len(members)} tests: {fam}", "null hypothesis": str(t["null"] or ""),
                   "n": str(t["n"] or ""), "statistic": "", "p": f"min {p_value(members['p_value'].min())}"}
            if adjusted:
                row["Holm (report)"] = f"{int(members['rejected_holm'].sum())} rejected, min {p_value(members['p_holm'].min())}"
                row["BH (report)"] = f"{int(members['rejected_bh'].sum())} rejected, min {p_value(members['p_bh'].min())}"
        else:
            stat = t["statistic"]
            row = {"test": f"{t['name']}: {t['test']}", "null hypothesis": str(t["null"] or ""), "n": str(t["n"] or ""),
                   "statistic": "" if stat is None or not np.isfinite(stat) else f"{stat:.4g}", "p": p_value(t["p_value"])}
            if adjusted:
                row["Holm (report)"] = p_value(t["p_holm"]) + (" *" if t["rejected_holm"] else "")
                row["BH (report)"] = p_value(t["p_bh"]) + (" *" if t["rejected_bh"] else "")
        if not adjusted:
            row["adjusted"] = "at the end of the run (see Statistical rigor)"
        if chapter_column:
            row = {"chapter": t["chapter"], **row}
        rows.append(row)
    return pd.DataFrame(rows)


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
