"""A Dask cluster that shares no disk with the runner (issue 44 item 5): its workers cannot open the report's files,
so the rows travel to them in row blocks, one block at a time, and the passes still run on them with the numbers of
a local run.

The workers are processes of a LocalCluster on this machine; each is denied every ``open`` under the test's
folder by an audit hook (:func:`sys.addaudithook`, installed in the worker process): ``open()``, ``os.open`` and
NumPy's memory maps all raise, as on a machine without that folder. The test process itself reads the folder as
usual."""
import json
import math
import os
import shutil

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from embeval_report.cli import main  # noqa: E402
from embeval_report.context import ComputeContext  # noqa: E402
from embeval_report.kernels import dask_engine as de  # noqa: E402
from embeval_report.kernels import device, moments, unit_rows  # noqa: E402
from embeval_report.kernels.pairs import gaussian_potential_rows  # noqa: E402


def _hide(folder: str):
    """In this (worker) process, refuse to open anything under ``folder``."""
    import sys

    def hook(event, args):
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.realpath(os.fsdecode(args[0]))
            if path == folder or path.startswith(folder + os.sep):
                raise PermissionError(f"{path}: not on this machine")

    sys.addaudithook(hook)
    return True


@pytest.fixture(scope="module")
def hidden(tmp_path_factory):
    """``(client, folder)``: a 2-worker LocalCluster whose workers cannot open anything under ``folder``."""
    folder = os.path.realpath(tmp_path_factory.mktemp("runner-only"))
    client = de.connect(None, workers=2)
    assert all(client.run(_hide, folder).values())
    yield client, folder
    client.close()


def _tasks(client) -> dict:
    """Each task prefix the scheduler has seen, with the compute seconds of its tasks so far (cumulative)."""
    return client.run_on_scheduler(lambda dask_scheduler: {name: tp.all_durations["compute"]
                                                           for name, tp in dask_scheduler.task_prefixes.items()})


def _ran_since(client, before: dict) -> set:
    """The task prefixes that computed since ``before`` (the tests share one cluster: a prefix seen by an earlier
    test is not enough)."""
    return {name for name, seconds in _tasks(client).items() if seconds > before.get(name, 0.0)}


def _relative(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def test_the_workers_cannot_read_the_folder(hidden):
    client, folder = hidden
    path = os.path.join(folder, "probe.npy")
    np.save(path, np.ones((3, 2), np.float32))
    assert de._can_read(path)  # here
    assert not any(client.run(de._can_read, path).values())  # there
    with pytest.raises(PermissionError, match="not on this machine"):
        client.submit(np.load, path, pure=False).result()


def test_passes_over_a_file_the_workers_cannot_open_run_on_them_with_its_rows_sent(hidden, monkeypatch):
    """Moments and the all-pairs potential of a memory map the workers cannot open: its rows are sent in blocks of
    one chunk (never the whole set at once), the tasks run on the workers, and the numbers are the local pass's."""
    client, folder = hidden
    monkeypatch.setattr(device, "CHUNK_BYTES", 700 * 16 * 8 * 4)  # chunks of 700 rows of 16 dimensions
    X = (np.random.default_rng(8).standard_normal((3000, 16)) * np.linspace(0.1, 5, 16) + 2).astype(np.float32)
    path = os.path.join(folder, "vectors.npy")
    np.save(path, X)
    M = np.load(path, mmap_mode="r")
    sent = []
    scatter = distributed.Client.scatter
    monkeypatch.setattr(distributed.Client, "scatter",
                        lambda self, data, **kw: (sent.append(np.shape(data)), scatter(self, data, **kw))[1])
    with ComputeContext():
        want_g = moments.block_moments(M, transform=unit_rows, n_blocks=7, seed=3, device="cpu")
        want_p = gaussian_potential_rows(M, 2.0, transform=unit_rows, device="cpu", desc=None)
    before = _tasks(client)
    with ComputeContext(scheduler=client.scheduler.address):
        assert de.takes(M, "cpu")
        got_g = moments.block_moments(M, transform=unit_rows, n_blocks=7, seed=3, device="cpu")
        monkeypatch.setattr(device, "CHUNK_BYTES", 24 * 400**2)  # the potential's square blocks: 400 rows
        got_p = gaussian_potential_rows(M, 2.0, transform=unit_rows, device="cpu", desc=None)
    assert {"moment_partials", "potential_pair"} <= _ran_since(client, before)
    assert sent == [(700, 16)] * 4 + [(200, 16)]  # once, block by block, for both passes
    assert np.array_equal(got_g.count, want_g.count) and _relative(got_g.G, want_g.G) < 1e-9
    assert _relative(got_p, want_p) < 1e-9


def _numbers(doc, path=""):
    if isinstance(doc, dict):
        return {k: v for key, val in doc.items() for k, v in _numbers(val, f"{path}/{key}").items()}
    if isinstance(doc, list):
        return {k: v for i, val in enumerate(doc) for k, v in _numbers(val, f"{path}/{i}").items()}
    return {path: doc}


def test_a_run_on_a_cluster_without_the_runners_disk_equals_the_local_run(hidden, dask_reference):
    """``run --scheduler`` on the cluster whose workers cannot open the manifest, the report or its prepared cache:
    the shared graph's rows and each chapter's rows are sent to them, the chapters' tasks run there, and every
    number of metrics.json is the local run's (to 1e-9). The set (8,300 x 64: more than one 256 MiB chunk) and the
    local run are conftest's ``dask_reference`` (written once per session; test_dask_engine compares with it too):
    its files are copied into the folder the workers cannot read."""
    client, folder = hidden
    base = os.path.join(folder, "run")
    os.makedirs(base)
    for name in ("vecs.npy", "ids.txt", "m.yaml"):
        shutil.copyfile(dask_reference.folder / name, os.path.join(base, name))
    outs = {"local": str(dask_reference.out), "cluster": os.path.join(base, "cluster")}
    before = _tasks(client)
    assert main(["run", os.path.join(base, "m.yaml"), "--out", outs["cluster"], *dask_reference.ARGS, "--scheduler",
                 client.scheduler.address]) == 0
    assert not any(client.run(de._can_read, os.path.join(outs["cluster"], "metrics.json")).values())
    assert {"moment_partials", "potential_pair"} <= _ran_since(client, before)  # the chapters' passes ran there
    docs = {name: json.load(open(os.path.join(out, "metrics.json")))["chapters"] for name, out in outs.items()}
    for ch in ("isotropy", "uniformity"):
        assert docs["cluster"][ch]["status"] == "ok"
        local, there = _numbers(docs["local"][ch]), _numbers(docs["cluster"][ch])
        assert local.keys() == there.keys()
        for key, a in local.items():
            b = there[key]
            if isinstance(a, float) and isinstance(b, float) and math.isfinite(a):
                assert abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12), (ch, key)
            else:
                assert a == b, (ch, key)
