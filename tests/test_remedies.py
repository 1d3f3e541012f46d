"""Remedy checks (issue 42): the remedies against their closed forms, and which ones a report checks."""
import numpy as np
import pytest

from embeval_report.chapters import remedies as chapter
from embeval_report.chapters.registry import discover
from embeval_report.metrics.remedies import fit_remedy, remedied_rows


@pytest.fixture(scope="module")
def cone():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((400, 12)) * np.linspace(3, 0.2, 12) + 4.0).astype(np.float32)


def test_centring_abtt_and_whitening_against_their_closed_forms(cone):
    X = cone.astype(np.float64)
    mu = X.mean(0)
    np.testing.assert_allclose(remedied_rows(cone, fit_remedy(cone, "centring")), X - mu, atol=1e-4)
    # all-but-the-top (Mu et al. 2018): centred, then the top D principal directions projected out
    U = np.linalg.svd(X - mu, full_matrices=False)[2][:2].T
    abtt = fit_remedy(cone, "all-but-the-top", removed=2)
    assert abtt.detail == "D = 2"
    np.testing.assert_allclose(remedied_rows(cone, abtt), (X - mu) - (X - mu) @ U @ U.T, atol=1e-4)
    # ZCA whitening: the remedied set's covariance is the identity (no eigenvalue here is under the floor)
    Y = remedied_rows(cone, fit_remedy(cone, "whitening")).astype(np.float64)
    np.testing.assert_allclose(np.cov(Y.T, bias=True), np.eye(12), atol=1e-3)
    # a set of one repeated row leaves nothing to score on
    assert fit_remedy(np.ones((5, 3), np.float32), "centring") is None


def test_each_flagged_diagnostic_gets_its_standard_remedy_unless_all_are_asked_for():
    chapters = discover()
    flagged = {"isotropy": ["apcs"], "hubness": ["k_skewness"]}
    # anisotropy: centring and all-but-the-top (a dominant direction centring keeps); hubness: centring
    assert chapter._checked(flagged, chapters, "standard") == ["centring", "all-but-the-top"]
    assert chapter._checked({"hubness": ["k_skewness"]}, chapters, "standard") == ["centring"]
    assert chapter._checked({**flagged, "collapse": ["x"]}, chapters, "standard") == ["centring", "all-but-the-top",
                                                                                       "whitening"]
    assert chapter._checked(flagged, chapters, "all") == ["centring", "all-but-the-top", "whitening"]
    assert [o.name for o in chapter.CHAPTER.options] == ["mde", "remedies"]


def test_a_probe_that_standardises_its_features_is_not_refitted_after_centring(monkeypatch):
    """Centring cannot change the node-classification probe (it standardises on the training folds): the scorer
    says so, the units on the centred set equal the original ones, and the remedy check pairs the recorded units
    with themselves without scoring again."""
    from types import SimpleNamespace

    import pandas as pd

    from embeval_report.chapters import node_classification
    from embeval_report.metrics import classification as nc
    from embeval_report.metrics.scoring import Aggregate, TaskScorer

    rng = np.random.default_rng(3)
    y = np.repeat(["a", "b", "c"], 60)
    X = (rng.standard_normal((180, 6)) + 1.5 * (y == "a")[:, None] + 5.0).astype(np.float32)
    plan = nc.probe_plan(nc.as_labelset(y, len(X), 5, "label"), seed=0)
    centred = remedied_rows(X, fit_remedy(X, "centring"))
    assert "centring" in node_classification.SCORER.invariant
    pd.testing.assert_frame_equal(nc.probe_units(X, plan), nc.probe_units(centred, plan))

    units = pd.DataFrame({"u": ["x", "y", "z"], "v": [1.0, 0.0, 1.0]})

    def no_scoring(*_):
        raise AssertionError("scored again")

    scorer = TaskScorer(unit="units", key="u", columns=("v",), aggregates=(Aggregate("v", mean_of="v"),),
                        inputs=lambda *_: None, plan=lambda *_: {}, score=no_scoring,
                        invariant={"centring": "undone by the protocol"})
    monkeypatch.setattr(chapter, "read_units", lambda *_: units)
    ctx = SimpleNamespace(es=None, side=None, settings=None, rec=SimpleNamespace(results_dir="."), level=0.95, seed=0)
    spec = SimpleNamespace(name="task", title="Task", scorer=scorer)
    record = {"info": {"units": {}}, "metrics": {"v": {"label": "V"}}}
    planned = chapter._task_plan(ctx, spec, record, {})
    rows = chapter._task_rows(ctx, spec, record, SimpleNamespace(name="centring"), None, planned)
    assert [(r["metric"], r["result"].diff, r["result"].n) for r in rows] == [("v", 0.0, 3)]
    with pytest.raises(AssertionError, match="scored again"):
        chapter._task_rows(ctx, spec, record, SimpleNamespace(name="whitening", apply=None), None, planned)


def test_the_remedy_checks_score_only_the_outcomes_they_compare():
    """k-means' re-scoring for a remedy reads the partition (ARI, NMI, AMI), not the silhouettes (geometry, not
    compared): ``task_units`` gives the same partition as the full scorer and leaves the silhouettes NaN."""
    from embeval_report.chapters import clustering
    from embeval_report.metrics import clustering as cl
    from embeval_report.metrics.labels import prepare_labels

    rng = np.random.default_rng(2)
    y = np.repeat(["a", "b", "c"], 50)
    X = (rng.standard_normal((150, 5)) + 3.0 * (y[:, None] == np.array(["a", "b", "c", "a", "b"]))).astype(np.float32)
    plan = cl.cluster_plan(prepare_labels(y, min_class_size=5, column="label", n=len(X)), seed=0)
    scorer = clustering.SCORER
    full, task = scorer.units(X, None, plan), scorer.task_units(X, None, plan)
    assert list(full.columns) == list(task.columns)
    assert full[["entity", "y", "cluster"]].equals(task[["entity", "y", "cluster"]])
    assert full["silhouette"].notna().any() and task[["silhouette", "label_silhouette"]].isna().all().all()
    assert all(not a.task for a in scorer.aggregates if a.mean_of in ("silhouette", "label_silhouette"))
