"""The re-scoring of a kept-entry pass in a fixed number of batched calls, and batched steps sized from the device's
free memory (a fake size here): what a GPU does, run on the CPU, with the same lists as the CPU's own rounds."""
import numpy as np
import pytest
import torch

from embeval_report.kernels import candidates as cd
from embeval_report.kernels import device as dv
from embeval_report.kernels import graph_cache, knn
from embeval_report.kernels import neighbours as nb


@pytest.fixture(autouse=True)
def _fresh_cache():
    graph_cache.clear_memory()
    yield
    graph_cache.clear_memory()


def _dense_ties(seed=50):
    """Rows in a few very tight clusters: many entries within the bfloat16 bound of each row's k-th product, with
    counts spread over a wide range, so that the re-scoring needs several widths."""
    rng = np.random.default_rng(seed)
    sizes = [30, 60, 120, 240, 480, 570]  # each row's count: about its cluster's size (all within any bound)
    centres = np.repeat(rng.standard_normal((len(sizes), 32)), sizes, axis=0)
    X = centres + 1e-4 * rng.standard_normal(centres.shape)
    return X[rng.permutation(len(X))].astype(np.float32)


@pytest.mark.parametrize("product", ["bf16", "tf32", "tf32x3"])
def test_rescoring_takes_a_fixed_number_of_calls_with_the_same_lists(product, monkeypatch):
    """With at most two calls after the first (as on a GPU, :data:`~.candidates.DEVICE_ROUNDS`) every block's rows
    are re-scored in at most three calls, however their counts spread, and the lists are those of the CPU's rounds
    (widths growing by half), which take more calls here."""
    monkeypatch.setattr(dv, "CANDIDATES", product)
    monkeypatch.setattr(nb, "CPU_COLLECT_TILE", (500, 400))
    monkeypatch.setattr(nb, "CPU_TILE", (500, 400))
    X = _dense_ties()
    calls = []
    real = cd._rescore_lists

    def counted(*a, **kw):
        calls.append(len(a[1]))
        return real(*a, **kw)

    monkeypatch.setattr(cd, "_rescore_lists", counted)
    results = {}
    for rounds in ({}, {"cpu": 2}):
        monkeypatch.setattr(cd, "DEVICE_ROUNDS", rounds)
        graph_cache.clear_memory()
        calls.clear()
        with dv.exact_matmul():
            results[len(rounds)] = knn(X, 10, device="cpu", desc=None)
        results[f"calls{len(rounds)}"] = len(calls)
    assert np.array_equal(results[0][0], results[1][0]) and np.array_equal(results[0][1], results[1][1])
    blocks = -(-len(X) // 500)
    assert results["calls1"] <= 3 * blocks
    assert results["calls0"] > results["calls1"]  # counts from 30 to 570: the CPU's rounds take more calls


def test_rescore_widths_cover_every_count_within_the_rounds():
    """f^r reaches c_max / c_min, so r calls of widths floor(f c_min) + 1 take every count; the CPU's f is 1.5."""
    cpu = torch.device("cpu")
    assert cd._rescore_widths(torch.tensor([15, 900]), cpu) == 1.5
    for lo, hi, r in ((15, 16, 2), (15, 900, 2), (11, 100_000, 2), (20, 21, 1), (17, 5000, 3)):
        need = torch.tensor(sorted({lo, hi, (lo + hi) // 2, lo + 1}))
        f = cd._rescore_widths(need, torch.device("cuda")) if r == 2 else None
        if f is None:
            old = dict(cd.DEVICE_ROUNDS)
            cd.DEVICE_ROUNDS["cuda"] = r
            try:
                f = cd._rescore_widths(need, torch.device("cuda"))
            finally:
                cd.DEVICE_ROUNDS.clear()
                cd.DEVICE_ROUNDS.update(old)
        more, rounds = need, 0
        while len(more):
            W = int(int(more.min()) * f) + 1
            more = more[more > W]
            rounds += 1
        assert rounds <= r, (lo, hi, r)


def test_gpu_steps_are_sized_from_the_free_memory(monkeypatch):
    """On a GPU a batched step takes GPU_STEP_SHARE of the free memory (never less than a chunk budget); on the CPU
    the chunk budget, as before. A re-scoring given the larger budget makes one call of all its rows, with the
    same lists as in many calls."""
    monkeypatch.setattr(dv, "free_memory", lambda device: 80 * 2**30)
    assert dv.step_budget(torch.device("cuda")) == int(dv.GPU_STEP_SHARE * 80 * 2**30)
    assert dv.step_budget(torch.device("cpu")) == dv.chunk_budget()
    monkeypatch.setattr(dv, "free_memory", lambda device: 2**20)
    assert dv.step_budget(torch.device("cuda")) == dv.chunk_budget()

    rng = np.random.default_rng(51)
    X = torch.as_tensor(rng.standard_normal((400, 16)).astype(np.float32))
    rows = cd._Rows64(X, True)
    q64 = rows[torch.arange(300)]
    cand = torch.as_tensor(rng.integers(0, 400, (300, 50)))
    counts = torch.as_tensor(rng.integers(1, 51, 300))
    calls = []
    real = cd._exact_scores
    monkeypatch.setattr(cd, "_exact_scores", lambda *a, **k: (calls.append(len(a[3])), real(*a, **k))[1])
    monkeypatch.setattr(cd, "step_budget", lambda device: 50 * 16 * 8 * 3 * 20)  # 20 rows a call
    small = cd._rescore_lists(5, cand, counts, q64, rows, None, "cosine")
    assert len(calls) == 15
    calls.clear()
    monkeypatch.setattr(cd, "step_budget", lambda device: 2**30)  # a GPU's share: one call
    big = cd._rescore_lists(5, cand, counts, q64, rows, None, "cosine")
    assert calls == [300]
    assert torch.equal(small[0], big[0]) and torch.equal(small[1], big[1])


def test_rescoring_on_the_device_takes_at_most_three_calls_a_block(device, monkeypatch):
    """On each device (a GPU with its own DEVICE_ROUNDS; the CPU given the GPU's) a block's rows are re-scored in at
    most three calls and the lists equal the CPU's own rounds' (run on the CPU)."""
    monkeypatch.setattr(nb, "CPU_COLLECT_TILE", (500, 400))
    monkeypatch.setattr(nb, "CPU_TILE", (500, 400))
    X = _dense_ties(52)

    def search(dev, stats=None):
        found, _ = nb._search(X, X, [(10, None)], "cosine", True, torch.device(dev), None, product=dv.TF32, stats=stats)
        return found[0]

    want = search("cpu")
    monkeypatch.setattr(cd, "DEVICE_ROUNDS", {"cpu": 2, "cuda": 2})
    calls = []
    real = cd._rescore_lists
    monkeypatch.setattr(cd, "_rescore_lists", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    stats = {}
    got = search(device, stats)
    assert np.array_equal(want[0], got[0]) and np.allclose(want[1], got[1], rtol=1e-6)
    blocks = -(-len(X) // (500 if device == "cpu" else nb._tile_shape(len(X), len(X), torch.device(device))[0]))
    assert stats["sweep"] == "collect" and len(calls) <= 3 * blocks


def test_rows_searched_again_take_one_pass_where_each_pass_waits(monkeypatch):
    """Rows a proven pool cannot prove (more exact ties than the pool) are searched again over the corpus: on a
    device of PASS_DEVICES (here the CPU, given a GPU's behaviour) in as few passes as their tiles allow, and, when
    their selections outgrow the budget (more entries a row than a tile has columns), in the passes that hold whole
    rows' selections; the lists are the same each way (exact ties: the lower index first)."""
    rng = np.random.default_rng(53)
    X = rng.standard_normal((600, 16)).astype(np.float32)
    X[100:300] = X[100]  # 200 exact duplicates: more ties than a pool of k + 24
    cpu = torch.device("cpu")
    passes = []
    real = cd._selected
    monkeypatch.setattr(cd, "_selected", lambda *a, **k: (passes.append(len(a[0])), real(*a, **k))[1])
    monkeypatch.setattr(cd, "step_budget", lambda device: 600 * 16 * 20)  # whole rows' selections: 20 rows a pass

    def search(tile_cols, pass_devices=()):
        monkeypatch.setattr(nb, "CPU_TILE", (200, tile_cols))
        monkeypatch.setattr(cd, "PASS_DEVICES", pass_devices)
        passes.clear()
        stats = {}
        found, _ = nb._search(X, X.copy(), [(5, None), (7, None)], "cosine", False, cpu, None, product=dv.TF32,
                              stats=stats)  # separate queries: tiles of CPU_TILE's columns (the set's own: square)
        assert stats["searched_again"] > 0
        return found, list(passes)

    want, before = search(256)
    assert max(before) == 20
    got, one = search(256, ("cpu",))  # tiles of 256 columns: 46 rows a pass; ~199 entries a row fit
    assert all(np.array_equal(x, y) for (x, _), (y, _) in zip(want, got))
    assert len(one) < len(before) and max(one) == 46
    got, back = search(128, ("cpu",))  # tiles of 128 columns: 93 rows a pass, whose ~199 entries a row do not fit
    assert all(np.array_equal(x, y) for (x, _), (y, _) in zip(want, got))
    assert 93 in back and all(x <= 20 for x in back if x != 93)  # given up, then passes of whole rows' selections
