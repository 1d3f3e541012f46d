"""The Dask engine: the decomposable passes on a 2-worker LocalCluster equal the in-memory ones."""
import json
import math
import pickle
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")

from embeval_report import kernels  # noqa: E402
from embeval_report.cli import main  # noqa: E402
from embeval_report.kernels import dask_engine as de  # noqa: E402
from embeval_report.context import ComputeContext  # noqa: E402
from embeval_report.kernels import blocks, knn, moments, unit_rows  # noqa: E402
from embeval_report.kernels.graph_cache import clear_memory  # noqa: E402
from embeval_report.kernels.pairs import gaussian_potential_rows  # noqa: E402
from embeval_report.metrics import drift as dr  # noqa: E402
from embeval_report.metrics.isotropy import PrincipalDirections  # noqa: E402
from embeval_report.metrics.two_sample import ks_dimensions  # noqa: E402
from embeval_report.settings import ChapterSettings  # noqa: E402


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


# ---------------------------------------------------------------------------------------------
# The chapters' passes sent to the engine's cluster (the compute context's scheduler / takes)
# ---------------------------------------------------------------------------------------------

def _mapped(tmp_path, n=3000, d=16, seed=5):
    """A shifted, unevenly scaled float32 set saved as .npy and memory-mapped (what every chapter reads)."""
    X = (np.random.default_rng(seed).standard_normal((n, d)) * np.linspace(0.1, 5, d) + 2).astype(np.float32)
    np.save(tmp_path / "vectors.npy", X)
    return np.load(tmp_path / "vectors.npy", mmap_mode="r")


@pytest.fixture
def engine(client, monkeypatch):
    """The engine on (the module's LocalCluster), chunks of 700 rows of 16 dimensions, and a record of the
    passes sent."""
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 700 * 16 * 8 * 4)
    sent = []
    for name in ("block_moments", "column_mean", "potential_rows", "ks_statistics"):
        real = getattr(de, name)
        monkeypatch.setattr(de, name, lambda *a, _real=real, _name=name, **kw: (sent.append(_name), _real(*a, **kw))[1])
    with ComputeContext(scheduler=client.scheduler.address):
        yield sent


def _local(f, *args, **kw):
    """``f(*args, **kw)`` with the engine off (the reference)."""
    with ComputeContext():
        return f(*args, **kw)


def _close(a, b, rel=1e-9) -> bool:
    return _relative(np.asarray(a, float), np.asarray(b, float)) <= rel


def test_a_memory_map_travels_as_its_path_not_its_bytes(client, tmp_path, monkeypatch):
    M = _mapped(tmp_path)
    X = np.array(M)

    def refuse(*_):
        raise AssertionError("a memory map was pickled: its bytes would travel")

    monkeypatch.setattr(np.memmap, "__reduce__", refuse)
    monkeypatch.setattr(np.memmap, "__reduce_ex__", refuse)
    with pytest.raises(AssertionError):
        pickle.dumps(M)
    view = np.asarray(M)[1000:1500]  # what a chapter holds after as_numpy, and a row range of it
    rows = de.FileRows.of(view)
    assert rows is not None and rows.shape == (500, 16) and len(pickle.dumps(rows)) < 500
    assert np.array_equal(pickle.loads(pickle.dumps(rows))[10:20], X[1010:1020])
    assert de.FileRows.of(X) is None and de.FileRows.of(np.asarray(M)[:, :8]) is None  # in memory; not C-ordered
    Xd = de.as_dask(M, block_rows=700)
    import cloudpickle

    assert len(cloudpickle.dumps(dict(Xd.__dask_graph__()))) < 20_000  # 5 blocks' tasks, not 192 kB of rows
    _check_moments(*de.column_moments(M, client=client, block_rows=700), X.astype(np.float64))
    want = knn(X, 5, device="cpu", desc=None)
    got = de.knn_blockwise(M, 5, client=client, block_rows=700)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_block_moments_and_column_mean_on_the_cluster_equal_the_local_pass(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 40)  # several tasks with several blocks
    M = _mapped(tmp_path)
    assert de.takes(M, "cpu") and de.takes(np.asarray(M), "cpu") and not de.takes(M[:700], "cpu")
    assert not de.takes(np.array(M), "cpu")  # rows only this process holds
    mean = moments.column_mean(M, device="cpu")
    assert _close(mean, _local(moments.column_mean, M, device="cpu"))
    remover = PrincipalDirections.fit(np.array(M), device="cpu").remover(2, "cpu")
    for kw in (dict(shift=mean), dict(transform=unit_rows, n_blocks=7, seed=3),
               dict(transform=lambda x: unit_rows(remover(x)), n_blocks=25, seed=1)):
        got = moments.block_moments(np.asarray(M), device="cpu", **kw)
        want = _local(moments.block_moments, np.asarray(M), device="cpu", **kw)
        assert np.array_equal(got.count, want.count) and _close(got.s, want.s) and _close(got.G, want.G)
        assert np.array_equal(got.shift, want.shift)
    assert engine == ["column_mean", "block_moments", "block_moments", "block_moments"]


def test_potential_rows_on_the_cluster_equal_the_local_pass(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 24 * 400**2)  # blocks of 400 rows: 5 of them, the last 100
    M = _mapped(tmp_path, n=1700)
    got = gaussian_potential_rows(M, 2.0, transform=unit_rows, device="cpu", desc=None)
    want = _local(gaussian_potential_rows, M, 2.0, transform=unit_rows, device="cpu", desc=None)
    assert engine == ["potential_rows"] and got.shape == (1700,) and _close(got, want)
    raw = gaussian_potential_rows(M, 0.01, device="cpu", desc=None)  # no transform
    assert _close(raw, _local(gaussian_potential_rows, M, 0.01, device="cpu", desc=None))


@pytest.mark.parametrize("resampling", ["bootstrap", "jackknife"])
def test_drift_moments_and_ks_on_the_cluster_equal_the_local_ones(engine, monkeypatch, resampling):
    if resampling == "jackknife":  # per-block moments would not fit: whole-set moments, one group at a time
        import embeval_report.stats as stats

        monkeypatch.setattr(stats, "RESAMPLING_BYTES", 19 * 2 * 8 * 32**2)
    rng = np.random.default_rng(7)
    A = rng.standard_normal((1600, 16)) + 1
    B = A @ np.linalg.qr(rng.standard_normal((16, 16)))[0] + 0.1 * rng.standard_normal((1600, 16))
    kw = dict(n_boot=30, level=0.9, seed=0, dev=kernels.resolve_device("cpu"))
    got, want = dr._pair_statistics(A, B, **kw), _local(dr._pair_statistics, A, B, **kw)
    assert got[3] == want[3] and ("jackknife" in got[3]) == (resampling == "jackknife")
    for k, v in want[0].items():
        assert _close(got[0][k], v), k
        assert _close(got[1][k], want[1][k]) and _close(got[2][k], want[2][k]), k
    assert engine[0] == "column_mean" and engine.count("block_moments") == 2
    assert not de._engine["shared"]  # the scattered blocks were released
    Y = rng.standard_normal((900, 16)) + np.linspace(0, 0.3, 16)
    ks, ref = ks_dimensions(A, Y), _local(ks_dimensions, A, Y)
    assert engine[-1] == "ks_statistics"
    assert np.array_equal(ks.statistics, ref.statistics) and np.array_equal(ks.p_values, ref.p_values)
    assert np.array_equal(ks.rejected, ref.rejected)


def test_the_engine_is_off_on_a_gpu_and_for_rows_in_memory(engine, tmp_path):
    import torch

    M = _mapped(tmp_path)
    assert de.takes(M, "cpu") and not de.takes(M, torch.device("cuda"))  # a GPU's pass stays on its GPU
    X = np.random.default_rng(0).standard_normal((2000, 16))
    assert not de.takes(X, "cpu") and not de.takes(X[:10], "cpu")
    with de.shared(X):
        assert de.takes(X, "cpu") and not de.takes(X.copy(), "cpu")
    assert not de.takes(X, "cpu")
    with ComputeContext(), de.shared(X):
        assert not de.takes(X, "cpu") and not de._engine["shared"]


def test_scheduler_setting_and_no_dask_import_without_an_engine():
    assert ChapterSettings().to_params()["scheduler"] is None
    assert ChapterSettings(scheduler="tcp://10.0.0.1:8786").to_params()["scheduler"] == "tcp://10.0.0.1:8786"
    with pytest.raises(ValueError, match="scheduler must be a Dask scheduler address"):
        ChapterSettings(scheduler="localhost")
    code = ("import sys, numpy as np; from embeval_report.chapters import setup; "
            "from embeval_report.kernels import moments, pairs, dask_engine as de; from embeval_report.metrics import drift; "
            "X = np.ones((50, 3)); moments.block_moments(X, device='cpu'); pairs.gaussian_potential_rows(X, desc=None); "
            "print(sorted(m for m in ('dask', 'distributed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _numbers(doc, path=""):
    """Every number of a metrics.json chapter, by its path."""
    if isinstance(doc, dict):
        return {k: v for key, val in doc.items() for k, v in _numbers(val, f"{path}/{key}").items()}
    if isinstance(doc, list):
        return {k: v for i, val in enumerate(doc) for k, v in _numbers(val, f"{path}/{i}").items()}
    return {path: doc}


def test_run_with_dask_sends_the_chapters_passes_and_equals_the_local_run(dask_reference, tmp_path, monkeypatch):
    """The local run is conftest's ``dask_reference`` (written once per session, as test_dask_no_shared_disk
    compares with it too): the same set (8,300 x 64: more rows than one chunk of a 256 MiB budget, 8,192 of 64),
    chapters (isotropy and uniformity; collapse reads the same moments, the run's moments cache) and options."""
    from embeval_report.report import runner, shared_graph

    prefixes = []
    real = shared_graph.dask_client

    def spy(*args):
        client, info = real(*args)
        if client is None:  # the local run
            return client, info
        close = client.close

        def closing(*a, **kw):  # which tasks the cluster ran, read before it closes
            if client.status == "running":
                prefixes.extend(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes)))
            return close(*a, **kw)

        client.close = closing
        return client, info

    monkeypatch.setattr(runner, "dask_client", spy)
    outs, chapters = {"local": dask_reference.out, "dask": tmp_path / "dask"}, "isotropy,uniformity"
    assert main(["run", str(dask_reference.folder / "m.yaml"), "--out", str(outs["dask"]), *dask_reference.ARGS,
                 "--dask"]) == 0
    docs = {name: json.loads((out / "metrics.json").read_text())["chapters"] for name, out in outs.items()}
    worst = 0.0
    for ch in chapters.split(","):
        assert docs["dask"][ch]["status"] == "ok" and docs["dask"][ch]["metrics"], ch
        local, dask = _numbers(docs["local"][ch]), _numbers(docs["dask"][ch])
        assert local.keys() == dask.keys()
        for key, a in local.items():
            b = dask[key]
            if isinstance(a, float) and isinstance(b, float) and math.isfinite(a):
                worst = max(worst, abs(a - b) / max(abs(a), abs(b), 1e-12))
            else:
                assert a == b, (ch, key)
    assert worst <= 1e-9
    assert {"moment_partials", "column_sum", "potential_pair", "logaddexp"} <= set(prefixes)  # the chapters' tasks
    run = json.loads((outs["dask"] / "run.json").read_text())
    assert run["engine"] == {"name": "dask", "scheduler": "LocalCluster", "workers": 2}


def test_a_cluster_lost_during_a_pass_is_one_line_then_the_pass_runs_here_where_it_fits(engine, tmp_path,
                                                                                          monkeypatch):
    """A scheduler gone in the middle of a chapter's pass: the pass ends with one line naming the cluster, runs
    again in this process (a warning says so; the same numbers) and every later pass stays here; a set larger than
    the memory budget, which went to the cluster for its size, fails with that line instead."""
    from concurrent.futures import CancelledError

    from embeval_report.kernels import dask_faults

    M = _mapped(tmp_path)
    address = _current_scheduler()

    def gone(client, parts):
        with dask_faults.guarded(client):
            raise CancelledError("column_sum-1f2e cancelled for reason: scheduler-connection-lost.")

    monkeypatch.setattr(de, "_summed", gone)
    try:
        with pytest.warns(RuntimeWarning, match=rf"^the Dask cluster at {address} is gone: its scheduler stopped "
                                                 r"answering \(CancelledError: column_sum-1f2e cancelled for reason: "
                                                 r"scheduler-connection-lost\); this pass and the later ones were "
                                                 r"computed in this process instead"):
            mean = moments.column_mean(M, device="cpu")
        assert _close(mean, _local(moments.column_mean, M, device="cpu")) and engine == ["column_mean"]
        assert not de.takes(M, "cpu")  # the engine is off in this process
        dask_faults.LOST.clear()
        monkeypatch.setattr(ComputeContext, "budget", property(lambda self: M.nbytes - 1))
        with pytest.raises(dask_faults.ClusterLost, match=r"scheduler-connection-lost\); its rows \(192,000 bytes\) "
                                                          r"do not fit the memory budget \(191,999 bytes\)"):
            moments.column_mean(M, device="cpu")
    finally:
        dask_faults.LOST.clear()


def _current_scheduler() -> str:
    from embeval_report.context import current

    return current().scheduler
