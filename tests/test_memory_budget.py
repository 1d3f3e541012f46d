"""The memory budget (``--memory-budget``) and the passes that keep a large set out of memory: row maps
instead of transformed copies, wide-chunk block moments, the one-pass all-but-the-top sums."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from embeval_report import kernels, stats
from embeval_report.cli import main
from embeval_report.io import stores
from embeval_report.context import DEFAULT_BUDGET, ComputeContext, describe_bytes, parse_bytes
from embeval_report.kernels import graph_cache
from embeval_report.kernels import moments as mom
from embeval_report.kernels.device import RowMap, unit_rows
from embeval_report.metrics import correction as corr
from embeval_report.metrics import isotropy as iso
from embeval_report.metrics import uniformity as uni
from embeval_report.chapters.summary import run_conditions
from embeval_report.settings import ChapterSettings

CPU = torch.device("cpu")


def _set(n=3000, d=24, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) * 0.4 + 1.0).astype(np.float32)


@pytest.mark.parametrize("text, expected", [("4GiB", 4 * 2**30), ("512MB", 512 * 10**6), ("2g", 2 * 2**30),
                                            ("1.5 GiB", int(1.5 * 2**30)), ("1048576", 2**20), (300, 300)])
def test_sizes_parse(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["lots", "4 parsecs", "-1G", ""])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError, match="expected a size"):
        parse_bytes(text)


def test_default_budget_gives_the_sizes_the_package_always_used():
    """A budget shares itself out (chunk 1/16, store block 1/64, resampling 1/8, graphs 1/8); the default budget
    gives each module's own default size, and the context is left again after the block."""
    with ComputeContext(memory_budget="8GiB") as ctx:
        assert kernels.chunk_budget() == 512 * 2**20 and stores.block_data_bytes() == 128 * 2**20 // 4
        assert (ctx.share("resampling"), ctx.share("graphs"), ctx.budget) == (2**30, 2**30, 8 * 2**30)
    assert (kernels.chunk_budget(), stores.block_data_bytes()) == (256 * 2**20, 64 * 2**20 // 4)
    assert (kernels.device.CHUNK_BYTES, stores.BLOCK_BYTES, stats.RESAMPLING_BYTES, graph_cache.MEMORY_BYTES) == (
        256 * 2**20, 64 * 2**20, 512 * 2**20, 512 * 2**20)
    assert ComputeContext().budget == DEFAULT_BUDGET == 4 * 2**30 and describe_bytes(DEFAULT_BUDGET) == "4 GiB"
    assert ComputeContext(memory_budget="4GiB").share("chunk") == kernels.device.CHUNK_BYTES  # the same numbers


def test_a_budget_below_the_floor_is_one_line_exit_2(tmp_path, capsys):
    np.save(tmp_path / "x.npy", _set(50, 4))
    code = main(["run", str(tmp_path / "x.npy"), "--out", str(tmp_path / "out"), "--memory-budget", "1MB"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--memory-budget must be at least 16 MiB" in err[0]
    assert ChapterSettings(memory_budget="1GiB").memory_budget == 2**30
    assert ChapterSettings().to_params()["memory_budget"] is None


def test_run_conditions_name_engine_sampling_and_a_non_default_budget():
    assert run_conditions({"engine": {"name": "local"}, "sample_size": None, "memory_budget": 4 * 2**30}) == ""
    text = run_conditions({"engine": {"name": "dask", "scheduler": "LocalCluster", "workers": 2},
                           "sample_size": 5000, "memory_budget": 2**31})
    assert text == ("; k-NN graph, moment, potential and KS passes on a Dask cluster (LocalCluster, 2 workers); "
                    "sampled mode, `--sample-size 5,000`; memory budget 2 GiB")


def test_row_map_reads_what_the_copy_holds(monkeypatch):
    X = _set()
    pcs = iso.PrincipalDirections.fit(X, device=CPU)
    copy = iso.apply_rows(X, pcs.remover(2, CPU), device=CPU)
    assert isinstance(copy, np.ndarray)
    monkeypatch.setattr(ComputeContext, "budget", property(lambda self: 4 * X.nbytes - 4))  # a copy no longer fits
    lazy = iso.apply_rows(X, pcs.remover(2, CPU), device=CPU)
    assert isinstance(lazy, RowMap) and lazy.shape == X.shape and len(lazy) == len(X) and lazy.dtype == np.float32
    idx = np.array([5, 0, 2999, 17])
    np.testing.assert_allclose(lazy[idx], copy[idx], rtol=0, atol=1e-6)
    np.testing.assert_allclose(lazy[100:400], copy[100:400], rtol=0, atol=1e-6)
    np.testing.assert_allclose(lazy[7], copy[7], rtol=0, atol=1e-6)
    assert iso.as_numpy(lazy) is lazy
    with pytest.raises(TypeError, match="rows only"):
        lazy[1, 2]
    # kernels stream over it like over an array
    np.testing.assert_allclose(uni.random_pair_sq_distance(lazy, device=CPU),
                               uni.random_pair_sq_distance(copy, device=CPU), rtol=1e-9)


def test_uniformity_with_a_row_map_equals_the_copy(monkeypatch):
    X = _set(4000, 16, seed=3)
    kept = uni.measure_uniformity(X, sample_size=2000, seed=1, device=CPU)
    monkeypatch.setattr(ComputeContext, "budget", property(lambda self: 1024))
    lazy = uni.measure_uniformity(X, sample_size=2000, seed=1, device=CPU)
    assert lazy.abtt["removed"] == kept.abtt["removed"]
    assert lazy.abtt["uniformity"].value == pytest.approx(kept.abtt["uniformity"].value, rel=1e-6)
    assert lazy.abtt["random_pair_sq_distance"] == pytest.approx(kept.abtt["random_pair_sq_distance"], rel=1e-9)
    assert lazy.metrics["uniformity"].value == kept.metrics["uniformity"].value


def test_unit_row_sum_is_the_sum_of_block_moments():
    X = _set(5000, 12)
    _, s, _ = mom.block_moments(X, transform=unit_rows, device=CPU).total()
    assert np.array_equal(mom.unit_row_sum(X, device=CPU), s)
    x = torch.as_tensor(X, dtype=torch.float64)
    G = (unit_rows(x).T @ unit_rows(x)).numpy()
    apcs = (s @ s - len(X)) / (len(X) * (len(X) - 1))
    assert uni.random_pair_sq_distance(X, device=CPU) == pytest.approx(2 - 2 * iso.cosine_moments(s, G, len(X))[0])
    assert uni.random_pair_sq_distance(X, device=CPU) == pytest.approx(2 - 2 * apcs, rel=1e-12)


@pytest.mark.parametrize("transform", [None, unit_rows])
def test_wide_chunks_give_each_block_its_moments(monkeypatch, transform):
    X = _set(9000, 40, seed=5)
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 40 * 8 * 4 * 700)  # 700-row default chunks: the wide path
    assert mom.block_chunk_rows(9000, 40, 7, 4) is not None
    shift = X.mean(0).astype(float)
    got = mom.block_moments(X, transform=transform, shift=shift, n_blocks=7, seed=2, device=CPU)
    x = torch.as_tensor(X, dtype=torch.float64)
    x = (transform(x) if transform else x) - torch.as_tensor(shift)
    block = mom.assign_blocks(9000, 7, 2)
    for b in range(7):
        xb = x[torch.as_tensor(block == b)]
        assert got.count[b] == len(xb)
        np.testing.assert_allclose(got.s[b], xb.sum(0).numpy(), rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(got.G[b], (xb.T @ xb).numpy(), rtol=1e-12, atol=1e-9)


def test_wide_chunks_take_a_transform_that_changes_the_width(monkeypatch):
    X = _set(5000, 20, seed=6)
    W = torch.as_tensor(np.random.default_rng(0).standard_normal((20, 7)))
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 20 * 8 * 4 * 500)
    got = mom.block_moments(X, transform=lambda x: x @ W, shift=np.zeros(7), n_blocks=5, device=CPU)
    Y = torch.as_tensor(X, dtype=torch.float64) @ W
    assert got.G.shape == (5, 7, 7)
    np.testing.assert_allclose(got.total()[2], (Y.T @ Y).numpy(), rtol=1e-12)


def test_one_pass_abtt_sums_equal_explicit_correction():
    X = _set(6000, 30, seed=7).astype(np.float64)
    pcs = iso.PrincipalDirections.fit(X, device=CPU)
    X[:3] = pcs.mean + (pcs.vectors[:, :2] @ np.array([[1.0, -2.0, 0.5], [0.3, 1.0, -1.0]])).T  # top-2 span
    X[3] = pcs.mean  # no remainder at all
    removals = iso.default_removals(30)
    got = iso._unit_sums(X, pcs, removals, CPU)
    c = torch.as_tensor(X - pcs.mean)
    V = torch.as_tensor(pcs.vectors)
    for D in removals:
        r = c - (c @ V[:, :D]) @ V[:, :D].T if D else c
        np.testing.assert_allclose(got[D], unit_rows(r).sum(0).numpy(), rtol=1e-9, atol=1e-9)
    table, _ = iso.all_but_the_top_effect(X, sample_size=500, spread="sampled", device=CPU)
    assert iso.best_apcs_removal(X, device=CPU) == iso.best_removal(table)


def test_isotropy_directions_come_from_its_own_moments():
    X = _set(2500, 20, seed=9)
    r = iso.measure_isotropy(X, n_boot=0, device=CPU)
    fitted = iso.PrincipalDirections.fit(X, device=CPU)
    mine = r.directions()
    np.testing.assert_allclose(mine.eigenvalues, fitted.eigenvalues, rtol=1e-10)
    np.testing.assert_allclose(np.abs(mine.vectors[:, :5]), np.abs(fitted.vectors[:, :5]), atol=1e-8)


def test_corrections_of_a_huge_set_are_compared_on_a_seeded_sample(monkeypatch):
    X = _set(1500, 12, seed=11)
    labels = np.array([f"c{i % 4}" for i in range(1500)], dtype=object)
    monkeypatch.setattr(corr, "ROW_LIMIT", 1000)
    monkeypatch.setattr(corr, "SAMPLE_ROWS", 600)
    got = corr.compare_corrections(X, labels, k=5, seed=4, device=CPU)
    assert got.subsample.startswith("Every setting is measured on a seeded sample of 600 of the 1,500 rows")
    subset = np.sort(np.random.default_rng(4).choice(1500, 600, replace=False))
    monkeypatch.setattr(corr, "ROW_LIMIT", 10**9)
    direct = corr.compare_corrections(X[subset], labels[subset], k=5, seed=4, device=CPU)
    cols = [c for c in direct.table.columns if c != "setting"]
    np.testing.assert_allclose(got.table[cols].to_numpy(float), direct.table[cols].to_numpy(float), rtol=1e-12)


@pytest.mark.parametrize("metric", ["cosine", "euclidean", "dot"])
def test_a_corpus_beyond_the_budget_is_searched_tile_by_tile(monkeypatch, metric):
    from embeval_report.kernels import knn
    from embeval_report.kernels import neighbours as nb
    from embeval_report.kernels.graph_cache import clear_memory

    X = _set(4000, 32, seed=12)
    Q = _set(300, 32, seed=13)
    clear_memory()
    whole = knn(X, 10, metric=metric, queries=Q, device=CPU)
    rows = np.array([3, 77, 3999])
    whole_lists = nb.query_lists(X, rows, 10, device=CPU)
    whole_self = knn(X[:1500], 7, metric=metric, device=CPU)
    lazy_used = []
    original = nb._CorpusTiles.__getitem__

    def spy(self, key):
        lazy_used.append(key)
        return original(self, key)

    monkeypatch.setattr(nb._CorpusTiles, "__getitem__", spy)
    monkeypatch.setattr(ComputeContext, "budget", property(lambda self: 1024))  # nothing fits: the transposed corpus is made per tile
    monkeypatch.setattr(nb, "lazy_query_rows", lambda width: 128)  # query blocks of 128 rows (1 KiB would give 1)
    clear_memory()
    tiled = knn(X, 10, metric=metric, queries=Q, device=CPU)
    assert lazy_used
    np.testing.assert_array_equal(tiled[0], whole[0])
    np.testing.assert_array_equal(tiled[1], whole[1])
    np.testing.assert_array_equal(nb.query_lists(X, rows, 10, device=CPU), whole_lists)
    clear_memory()
    tiled_self = knn(X[:1500], 7, metric=metric, device=CPU)
    np.testing.assert_array_equal(tiled_self[0], whole_self[0])
    np.testing.assert_array_equal(tiled_self[1], whole_self[1])


def test_a_sweep_beyond_the_budget_holds_a_quarter_of_it_in_queries_with_the_numbers_of_one_block(monkeypatch):
    """A set beyond the budget with fewer than LAZY_QUERY_ROWS rows is no longer one block of float64 queries:
    the mutual-proximity sweep (the runner's, with the potential) takes blocks of a quarter of the budget, and
    gives bitwise the lists and potential of the whole set in one block."""
    from embeval_report.kernels import neighbours as nb
    from embeval_report.kernels.graph_cache import clear_memory, stored_product
    from embeval_report.metrics.hubness_reduction import reduced_knn

    X = _set(2200, 512, seed=21)  # 4.5 MB: beyond a quarter of a 16 MiB budget
    blocks = []
    real = nb.sweep_tiles
    monkeypatch.setattr(nb, "sweep_tiles", lambda q, *a, **kw: (blocks.append(len(q)), real(q, *a, **kw))[1])

    def sweep():
        blocks.clear()
        clear_memory()
        with ComputeContext(memory_budget="16MiB"):
            graphs = reduced_knn(X, 10, ("mutual_proximity",), with_cosine=True, device=CPU)
            potential = stored_product(X, nb.potential_key(nb.SWEEP_POTENTIAL_T))
        return graphs, potential[0], list(blocks)

    capped, capped_potential, capped_blocks = sweep()
    assert max(capped_blocks) == 256 and sum(capped_blocks) == 2200  # 4 MiB / (32 bytes x 512)
    assert nb.lazy_query_rows(2048) == nb.LAZY_QUERY_ROWS  # the default budget: 1 GiB / (32 bytes x 2,048)
    monkeypatch.setattr(nb, "lazy_query_rows", lambda width: 10**9)
    whole, whole_potential, whole_blocks = sweep()
    assert whole_blocks == [2200]
    for name in ("cosine", "mutual_proximity"):
        for a, b in zip(capped[name], whole[name]):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(capped_potential, whole_potential)


class _Rows:
    """An array whose row reads are recorded (how many rows at a time)."""

    def __init__(self, X):
        self.X, self.shape, self.reads = X, X.shape, []

    def __len__(self):
        return len(self.X)

    def __getitem__(self, rows):
        out = self.X[rows]
        self.reads.append(len(np.atleast_2d(out)))
        return out


def test_the_runners_hubness_precheck_reads_the_set_in_chunks_of_the_budget():
    """The precheck (all rows one direction?) reads the rows a chunk of work at a time (1/16 of the budget, in
    float64 with a unit copy), not 65,536 rows at once: the runner runs it within the run's budget."""
    from embeval_report.chapters.hubness import _identical_directions
    from embeval_report.chapters.registry import discover, select
    from embeval_report.io import EmbeddingSet
    from embeval_report.report.runner import Run, select_chapters

    rng = np.random.default_rng(3)
    X = (rng.uniform(1, 2, (5000, 1)) * rng.standard_normal(64)).astype(np.float32)  # one direction: every row read
    ids = np.array([f"e{i}" for i in range(5000)], dtype=object)
    for budget, chunk in (("16MiB", 2**20 // (64 * 8 * 2)), (None, 5000)):
        rows = _Rows(X)
        run = Run(None, None, ChapterSettings(memory_budget=budget), select(discover(), ["hubness"]), [])
        run.es, run.side = EmbeddingSet("one-way", rows, ids, None, "x.npy"), None
        select_chapters(run)
        assert "same direction" in run.skipped["hubness"].reason
        assert max(rows.reads) == chunk and sum(rows.reads) == 5000 + 1  # the first row, then every chunk
    X[4999] = -X[4999]
    with ComputeContext(memory_budget="16MiB"):
        assert not _identical_directions(X)


def test_the_fingerprint_of_a_memory_map_reads_its_file(tmp_path, monkeypatch):
    """A memory-mapped set is fingerprinted from its file a block at a time (its mapped pages would stay in the
    runner's resident memory): the digest of the rows in memory, for the map, its views and a copy-on-write map."""
    from embeval_report.kernels.dask_engine import FileRows

    X = np.random.default_rng(4).standard_normal((1001, 33)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", X)
    M = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    monkeypatch.setattr(graph_cache, "READ_BYTES", 1000)  # many reads, the last one short
    for view, rows in ((M, X), (np.asarray(M), X), (M[10:500], X[10:500]), (M[:, :5], X[:, :5]), (M[::2], X[::2])):
        assert graph_cache.fingerprint(view) == graph_cache.fingerprint(rows.copy())
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **kw: (opened.append(a[0]), real_open(*a, **kw))[1])
    graph_cache._file_prints.clear()
    digest = graph_cache.fingerprint(M[10:500])
    assert opened == [str(tmp_path / "vectors.npy")]
    assert graph_cache.fingerprint(M[10:500]) == digest and len(opened) == 1  # remembered while the file is unchanged
    copy = np.load(tmp_path / "vectors.npy", mmap_mode="c")
    copy[0] += 1  # changed in this process only: the file no longer holds its rows
    assert FileRows.of(copy) is None
    assert graph_cache.fingerprint(copy) == graph_cache.fingerprint(np.array(copy)) != graph_cache.fingerprint(M)
    assert digest == graph_cache.fingerprint(X[10:500])
    X[10] += 1  # the file rewritten: its digest is read again
    np.save(tmp_path / "vectors.npy", X)
    os.utime(tmp_path / "vectors.npy", ns=(1, 1))  # a new modification time even within the clock's resolution
    changed = np.load(tmp_path / "vectors.npy", mmap_mode="r")[10:500]
    assert graph_cache.fingerprint(changed) == graph_cache.fingerprint(X[10:500]) != digest


def _anonymous_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc (Linux)")
def test_float64_rows_of_a_mapped_corpus_beyond_the_budget_are_not_held(tmp_path):
    """The norms and squared norms of a memory-mapped corpus beyond the budget are made chunk by chunk without the
    process keeping each chunk's float64 copy: 150,000 x 128 float32 (77 MB; 154 MB in float64) under a 16 MiB
    budget grow the process's anonymous memory by less than a third of the float64 size (the per-chunk results
    once pinned the freed copies: a 2M x 768 corpus under 1 GiB held 11.6 GiB)."""
    from embeval_report.kernels.candidates import _Rows64
    from embeval_report.kernels.heap import trim

    n, d = 150_000, 128
    X = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=(n, d))
    for s in range(0, n, 50_000):
        X[s:s + 50_000] = np.random.default_rng(s).standard_normal((50_000, d), dtype=np.float32)
    X.flush()
    X = np.load(tmp_path / "x.npy", mmap_mode="r")
    with ComputeContext(memory_budget=16 * 2**20):
        T = kernels.device.to_tensor(X)
        trim()
        before = _anonymous_bytes()
        rows = _Rows64(T, True)
        sq = _Rows64(T, False).squared_norms()
        grew = _anonymous_bytes() - before
    assert rows.whole is None and grew < n * d * 8 / 3, grew
    np.testing.assert_allclose(rows.norms.numpy(), np.linalg.norm(np.asarray(X, np.float64), axis=1), rtol=1e-14)
    np.testing.assert_allclose(sq.numpy(), (np.asarray(X, np.float64) ** 2).sum(1), rtol=1e-13)
