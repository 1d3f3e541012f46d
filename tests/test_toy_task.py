"""A toy task chapter, declared in-process with a task scorer (docs/architecture.md, "Adding a task chapter"): with
nothing else written, two sets' unit tables pair by :func:`~embeval_report.metrics.scoring.compare_units` (what
``compare`` and ``--baseline`` call), a remedy is re-scored on the same plan (what the Remedy checks chapter does),
and a copy of the set with one unit's vector changed differs from the set in that unit only."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from embeval_report.chapters.declaration import ChapterSpec
from embeval_report.metrics.remedies import fit_remedy, remedied_rows
from embeval_report.metrics.scoring import Aggregate, TaskScorer, compare_units, plan_fingerprint

# --------------------------------------------------------------------------- the toy task
# Nearest-centroid accuracy: a seeded half of each label's entities (the plan, from the ids and the seed only)
# make the label centroids; every other entity is a unit, correct when its nearest centroid (cosine) is its label's.


def toy_inputs(es, side, settings):
    return SimpleNamespace(ids=np.asarray(es.ids, dtype=object), labels=np.asarray(es.metadata["label"], dtype=object))


def toy_plan(inputs, settings):
    rng = np.random.default_rng(settings.seed)
    reference = np.zeros(len(inputs.ids), bool)
    for label in sorted(set(inputs.labels)):
        rows = np.flatnonzero(inputs.labels == label)
        reference[rng.choice(rows, len(rows) // 2, replace=False)] = True
    return {"seed": settings.seed, "reference": np.flatnonzero(reference), "units": np.flatnonzero(~reference)}


def toy_score(X, inputs, plan) -> pd.DataFrame:
    X = np.asarray(X, np.float64)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    names = sorted(set(inputs.labels))
    ref = plan["reference"]
    centroids = np.stack([U[ref][inputs.labels[ref] == name].mean(0) for name in names])
    rows = plan["units"]
    predicted = np.asarray(names, dtype=object)[np.argmax(U[rows] @ centroids.T, axis=1)]
    return pd.DataFrame({"entity": inputs.ids[rows], "label": inputs.labels[rows],
                         "correct": (predicted == inputs.labels[rows]).astype(float)})


def balanced_accuracy(table: pd.DataFrame) -> float:
    return float(table.groupby("label")["correct"].mean().mean())


def balanced_accuracy_boot(table: pd.DataFrame, W: np.ndarray) -> np.ndarray:
    """:func:`balanced_accuracy` under each row of unit weights ``W`` (resamples × units), all at once."""
    correct = table["correct"].to_numpy(float)
    per_label = [(W @ (correct * m)) / (W @ m) for m in (table["label"].to_numpy() == name for name in
                                                         sorted(set(table["label"])))]
    with np.errstate(invalid="ignore"):
        return np.mean(per_label, axis=0)


TOY_SCORER = TaskScorer(
    unit="entities", key="entity", columns=("correct", "label"),
    aggregates=(Aggregate("toy_accuracy", mean_of="correct"),
                Aggregate("toy_balanced_accuracy", fn=balanced_accuracy, boot=balanced_accuracy_boot,
                          unit_column="correct")),
    inputs=toy_inputs, plan=toy_plan, score=toy_score)

TOY = ChapterSpec(name="toy_task", title="Toy task", order=93, description="Nearest-centroid accuracy.",
                  requires=("vectors", "metadata.label"), scorer=TOY_SCORER)


# --------------------------------------------------------------------------- a set

def toy_set(n_per_label: int = 20, d: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(["a", "b", "c"], n_per_label).astype(object)
    centres = 4.0 * np.eye(3, d)
    X = (centres[np.searchsorted(["a", "b", "c"], labels)] + 0.3 * rng.standard_normal((len(labels), d)) + 1.0)
    ids = np.array([f"e{i}" for i in range(len(labels))], dtype=object)
    return SimpleNamespace(ids=ids, metadata=pd.DataFrame({"label": labels}, index=ids), vectors=X.astype(np.float32))


SETTINGS = SimpleNamespace(seed=3)


def scored(es, X=None):
    scorer = TOY.scorer
    inputs = scorer.inputs(es, None, SETTINGS)
    plan = scorer.plan(inputs, SETTINGS)
    return scorer.units(es.vectors if X is None else X, inputs, plan), inputs, plan


# --------------------------------------------------------------------------- the tests

def test_one_changed_unit_changes_that_unit_only():
    es = toy_set()
    a, inputs, plan = scored(es)
    assert a["correct"].all()  # well-separated labels: every unit right
    unit = a["entity"].iloc[4]
    row = int(np.flatnonzero(es.ids == unit)[0])
    other = "b" if es.metadata["label"].iloc[row] != "b" else "c"
    changed = es.vectors.copy()
    changed[row] = es.vectors[np.flatnonzero(es.metadata["label"].to_numpy() == other)].mean(0)  # among the others
    b, _, plan_b = scored(es, changed)
    assert plan_fingerprint(plan_b) == plan_fingerprint(plan)  # the plan never reads the vectors
    joined = a.merge(b, on="entity", suffixes=("_a", "_b"))
    moved = joined.loc[joined["correct_a"] != joined["correct_b"], "entity"].tolist()
    assert moved == [unit]
    # compare_units pairs the two tables unit by unit: the per-unit differences are zero but for that unit
    result, differences = compare_units(a, b, key="entity", metric="toy_accuracy",
                                        aggregate=TOY.scorer.aggregate("toy_accuracy"), units="entities")
    assert result.n == len(a) and np.count_nonzero(differences) == 1
    assert float(np.asarray(differences)[np.flatnonzero(a["entity"] == unit)[0]]) == -1.0
    assert TOY.scorer.values(b)["toy_accuracy"] == pytest.approx(1 - 1 / len(a))


def test_compare_pairs_every_aggregate_of_two_models():
    """What ``compare`` and ``--baseline`` do with a task chapter's units: each aggregate paired over the shared
    units, a mean per unit, a whole-table metric by the paired bootstrap of its function."""
    es = toy_set()
    a, _, _ = scored(es)
    noisy = es.vectors + 2.5 * np.random.default_rng(9).standard_normal(es.vectors.shape).astype(np.float32)
    b, _, _ = scored(es, noisy)
    for agg in TOY.scorer.aggregates:
        result, differences = compare_units(a, b, key=TOY.scorer.key, metric=agg.metric, direction=agg.direction,
                                            aggregate=agg, seed=0, units=TOY.scorer.unit)
        assert result.n == len(a)
        assert (differences is None) == (not agg.is_mean)
    assert TOY.scorer.values(b)["toy_accuracy"] < TOY.scorer.values(a)["toy_accuracy"]


def test_a_remedy_is_rescored_on_the_same_plan():
    """What the Remedy checks chapter does with every chapter that declares a scorer: the remedy fitted on the set,
    the task scored again on the remedied rows with the same plan, paired with the task's own units."""
    es = toy_set()
    original, inputs, plan = scored(es)
    remedy = fit_remedy(es.vectors, "centring", device="cpu")
    remedied = TOY.scorer.units(remedied_rows(es.vectors, remedy), inputs, TOY.scorer.plan(inputs, SETTINGS))
    assert plan_fingerprint(TOY.scorer.plan(inputs, SETTINGS)) == plan_fingerprint(plan)
    result, differences = compare_units(original, remedied, key="entity", metric="toy_accuracy",
                                        aggregate=TOY.scorer.aggregate("toy_accuracy"), units="entities")
    assert result.n == len(original) and len(differences) == len(original)
