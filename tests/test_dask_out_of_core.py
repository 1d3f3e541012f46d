"""Dask with out-of-core input (issue 27, part 4): the cluster's tasks read a set larger than the memory budget
by path, block by block, the numbers are those of the set in memory, and the runner process never holds it."""
import numpy as np
import pytest

pytest.importorskip("distributed")

from embeval_report.context import CacheFolder, ComputeContext  # noqa: E402
from embeval_report.kernels import dask_engine as de  # noqa: E402
from embeval_report.kernels import graph_cache, knn  # noqa: E402


# ------------------------------------------------------------------------- rows the workers cannot read


@pytest.fixture(scope="module")
def client():
    c = de.connect(None, workers=2)
    yield c
    c.close()


def test_rows_the_workers_cannot_read_are_sent_one_block_at_a_time(client, tmp_path, monkeypatch):
    """When a worker cannot open the prepared file, the runner sends its rows one block at a time (never a copy of
    the whole set), the graph is the local kernel's, and the blocks are released after."""
    from embeval_report.report.shared_graph import _dask_graph

    X = np.random.default_rng(4).standard_normal((9000, 16)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", X)
    M = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    sent = []
    scatter = client.scatter
    monkeypatch.setattr(client, "scatter", lambda data, **kw: (sent.append(np.shape(data)), scatter(data, **kw))[1])
    monkeypatch.setattr(de, "readable", lambda source, c: False)
    with ComputeContext(graph_cache=CacheFolder(tmp_path / "graphs")):
        graph_cache.clear_memory()
        _dask_graph(M, 10, client)
        got = graph_cache.cached_graph(np.asarray(M), 10, "cosine", True, compute=None)  # stored: not computed here
    assert sent == [(de.BLOCK_ROWS, 16), (de.BLOCK_ROWS, 16), (9000 - 2 * de.BLOCK_ROWS, 16)]
    assert not de._engine["shared"]
    graph_cache.clear_memory()
    want = knn(X, 10, device="cpu", desc=None)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
