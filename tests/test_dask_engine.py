"""The Dask engine: the decomposable passes on a 2-worker LocalCluster equal the in-memory ones."""
import json

import numpy as np
import pytest

pytest.importorskip("distributed")

from embeval_report.cli import main  # noqa: E402
from embeval_report.kernels import dask_engine as de  # noqa: E402
from embeval_report.kernels import knn  # noqa: E402
from embeval_report.kernels.graph_cache import clear_memory  # noqa: E402



def write_set(folder, n=240, d=12, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    np.save(folder / "vecs.npy", X)
    (folder / "ids.txt").write_text("\n".join(f"e{i}" for i in range(n)))
    (folder / "m.yaml").write_text("name: tiny\nvectors: vecs.npy\nids: ids.txt\n")
    return folder / "m.yaml"


@pytest.fixture(scope="module")
def client():
    c = de.connect(None, workers=2)
    yield c
    c.close()


def _relative(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _check_moments(n, s, G, Y):
    assert n == len(Y)
    assert _relative(s, Y.sum(0)) < 1e-9 and _relative(G, Y.T @ Y) < 1e-9


def test_connect_starts_two_single_threaded_workers(client):
    assert de.worker_count(client) == 2
    assert all(w["nthreads"] == 1 for w in client.scheduler_info()["workers"].values())


def test_column_moments_and_norms_equal_numpy_in_uneven_blocks(client):
    Y = np.random.default_rng(0).standard_normal((2000, 16)) * np.linspace(0.1, 10, 16) + 3
    _check_moments(*de.column_moments(Y, client=client, block_rows=333), Y)  # 6 blocks of 333 and one of 2
    X32 = Y.astype(np.float32)
    _check_moments(*de.column_moments(X32, client=client, block_rows=700), X32.astype(np.float64))
    assert np.allclose(de.row_norms(Y, client=client, block_rows=333), np.linalg.norm(Y, axis=1), rtol=1e-12, atol=0)


def test_column_moments_from_a_zarr_store(client, tmp_path):
    zarr = pytest.importorskip("zarr")
    Y = np.random.default_rng(1).standard_normal((2000, 16)).astype(np.float32)
    z = zarr.open_array(str(tmp_path / "vecs.zarr"), mode="w", shape=Y.shape, chunks=(300, 16), dtype="float32")
    z[:] = Y
    _check_moments(*de.column_moments(str(tmp_path / "vecs.zarr"), client=client), Y.astype(np.float64))
    _check_moments(*de.column_moments({"zarr": tmp_path / "vecs.zarr"}, client=client, block_rows=512),
                   Y.astype(np.float64))
    assert np.allclose(de.row_norms(str(tmp_path / "vecs.zarr"), client=client),
                       np.linalg.norm(Y.astype(np.float64), axis=1), rtol=1e-12, atol=0)


def test_ks_statistics_equal_scipy(client):
    from scipy import stats

    rng = np.random.default_rng(2)
    X, Y = rng.standard_normal((900, 20)), rng.standard_normal((700, 20)) + np.linspace(0, 0.5, 20)
    assert np.array_equal(de.ks_statistics(X, Y, client=client, columns=6), stats.ks_2samp(X, Y, axis=0).statistic)


def _data(duplicates: bool) -> np.ndarray:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1500, 16)).astype(np.float32)
    if duplicates:  # exact ties: 60 rows copied once, 20 of them a second time, one row four times
        src = rng.choice(1500, 140, replace=False)
        X[src[60:120]] = X[src[:60]]
        X[src[120:]] = X[src[:20]]
        X[1400:1404] = X[7]
    return X


@pytest.mark.parametrize("duplicates", [False, True], ids=["random", "duplicate-rows"])
def test_knn_blockwise_equals_the_local_kernel(client, duplicates):
    X = _data(duplicates)
    clear_memory()
    want_i, want_s = knn(X, 10, device="cpu", desc=None)
    for rows in (400, 1500):  # uneven blocks (4 of them, the last 300 rows), and one block
        got_i, got_s = de.knn_blockwise(X, 10, client=client, block_rows=rows)
        assert got_i.dtype == want_i.dtype and got_s.dtype == want_s.dtype and got_i.shape == (1500, 10)
        assert np.array_equal(got_i, want_i) and np.array_equal(got_s, want_s)
        assert not (got_i == np.arange(1500)[:, None]).any()
    if duplicates:  # a duplicate's copies come first, the lower index first
        assert list(want_i[7][:4]) == [1400, 1401, 1402, 1403]


def test_knn_blockwise_rejects_what_it_cannot_do(client):
    with pytest.raises(ValueError, match="euclidean"):
        de.knn_blockwise(np.ones((5, 2)), 2, metric="euclidean", client=client)
    with pytest.raises(ValueError, match="k = 5"):
        de.knn_blockwise(np.eye(5), 5, client=client)


def test_run_with_dask_equals_the_local_run(tmp_path):
    manifest = write_set(tmp_path)
    outs = {}
    for name, extra in (("local", []), ("dask", ["--dask"])):
        outs[name] = tmp_path / name
        clear_memory()  # the local run's graph stays in this process's memory: the Dask run must compute its own
        assert main(["run", str(manifest), "--out", str(outs[name]), "--chapters", "hubness", "--formats", "html",
                     "--device", "cpu", *extra]) == 0
    metrics = {name: json.loads((out / "metrics.json").read_text())["chapters"]["hubness"]
               for name, out in outs.items()}
    assert metrics["dask"]["status"] == "ok" and metrics["dask"]["metrics"]
    assert metrics["dask"]["metrics"] == metrics["local"]["metrics"]
    runs = {name: json.loads((out / "run.json").read_text()) for name, out in outs.items()}
    assert runs["local"]["engine"] == {"name": "local"}
    assert runs["dask"]["engine"] == {"name": "dask", "scheduler": "LocalCluster", "workers": 2}
    assert runs["dask"]["neighbour_graph"]["engine"] == "dask"
    assert runs["dask"]["neighbour_graph"]["source"] == "computed"


def test_without_dask_one_line_names_the_extra(monkeypatch, tmp_path):
    from embeval_report.errors import InputError

    monkeypatch.setitem(__import__("sys").modules, "distributed", None)  # as if not installed
    with pytest.raises(InputError, match=r"pip install 'embeval-report\[dask\]'"):
        de.connect(None, 2)
    assert main(["run", str(write_set(tmp_path)), "--out", str(tmp_path / "out"), "--dask"]) == 2
    assert not (tmp_path / "out").exists()
