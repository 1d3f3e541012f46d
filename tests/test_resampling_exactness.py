"""The fast paths of the paired statistics give the same numbers as the slow ones they replace, bit for bit: the
sampled sign-flip test as scipy's ``permutation_test`` (the same draws), the node-classification aggregates of many
bootstrap draws at once as the aggregate of each drawn table."""
import numpy as np
import pandas as pd
import pytest

from embeval_report.metrics import classification as nc
from embeval_report.metrics import paired


@pytest.mark.parametrize("n, kind, resamples", [(14, "normal", 4999), (40, "ties", 4999), (301, "rounded", 999),
                                                (1200, "normal", 999), (2000, "ties", 499)])
def test_sign_flip_p_is_scipys(n, kind, resamples):
    rng = np.random.default_rng(n)
    d = {"normal": rng.normal(0.05, 1, n), "ties": rng.integers(-1, 2, n).astype(float),
         "rounded": np.round(rng.normal(0.1, 0.3, n), 2)}[kind]  # ties: accuracy differences, many equal means
    for seed in (0, 7):
        assert paired._sign_flip_p(d, resamples, seed) == paired._permutation_p(d, resamples, seed)


def test_sign_flips_drawn_once_serve_the_next_metric_of_the_same_units():
    """The metrics of one comparison share units and seed: the second test reads the first one's flips (kept packed)
    and still equals scipy's, ties at the threshold included (an integer-valued difference: hits@k)."""
    rng = np.random.default_rng(3)
    n = 700
    first, second = rng.normal(0.02, 1, n), rng.integers(-1, 2, n).astype(float)
    paired._FLIP_CACHE.clear()
    assert paired._sign_flip_p(first, 999, 5) == paired._permutation_p(first, 999, 5)
    assert (5, n, 999) in paired._FLIP_CACHE
    assert paired._sign_flip_p(second, 999, 5) == paired._permutation_p(second, 999, 5)


def test_an_exact_boot_gives_the_same_draws_in_large_batches():
    """``boot_exact``: the paired bootstrap calls the boot on hundreds of draws at once, the values of the few-draw
    calls bit for bit."""
    rng = np.random.default_rng(4)
    a, b = _units(rng, n=3000), _units(rng, n=3000)
    small = paired.resampled_values([a, b], nc.fold_macro_f1, boot=nc.fold_macro_f1_weighted, n_resamples=300,
                                    rng=np.random.default_rng(1))
    large = paired.resampled_values([a, b], nc.fold_macro_f1, boot=nc.fold_macro_f1_weighted, boot_exact=True,
                                    n_resamples=300, rng=np.random.default_rng(1))
    assert np.array_equal(small, large)


def _units(rng, n=180, folds=5, classes=4):
    y = rng.integers(0, classes, n)
    y_pred = np.where(rng.random(n) < 0.6, y, rng.integers(0, classes + 1, n))  # a class only predicted, too
    return pd.DataFrame({"fold": rng.permutation(np.arange(n) % folds), "y": y, "y_pred": y_pred,
                         "correct": (y == y_pred).astype(float)})


@pytest.mark.parametrize("fn, boot", [(nc.fold_accuracy, nc.fold_accuracy_weighted),
                                      (nc.fold_macro_f1, nc.fold_macro_f1_weighted)])
def test_node_classification_aggregates_of_many_draws_at_once(fn, boot):
    rng = np.random.default_rng(3)
    for t in (_units(rng), _units(rng, n=23, folds=5, classes=6)):  # small: draws miss whole folds and classes
        slow = paired.resampled_values([t], fn, n_resamples=100, rng=np.random.default_rng(1))
        fast = paired.resampled_values([t], fn, boot=boot, n_resamples=100, rng=np.random.default_rng(1))
        np.testing.assert_array_equal(fast, slow)
