"""CSLS ranked inside the set's collected sweep, with r of the sweep's own cosine graph (kernels.swept_csls): the same
lists, scores and k-occurrence as the separate CSLS search with that r, which then reads them from the cache."""
from __future__ import annotations

import numpy as np
import pytest

from embeval_report.context import CacheFolder
from embeval_report.kernels import device as dv
from embeval_report.kernels import graph_cache
from embeval_report.kernels import sweep
from embeval_report.kernels.rescoring import csls_key
from embeval_report.metrics import hubness_reduction as hr
from embeval_report.metrics.hubness_measures import k_occurrence


def _sets() -> dict:
    rng = np.random.default_rng(44)
    clustered = rng.standard_normal((12, 24))[rng.integers(0, 12, 900)] + rng.standard_normal((900, 24)) + 1.5
    copies = rng.standard_normal((800, 16))
    copies[np.r_[3, 200:230, 798]] = copies[3]  # 32 exact copies of one row, across blocks: tied cosines and r
    pairs = np.repeat(rng.standard_normal((300, 12)), 3, 0)  # every row three times: every score tied three ways
    ulps = np.repeat(rng.standard_normal((40, 8)), 20, 0)
    ulps = ulps + rng.integers(-3, 4, ulps.shape) * np.spacing(np.abs(ulps))  # near-ties 7 significant digits down
    common = rng.standard_normal(48)  # a strong common direction: mean cosine about 0.9, r crowded
    anisotropic = 0.35 * rng.standard_normal((1000, 48)) + common
    return {"gaussian": rng.standard_normal((700, 40)), "clustered": clustered, "copies": copies, "pairs": pairs,
            "near ties": ulps, "anisotropic": anisotropic, "spread r": np.vstack([clustered[:, :16] * 0.2,
                                                                                   rng.standard_normal((400, 16))])}


@pytest.fixture
def collected(monkeypatch):
    """The collected sweep for these small sets (on bfloat16 limits, emulated where the CPU has none)."""
    monkeypatch.setattr(dv, "CANDIDATES", "bf16")
    monkeypatch.setattr(sweep, "COLLECT_MIN_ROWS", 0)
    monkeypatch.setattr(sweep, "KEPT16_PER_MAC", np.inf)
    monkeypatch.setattr(sweep, "KEPT_PER_ROW", np.inf)


@pytest.mark.parametrize("entries", [1, 3])  # K = k entries a row (r's upper bound leans on the edge), or 3 k
@pytest.mark.parametrize("name", list(_sets()))
def test_csls_in_the_sweep_is_the_separate_csls_search(name, entries, collected, monkeypatch, enter):
    monkeypatch.setattr(sweep, "MP_ENTRIES", entries)
    X = _sets()[name].astype(np.float32)
    k = 10
    events = []
    enter(graph_cache=CacheFolder(min_k=k + 1, log=events.append))
    graph_cache.clear_memory()
    got = hr.reduced_knn(X, k, ("mutual_proximity", "csls"), with_cosine=True, neighborhood=k, device="cpu")
    assert sorted(got) == ["cosine", "csls", "mutual_proximity"]
    r = got["cosine"][1].astype(np.float64).mean(1)  # as the hubness chapter takes r

    events.clear()  # the hubness chapter's search with that r reads the swept lists
    read = hr.reduced_knn(X, k, ("csls",), r=r, device="cpu")["csls"]
    assert [(e["metric"], e["source"]) for e in events] == [(csls_key(r), "cache")]
    np.testing.assert_array_equal(read[0], got["csls"][0])

    graph_cache.clear_memory()  # the separate search (the bounded search on augmented rows)
    with_r = hr.reduced_knn(X, k, ("csls",), r=r, device="cpu")["csls"]
    assert events[-1]["source"] == "computed"
    np.testing.assert_array_equal(got["csls"][0], with_r[0])
    np.testing.assert_array_equal(got["csls"][1], with_r[1])
    np.testing.assert_array_equal(k_occurrence(got["csls"][0], len(X)), k_occurrence(with_r[0], len(X)))

    U = X.astype(np.float64)
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    S = 2 * (U @ U.T) - r[None, :]
    np.fill_diagonal(S, -np.inf)
    want = np.argsort(-S, axis=1, kind="stable")[:, :k]  # the float64 top-k, the lower index first among ties
    gotS, wantS = np.take_along_axis(S, got["csls"][0], 1), np.take_along_axis(S, want, 1)
    differ = got["csls"][0] != want
    assert np.all(np.abs(gotS - wantS)[differ] <= 1e-12), np.argwhere(differ)[:5]


def test_csls_of_a_shorter_neighbourhood_and_a_longer_stored_list(collected, enter):
    """r over the first 4 similarities of an 11-list (the cache's min_k), the CSLS list stored with 11 entries, read
    as 6."""
    X = _sets()["clustered"].astype(np.float32)
    enter(graph_cache=CacheFolder(min_k=11))
    graph_cache.clear_memory()
    got = hr.reduced_knn(X, 6, ("csls",), with_cosine=True, neighborhood=4, device="cpu")
    r = got["cosine"][1][:, :4].astype(np.float64).mean(1)
    assert graph_cache.stored_product(X, csls_key(r))[0].shape == (len(X), 11)
    graph_cache.clear_memory()
    want = hr.reduced_knn(X, 6, ("csls",), r=r, device="cpu")["csls"]
    np.testing.assert_array_equal(got["csls"][0], want[0])
    np.testing.assert_array_equal(got["csls"][1], want[1])


def test_csls_without_r_is_left_out_where_the_sweep_merges_tile_by_tile(enter):
    """A sweep that merges running lists (a small set) cannot rank CSLS by an r it has not made yet: the result has
    no CSLS graph and the cache no CSLS entry, and the cosine and mutual-proximity graphs are those without it."""
    X = _sets()["gaussian"].astype(np.float32)
    enter(graph_cache=CacheFolder(min_k=11))
    graph_cache.clear_memory()
    got = hr.reduced_knn(X, 10, ("mutual_proximity", "csls"), with_cosine=True, neighborhood=10, device="cpu")
    assert sorted(got) == ["cosine", "mutual_proximity"]
    graph_cache.clear_memory()
    plain = hr.reduced_knn(X, 10, ("mutual_proximity",), with_cosine=True, device="cpu")
    for name in plain:
        np.testing.assert_array_equal(got[name][0], plain[name][0])
    with pytest.raises(ValueError, match="neighbourhood"):
        hr.reduced_knn(X, 5, ("csls",), with_cosine=True, neighborhood=10, device="cpu")


def test_a_report_runs_hubness_on_the_swept_csls(tmp_path, monkeypatch):
    """In a run whose shared sweep is collected, the sweep ranks CSLS too and the hubness chapter reads it from the
    prepared cache (the same key: the same r), with the hubness numbers of a run that does not (the chapter's own
    search)."""
    import json

    from embeval_report.cli import main
    from embeval_report.kernels import neighbours as nb

    X = _sets()["clustered"].astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    docs, graphs = {}, {}
    for swept in (True, False):
        if swept:
            for name, value in (("COLLECT_MIN_ROWS", 0), ("KEPT16_PER_MAC", np.inf), ("KEPT_PER_ROW", np.inf)):
                monkeypatch.setattr(sweep, name, value)
            monkeypatch.setattr(dv, "CANDIDATES", "bf16")
        else:
            monkeypatch.setattr(nb, "_collects", lambda *a: False)
        out = tmp_path / str(swept)
        assert main(["run", str(tmp_path / "x.npy"), "--out", str(out), "--formats", "html", "--chapters",
                     "hubness", "--jobs", "1"]) == 0
        run = json.loads((out / "run.json").read_text())
        assert ("csls" in run["neighbour_graph"]["products"]) is swept
        result = json.loads((out / "results" / "hubness.json").read_text())
        graphs[swept] = {e["metric"]: e["source"] for e in result["info"]["neighbour_graphs"]}
        docs[swept] = json.loads((out / "metrics.json").read_text())["chapters"]["hubness"]["metrics"]
        graph_cache.clear_memory()
    key = next(m for m in graphs[True] if m.startswith("csls-r"))
    assert graphs[True][key] == "cache" and graphs[False][key] == "computed"
    assert docs[True] == docs[False]
