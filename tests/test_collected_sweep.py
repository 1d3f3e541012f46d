"""The set's own sweep on bfloat16 limits and one float32 pass (kernels.sweep): the cosine and mutual-proximity lists
are the float64 top-k (exact ties: the lower index), and the potential is the tile sweep's bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import log_ndtr

from embeval_report.kernels import device as dv
from embeval_report.kernels import graph_cache
from embeval_report.kernels import neighbours as nb
from embeval_report.metrics import hubness_reduction as hr


def _sets():
    rng = np.random.default_rng(31)
    clustered = (rng.standard_normal((12, 24))[rng.integers(0, 12, 900)] + rng.standard_normal((900, 24)) + 1.5)
    copies = rng.standard_normal((1000, 16))
    copies[np.r_[3, 200:230, 998]] = copies[3]  # 32 exact copies of one row, across blocks
    ulps = rng.standard_normal((40, 8))
    ulps = np.repeat(ulps, 20, 0)
    ulps = ulps + rng.integers(-3, 4, ulps.shape) * np.spacing(np.abs(ulps))  # near-ties 7 significant digits down
    return {"clustered": clustered, "copies": copies, "near ties": ulps, "gaussian": rng.standard_normal((700, 40)),
            "five rows": rng.standard_normal((5, 3))}


def _sweep(X, collected: bool, monkeypatch) -> tuple[dict, dict, np.ndarray]:
    graph_cache.clear_memory()
    monkeypatch.setattr(nb, "_collects", nb._collects if collected else (lambda *a: False))
    mp = hr._MutualProximity(lambda: hr.cosine_mean_sd(X, device="cpu"), torch.device("cpu"))
    stats = {}
    k = min(10, len(X) - 2)
    found = nb.self_sweep(X, {"cosine": (k, None), "mutual_proximity": (k, mp)}, device="cpu", desc=None,
                          potential=True, stats=stats)
    return found, stats, nb.stored_product(X, nb.potential_key(nb.SWEEP_POTENTIAL_T))[0]


def _first_k(S: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-S, axis=1, kind="stable")[:, :k]


def _assert_top_k(idx, S, k, what):
    """``idx`` is the float64 top-k of S by row, the lower index first among equal scores; a position may differ
    only where the two scores agree to float64 summation order."""
    order = _first_k(S, k)
    got, want = np.take_along_axis(S, idx, 1), np.take_along_axis(S, order, 1)
    scale = np.abs(S[np.isfinite(S)]).max()
    differ = idx != order
    assert np.all(np.abs(got - want)[differ] <= 1e-12 * scale), (what, np.argwhere(differ)[:5])


@pytest.mark.parametrize("name", list(_sets()))
@pytest.mark.parametrize("tile", [(64, 160), (96, 4096), (2048, 4096)])
def test_the_collected_sweep_gives_the_float64_lists_and_the_same_potential(name, tile, monkeypatch):
    monkeypatch.setattr(dv, "CANDIDATES", "bf16")  # the bfloat16 limits, emulated where the CPU has no bfloat16
    monkeypatch.setattr(nb, "CPU_TILE", tile)
    monkeypatch.setattr(nb, "CPU_COLLECT_TILE", (tile[0], min(tile[1], 1024)))
    X = _sets()[name].astype(np.float32)
    k = min(10, len(X) - 2)
    new, stats, pot = _sweep(X, True, monkeypatch)
    assert stats["sweep"] == "collected" and stats["product"] == "bf16+fp32"
    old, old_stats, old_pot = _sweep(X, False, monkeypatch)
    assert old_stats["sweep"] == "pool"
    np.testing.assert_array_equal(pot, old_pot)  # the same tiles in the same order: the same sums

    U = X.astype(np.float64)
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    S = U @ U.T
    np.fill_diagonal(S, -np.inf)
    idx, val = new["cosine"]
    _assert_top_k(idx, S, k, "cosine")
    np.testing.assert_allclose(val, np.take_along_axis(S, idx, 1), rtol=2e-7, atol=1e-7)
    np.testing.assert_array_equal(idx, old["cosine"][0])  # the tile sweep's proven lists

    mu, sd = hr.cosine_mean_sd(X, device="cpu")
    sd = np.maximum(sd, 1e-12)
    with np.errstate(invalid="ignore"):
        logmp = log_ndtr((S - mu[:, None]) / sd[:, None]) + log_ndtr((S - mu[None, :]) / sd[None, :])
    np.fill_diagonal(logmp, -np.inf)
    idx, val = new["mutual_proximity"]
    _assert_top_k(idx, logmp, k, "mutual proximity")
    np.testing.assert_allclose(val, np.take_along_axis(logmp, idx, 1), rtol=1e-5, atol=1e-6)  # log MP, float32


def test_float64_scoring_reads_about_k_entries_a_row(monkeypatch):
    """The float32 pass keeps every entry within the bfloat16 limits (tens a row on a clustered set); the float64
    scoring reads only those within the float32 bound of each list's end: about k a row per list."""
    from embeval_report.kernels import sweep

    monkeypatch.setattr(dv, "CANDIDATES", "bf16")
    rng = np.random.default_rng(4)
    X = (rng.standard_normal((20, 64))[rng.integers(0, 20, 3000)] + rng.standard_normal((3000, 64)) + 1.5
         ).astype(np.float32)
    scored = []
    best_of = sweep._best_of
    monkeypatch.setattr(sweep, "_best_of", lambda k, r, *a: (scored.append(len(r)), best_of(k, r, *a))[1])
    _sweep(X, True, monkeypatch)
    assert 2 * 10 * len(X) <= sum(scored) < 2 * 12 * len(X)  # two lists of k = 10
