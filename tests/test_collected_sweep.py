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
from embeval_report.kernels import sweep
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
    if collected:  # these sets are smaller and more crowded than those the sweep takes by itself (test_when_it_pays)
        monkeypatch.setattr(sweep, "COLLECT_MIN_ROWS", 0)
        monkeypatch.setattr(sweep, "KEPT16_PER_MAC", np.inf)
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
    monkeypatch.setattr(dv, "CANDIDATES", "bf16")
    rng = np.random.default_rng(4)
    X = (rng.standard_normal((20, 64))[rng.integers(0, 20, 3000)] + rng.standard_normal((3000, 64)) + 1.5
         ).astype(np.float32)
    scored = []
    best_of = sweep._best_of
    monkeypatch.setattr(sweep, "_best_of", lambda k, r, *a: (scored.append(len(r)), best_of(k, r, *a))[1])
    _sweep(X, True, monkeypatch)
    assert 2 * 10 * len(X) <= sum(scored) < 2 * 12 * len(X)  # two lists of k = 10


def _anisotropic(n: int, d: int, common: float, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((20, d))[rng.integers(0, 20, n)] * 0.5 + rng.standard_normal((n, d))
    return (X + common * rng.standard_normal(d)).astype(np.float32)


def test_when_it_pays(monkeypatch):
    """The collected sweep runs only where it pays: a set of fewer than COLLECT_MIN_ROWS rows merges its lists tile
    by tile, and so does a set whose rows would keep more entries each in the bfloat16 pass than KEPT16_PER_MAC allows
    (a strong common direction: the nearest cosines crowd within a bfloat16 product's error), with the same lists."""
    monkeypatch.setattr(dv, "cpu_has_bf16", lambda: True)  # the device's own bfloat16 product (not forced)
    monkeypatch.setattr(nb, "SMALL_SEARCH_MACS", 0)
    X = _anisotropic(1500, 48, 0.0)
    graph_cache.clear_memory()
    stats = {}
    nb.self_sweep(X, {"cosine": (10, None)}, device="cpu", desc=None, potential=True, stats=stats)
    assert stats["sweep"] == "pool"  # fewer rows than COLLECT_MIN_ROWS

    monkeypatch.setattr(sweep, "COLLECT_MIN_ROWS", 0)
    monkeypatch.setattr(sweep, "KEPT16_PER_MAC", 64 / (1500 * 48))  # 64 entries a row on these sets
    crowded = _anisotropic(1500, 48, 4.0)
    found = {}
    for name, Y in (("clustered", X), ("crowded", crowded)):
        graph_cache.clear_memory()
        stats = {}
        found[name] = nb.self_sweep(Y, {"cosine": (10, None)}, device="cpu", desc=None, potential=True,
                                    stats=stats)["cosine"]
        assert stats["sweep"] == ("collected" if name == "clustered" else "pool"), name
    old, _, _ = _sweep(crowded, False, monkeypatch)
    np.testing.assert_array_equal(found["crowded"][0], old["cosine"][0])


def test_the_estimate_of_the_bfloat16_pass_is_close(monkeypatch):
    """kept16_per_row, from sampled rows, is at most the entries the bfloat16 pass keeps a row and more than half
    of them (the pass's limit rises to the row's K-th as it reads the row)."""
    monkeypatch.setattr(sweep, "SAMPLE_ROWS", 2000)  # every row: the estimate's own error only
    for common in (0.0, 1.0, 4.0):
        X = nb.unit_rows(torch.from_numpy(_anisotropic(2000, 48, common)).double()).float().numpy()
        search = nb._Sweep(X, X, [(10, None)], "cosine", True, torch.device("cpu"), None, None, dv.BF16)
        kept = []
        search.on_block = lambda s, blk, entries: kept.append(len(entries[0]))  # the plain search's kept entries
        estimate = sweep.kept16_per_row(search, 10)
        search.run()
        actual = sum(kept) / len(X)
        assert actual / 2 < estimate <= actual, (common, estimate, actual)


def test_a_crowded_plain_search_takes_float32_products(monkeypatch):
    """A plain cosine search whose rows would keep more entries each on bfloat16 products than KEPT16_PER_MAC allows takes
    float32 products (about k a row): the same lists and scores as the bfloat16 pass, for the set itself and for
    queries; a clustered set keeps its bfloat16 pass."""
    monkeypatch.setattr(dv, "cpu_has_bf16", lambda: True)  # the device's own bfloat16 product (not forced)
    monkeypatch.setattr(nb, "SMALL_SEARCH_MACS", 0)
    crowded, clustered = _anisotropic(1500, 48, 4.0), _anisotropic(1500, 48, 0.0)
    queries = crowded[:300] + 0.01 * np.random.default_rng(2).standard_normal((300, 48)).astype(np.float32)
    gate = 64 / (1500 * 48)  # 64 entries a row on these sets
    for name, X, Q in (("crowded", crowded, None), ("crowded queries", crowded, queries),
                       ("clustered", clustered, None)):
        found = {}
        for limit in (gate, np.inf):
            monkeypatch.setattr(sweep, "KEPT16_PER_MAC", limit)
            graph_cache.clear_memory()
            stats = {}
            found[limit] = nb.knn(X, 10, queries=Q, device="cpu", desc=None, stats=stats)
            assert stats["product"] == ("fp32" if limit != np.inf and name != "clustered" else "bf16"), (name, limit)
        (a, av), (b, bv) = found.values()
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(av, bv)


@pytest.mark.parametrize("name", ["anisotropic", "clustered", "duplicated"])
def test_mutual_proximitys_column_bound_in_the_collected_sweep_keeps_the_lists(name, monkeypatch):
    """The collected sweep scores a mutual-proximity entry only where its column can reach the row's k-th score too
    (log Φ(z_y) ≥ τ, the z of the row's limit): fewer entries scored in float64, the same lists and scores as without
    the column bound and as the tile sweep's."""
    monkeypatch.setattr(dv, "CANDIDATES", "bf16")
    rng = np.random.default_rng(8)
    X = {"anisotropic": _anisotropic(1200, 48, 1.0), "clustered": _anisotropic(1200, 48, 0.0, seed=6),
         "duplicated": np.repeat(rng.standard_normal((300, 32)), 4, 0) + 0.5}[name].astype(np.float32)
    found, scored = {}, {}
    limit_block, exact = sweep._limit_block, hr._MutualProximity.exact
    for bound in (True, False):
        def no_column_bound(s, blk, entries, plans, limits, corpus64, zs, csls):
            limit_block(s, blk, entries, plans, limits, corpus64, zs, csls)
            for z in zs:
                if z is not None:
                    z[s:s + len(blk.q)] = -torch.inf  # every column passes
        monkeypatch.setattr(sweep, "_limit_block", limit_block if bound else no_column_bound)
        scored[bound] = 0

        def counted(self, rows, cols, cos64, _b=bound):
            scored[_b] += cos64.numel()
            return exact(self, rows, cols, cos64)
        monkeypatch.setattr(hr._MutualProximity, "exact", counted)
        found[bound], stats, _ = _sweep(X, True, monkeypatch)
        assert stats["sweep"] == "collected"
    monkeypatch.setattr(hr._MutualProximity, "exact", exact)
    old, _, _ = _sweep(X, False, monkeypatch)
    assert scored[True] < scored[False]
    for graph in ("cosine", "mutual_proximity"):
        for got in (found[True], old):
            np.testing.assert_array_equal(got[graph][0], found[False][graph][0])
            np.testing.assert_array_equal(got[graph][1], found[False][graph][1])


def test_the_limits_pass_keeps_each_rows_largest_products_only(monkeypatch):
    """The bfloat16 pass that sets the limits keeps each row's K largest products (K: three times the longest list
    with mutual proximity), not every entry within the products' error of them (on a set of 50,000 x 384, 46 entries a
    row against the 159 of the pass with the error's slack): a subset of that pass's entries, and the same lists as the
    tile sweep's."""
    monkeypatch.setattr(dv, "CANDIDATES", "bf16")
    X = _anisotropic(1500, 48, 1.0)
    K = 3 * 10
    kept, limit_block = [], sweep._limit_block

    def counted(s, blk, entries, *a):
        kept.append(len(entries[0]))
        assert int(torch.bincount(entries[0], minlength=len(blk.q)).min()) >= K  # K entries a row set its limits
        return limit_block(s, blk, entries, *a)
    monkeypatch.setattr(sweep, "_limit_block", counted)
    new, stats, _ = _sweep(X, True, monkeypatch)
    assert stats["sweep"] == "collected"
    tight = sum(kept) / len(X)
    search = nb._Sweep(X, X, [(K, None)], "cosine", True, torch.device("cpu"), None, None, dv.BF16)
    slack = []
    search.on_block = lambda s, blk, entries: slack.append(len(entries[0]))
    search.run()
    assert K <= tight < sum(slack) / len(X), (tight, sum(slack) / len(X))
    old, _, _ = _sweep(X, False, monkeypatch)
    for graph in ("cosine", "mutual_proximity"):
        np.testing.assert_array_equal(new[graph][0], old[graph][0])
        np.testing.assert_array_equal(new[graph][1], old[graph][1])


def test_the_running_k_largest_merge_only_new_values_above_the_kth():
    """candidates._merged_best (the kept-entry pass's running k largest group maxima) gives topk's values of the
    running list and the new values: rows without a new value above their k-th, rows with several, ties, -inf."""
    from embeval_report.kernels.candidates import _merged_best

    rng = np.random.default_rng(3)
    for k, width in ((1, 5), (10, 40), (33, 161)):
        best = torch.full((64, k), -torch.inf)
        for _ in range(12):
            new = torch.from_numpy(rng.choice([0.1, 0.5, 0.9, -np.inf], (64, width)).astype(np.float32)
                                   + rng.integers(0, 3, (64, width)).astype(np.float32) * rng.random((64, 1)).astype(
                                       np.float32))
            want = torch.topk(torch.cat([best, new], 1), k, dim=1).values
            best = _merged_best(best.clone(), new, k)
            assert torch.equal(best, want)
