"""Calibration of the findings (issue 42 item 6): every rule of every chapter on seeded clean and planted sets, and
the packaged MiniLM on real labelled texts.

Each set of ``tests/calibration_sets.py`` is written, loaded and computed in this process as a report computes it
(each chapter's ``compute`` in its context, the report-wide adjustment, the remedy checks, ``derive_findings``;
no notebooks): a clean set gives no finding at ``concerning`` or above (a diagnostic's ``note`` is fine), a planted
set the finding of its chapter and effect with the right kind, severity, subset and sign, and nothing else at
``concerning`` or above that the planted problem does not bring along. ``benchmarks/calibration.py`` runs the same
sets over ten seeds for the firing rates in docs/findings.md; here each runs once (seed 0, or the set's
``test_seed``).

The sets whose findings are known to be wrong, for a cause outside the rules this file's author could change, are
strict expected failures that say where the cause is: when it is fixed the test passes, and the mark goes.
"""
from __future__ import annotations

import re

import pytest

from calibration_sets import REAL_SETS, SETS, problems, run_set

#: misfires at the test's seed whose cause lies in a file other engineers own (issue 42), with the cause
KNOWN: dict[str, str] = {}


def _id(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _param(cs):
    marks = [pytest.mark.xfail(reason=KNOWN[cs.name], strict=True)] if cs.name in KNOWN else []
    return pytest.param(cs, id=_id(cs.name), marks=marks)


@pytest.mark.parametrize("cs", [_param(cs) for cs in SETS])
def test_calibration_set(cs, tmp_path):
    out = run_set(cs, tmp_path, seed=cs.test_seed)
    wrong = problems(cs, out)
    assert not wrong, f"{cs.name}: " + "\n".join(wrong)


def test_every_rule_has_a_planted_set():
    """Every effect a chapter declares and every rule the sets know has a planted set that must find it."""
    from embeval_report.chapters.registry import discover

    planted = {e.rule for cs in SETS for e in cs.expect}
    declared = {f"{c.name}: {e.name}" for c in discover() for e in c.effects}
    assert declared <= planted, declared - planted
    clean = {c for cs in SETS if cs.clean for c in cs.chapters}
    assert {c.split(": ")[0] for c in planted} <= clean  # each planted chapter also runs on a clean set


@pytest.mark.parametrize("cs", [pytest.param(cs, id=_id(cs.name)) for cs in REAL_SETS[:1]])
def test_minilm_on_real_labelled_text(cs, tmp_path):
    """The packaged all-MiniLM-L6-v2 on real labelled texts (Pang & Lee's polarity sentences): every chapter runs,
    the label can be read, and the report is problematic only with a problematic model finding behind it (its
    findings are printed: ``pytest -s``). The longer real sets (20 Newsgroups' posts, the text demo's Lee corpus)
    run in ``benchmarks/calibration.py --real``: embedding them is most of a minute of CPU."""
    out = run_set(cs, tmp_path, seed=0)
    print(f"\n{cs.name}: status {out.status}")
    for f in out.findings:
        print(f"  {f['severity']:<11} {f['kind']:<10} {f['chapter']}: {f['title']} | {f['sentence']}")
    assert all(status == "ok" for name, (status, _) in out.chapters.items() if name != "remedies"), out.chapters
    model = [f for f in out.findings if f["kind"] == "model"]
    assert out.status != "problematic" or any(f["severity"] == "problematic" for f in model)
    assert not any(f["chapter"] == "node_classification" and f["effect"] == "baselines" for f in model)
    assert all(f["severity"] in ("note", "concerning") for f in out.findings if f["kind"] == "diagnostic")
