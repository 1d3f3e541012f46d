"""Out-of-core vectors (issue 14, first part): a memory-mapped .npy, a Zarr array and an HDF5 dataset are
validated block by block, written block by block into the prepared cache, give exactly the numbers of
the in-memory path, name the first bad row, and keep peak memory bounded by the block size."""
import json
import time
import tracemalloc

import h5py
import numpy as np
import pytest

import embeval_report.io.stores as stores
from embeval_report.cli import main
from embeval_report.errors import InputError
from embeval_report.io import load_prepared, load_source, load_vectors, save_prepared

zarr = pytest.importorskip("zarr")

N, D = 3000, 32
TINY = 64 << 10  # blocks of 16 KiB of rows: 3000 x 32 float64 (768 KB) streams in ~47 blocks
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def vectors():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, D)) * rng.uniform(0.2, 3.0, D)  # anisotropic, so the metrics have something
    return x


IDS = np.array([f"e{i}" for i in range(N)])


def write_sets(tmp, x=None):
    """The same set as .npy (float32 and float64), Zarr (group with ids; array at the root) and HDF5."""
    x = vectors() if x is None else x
    with np.errstate(over="ignore"):  # the overflow case: float32 copies hold inf
        x32 = x.astype(np.float32)
    np.save(tmp / "v.npy", x32)
    np.save(tmp / "v64.npy", x)
    (tmp / "ids.txt").write_text("\n".join(IDS) + "\n")
    g = zarr.open_group(str(tmp / "g.zarr"), mode="w")
    g.create_array("vectors", shape=x.shape, chunks=(250, D), dtype="f8")[:] = x
    g.create_array("ids", shape=(N,), dtype=str)[:] = IDS
    zarr.create_array(str(tmp / "root.zarr"), shape=x.shape, chunks=(400, D), dtype="f4")[:] = x32
    with h5py.File(tmp / "v.h5", "w") as f:
        f.create_dataset("emb", data=x, chunks=(300, D))
        f["names"] = IDS.astype("S")
    return x


def manifest(tmp, text, name="m.yaml"):
    (tmp / name).write_text(text)
    return tmp / name


KINDS = {
    "npy-float32-memmap": "vectors: v.npy\nids: ids.txt\n",
    "npy-float64-memmap": "vectors: v64.npy\nids: ids.txt\n",
    "zarr-group-path": "vectors: g.zarr\n",  # picks 'vectors', ids from its 'ids' array
    "zarr-mapping": "vectors: {zarr: g.zarr, array: vectors, ids: ids}\n",
    "zarr-root-array": "vectors: root.zarr\nids: ids.txt\n",
    "hdf5-mapping": "vectors: {hdf5: v.h5, dataset: emb, ids: names}\n",
    "hdf5-sidecar-ids": "vectors: {hdf5: v.h5, dataset: /emb}\nids: ids.txt\n",
}


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sets")
    write_sets(tmp)
    return tmp


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_streams_to_the_in_memory_set(sets, kind, monkeypatch, tmp_path):
    reference = load_source(manifest(sets, "vectors: v.npy\nids: ids.txt\n", "ref.yaml"))
    assert not isinstance(reference.vectors, np.memmap)  # small: the in-memory path
    monkeypatch.setattr(stores, "BLOCK_BYTES", TINY)
    m = manifest(sets, KINDS[kind], f"{kind}.yaml")
    for scratch in (None, tmp_path / "cache"):
        if scratch is not None:
            scratch.mkdir()
        es = load_source(m, scratch=scratch)
        assert isinstance(es.vectors, np.memmap) and es.vectors.dtype == np.float32  # streamed, never loaded
        np.testing.assert_array_equal(es.vectors, reference.vectors)
        assert list(es.ids) == list(reference.ids) and es.ids_given
    save_prepared(es, tmp_path / "cache")  # the streamed copy is already the cache's vectors.npy
    # a float32 .npy is already what the chapters read: linked, never copied (30 GB stay 30 GB on disk)
    assert (tmp_path / "cache" / "vectors.npy").is_symlink() == (kind == "npy-float32-memmap")
    cached = load_prepared(tmp_path / "cache")
    np.testing.assert_array_equal(cached.vectors, reference.vectors)
    assert list(cached.ids) == list(IDS)
    save_prepared(cached, tmp_path / "other")  # a memory-mapped set is copied block by block
    np.testing.assert_array_equal(np.load(tmp_path / "other" / "vectors.npy"), reference.vectors)


def test_bare_store_paths_and_runs(sets, monkeypatch):
    monkeypatch.setattr(stores, "BLOCK_BYTES", TINY)
    x32 = vectors().astype(np.float32)
    for source in ("g.zarr", "root.zarr", "v.npy"):
        es = load_source(sets / source)
        np.testing.assert_array_equal(es.vectors, x32)
    v, ids = load_vectors(sets / "g.zarr")
    assert list(ids[:2]) == ["e0", "e1"]
    from embeval_report.io.runs import load_runs

    es = load_source(manifest(sets, "vectors: v.npy\nids: ids.txt\nruns: [g.zarr]\n", "runs.yaml"))
    (run,) = load_runs(es, es.fields["runs"])
    np.testing.assert_array_equal(run.matched.vectors, x32)


@pytest.mark.parametrize("spec", ["{zarr: g.zarr, array: vectors, ids: ids}", "{hdf5: v.h5, dataset: emb, ids: names}"])
def test_snapshots_and_queries_may_be_store_mappings(sets, spec):
    from embeval_report.io.queries import load_queries
    from embeval_report.io.snapshots import load_snapshots

    x32 = vectors().astype(np.float32)
    es = load_source(manifest(sets, "vectors: v.npy\nids: ids.txt\nsnapshots:\n  - {name: later, vectors: "
                              f"{spec}}}\n", "snap.yaml"))
    (snap,) = load_snapshots(es, es.fields["snapshots"])
    np.testing.assert_array_equal(snap.vectors, x32)
    assert snap.name == "later" and len(snap.index) == N
    from embeval_report.io.runs import load_runs

    es = load_source(manifest(sets, f"vectors: v.npy\nids: ids.txt\nruns: [{spec}]\n", "runs2.yaml"))
    (run,) = load_runs(es, es.fields["runs"])
    np.testing.assert_array_equal(run.matched.vectors, x32)
    assert run.label.startswith(("g.zarr", "v.h5"))
    m = json.loads(json.dumps(es.fields["runs"][0], default=str))
    q = load_queries({"vectors": m}, D)
    np.testing.assert_array_equal(q.vectors, x32)
    assert list(q.ids[:2]) == ["e0", "e1"] and q.file.startswith(("g.zarr", "v.h5"))


def test_report_from_zarr_equals_in_memory(sets, monkeypatch, tmp_path):
    """One report from the in-memory .npy and one from Zarr streamed in tiny blocks: identical metrics."""
    argv = ["--chapters", "isotropy,hubness", "--formats", "html", "--device", "cpu"]
    assert main(["run", str(manifest(sets, KINDS["npy-float32-memmap"], "r1.yaml")), "--out",
                 str(tmp_path / "memory"), *argv]) == 0
    monkeypatch.setattr(stores, "BLOCK_BYTES", TINY)
    assert main(["run", str(manifest(sets, KINDS["zarr-mapping"], "r2.yaml")), "--out", str(tmp_path / "zarr"),
                 *argv]) == 0
    one, two = (json.loads((tmp_path / f / "metrics.json").read_text())["chapters"] for f in ("memory", "zarr"))
    assert one["isotropy"]["status"] == "ok" and one["isotropy"]["metrics"]
    for chapter in ("isotropy", "hubness"):
        assert one[chapter] == two[chapter]  # every metric value, exactly


# ------------------------------------------------------------- streaming validation


def bad(kind):
    x = vectors()
    row = 2900  # in one of the last blocks
    if kind in ("nan", "late-nan-wins"):
        x[row, 3] = np.nan
    elif kind == "inf":
        x[row, 3] = -np.inf
    elif kind == "zero":
        x[row] = 0.0
    elif kind == "overflow":
        x[row, 3] = 1e39
    if kind == "late-nan-wins":
        x[10] = 0.0  # a zero row before the NaN: the NaN is reported, as in memory
    return x


@pytest.mark.parametrize("kind, words", [
    ("nan", ["row 2901 (id 'e2900'), column 4: NaN; expected finite numbers"]),
    ("inf", ["row 2901 (id 'e2900'), column 4: -inf; expected finite numbers"]),
    ("zero", ["row 2901 (id 'e2900'): zero vector (all 32 values are 0)"]),
    ("overflow", ["row 2901 (id 'e2900'), column 4: 1e+39 does not fit in float32"]),
    ("late-nan-wins", ["row 2901 (id 'e2900'), column 4: NaN"]),
])
def test_streaming_names_the_first_bad_row_like_the_in_memory_path(tmp_path, monkeypatch, kind, words):
    write_sets(tmp_path, bad(kind))
    with pytest.raises(InputError) as in_memory:
        load_source(manifest(tmp_path, KINDS["npy-float64-memmap"]))
    monkeypatch.setattr(stores, "BLOCK_BYTES", TINY)
    for k in ("npy-float64-memmap", "zarr-group-path", "hdf5-mapping"):
        with pytest.raises(InputError) as streamed:
            load_source(manifest(tmp_path, KINDS[k], f"{k}.yaml"), scratch=tmp_path)
        message = str(streamed.value)
        assert all(w in message for w in words), message
        assert message.split(", row")[1] == str(in_memory.value).split(", row")[1]  # same text after the file
    assert not list(tmp_path.glob("vectors.npy*"))  # no partial cache left behind


# ------------------------------------------------------------------- bounded memory


def test_peak_memory_of_a_200_mb_zarr_stays_near_the_block_budget(tmp_path, monkeypatch, record_property):
    n, d = 200_000, 256  # 204.8 MB of float32
    arr = zarr.create_array(str(tmp_path / "big.zarr"), shape=(n, d), chunks=(2048, d), dtype="f4")  # 2 MB
    rng = np.random.default_rng(0)
    for start in range(0, n, 25_000):
        arr[start:start + 25_000] = rng.standard_normal((25_000, d), dtype=np.float32)
    (tmp_path / "cache").mkdir()
    monkeypatch.setattr(stores, "BLOCK_BYTES", 16 << 20)
    m = manifest(tmp_path, "vectors: big.zarr\n")
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        es = load_source(m, scratch=tmp_path / "cache")
        save_prepared(es, tmp_path / "cache")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    seconds = time.perf_counter() - t0
    size = n * d * 4
    record_property("peak_mb", peak / 1e6)
    record_property("seconds", seconds)
    print(f"validate+prepare {size / 1e6:.0f} MB Zarr: {seconds:.1f} s, peak traced {peak / 1e6:.1f} MB")
    assert peak < 1.5 * (16 << 20), peak  # the 16 MB budget (blocks of 4 MB of rows), never the array
    cached = np.load(tmp_path / "cache" / "vectors.npy", mmap_mode="r")
    assert cached.shape == (n, d)
    np.testing.assert_array_equal(cached[-5:], arr[n - 5:])


# ------------------------------------------------------------------------ bad input


def g_extra(tmp):
    g = zarr.open_group(str(tmp / "g.zarr"), mode="a")
    g.create_array("cube", shape=(10, 4, 2), dtype="f4")[:] = 1.0
    g.create_array("flags", shape=(10, 4), dtype=bool)[:] = True
    g.create_array("words", shape=(10, 4), dtype=str)[:] = "a"


def corrupt_chunk(tmp):
    """Overwrite the chunk holding rows 2751-3000 (chunk 11 of 12) with garbage."""
    chunk = tmp / "g.zarr" / "vectors" / "c" / "11" / "0"
    assert chunk.is_file()
    chunk.write_bytes(b"\x00garbage" * 50)


BAD = {
    "store-missing": (None, "vectors: nope.zarr\n", ["m.yaml", "field 'vectors'", "Zarr store not found", "nope.zarr"]),
    "mapping-store-missing": (None, "vectors: {zarr: nope.zarr}\n", ["key 'zarr'", "Zarr store not found"]),
    "array-missing": (None, "vectors: {zarr: g.zarr, array: emb}\n",
                      ["g.zarr (array 'emb')", "no array named 'emb'", "arrays present: 'ids', 'vectors'"]),
    "ids-array-missing": (None, "vectors: {zarr: g.zarr, array: vectors, ids: names}\n",
                          ["no array named 'names'", "'ids', 'vectors'"]),
    "dataset-missing": (None, "vectors: {hdf5: v.h5, dataset: vectors}\n",
                        ["v.h5 (dataset 'vectors')", "no dataset named 'vectors'", "datasets present: 'emb', 'names'"]),
    "hdf5-missing": (None, "vectors: {hdf5: nope.h5, dataset: emb}\n", ["key 'hdf5'", "file not found"]),
    "unknown-key": (None, "vectors: {zarr: g.zarr, dataset: emb}\n", ["unknown key 'dataset'", "array, ids"]),
    "two-kinds": (None, "vectors: {zarr: g.zarr, hdf5: v.h5}\n", ["key 'zarr'", "or key 'hdf5'"]),
    "corrupt-chunk": (corrupt_chunk, "vectors: g.zarr\n", ["g.zarr, rows ", "could not read", "corrupt"]),
    "not-2-d": (g_extra, "vectors: {zarr: g.zarr, array: cube}\n", ["g.zarr (array 'cube')", "expected a 2-D array",
                                                                      "(10, 4, 2)"]),
    "one-d": (None, "vectors: {zarr: g.zarr, array: ids}\n", ["expected a 2-D array", "(3000,)"]),
    "bool-dtype": (g_extra, "vectors: {zarr: g.zarr, array: flags}\n", ["expected numbers", "bool"]),
    "text-dtype": (g_extra, "vectors: {zarr: g.zarr, array: words}\n", ["expected numbers"]),
    "ids-count": (None, "vectors: {hdf5: v.h5, dataset: emb}\nids: short.txt\n", ["short.txt has 2 ids", "3000"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_store_exits_2_with_one_line(tmp_path, capsys, monkeypatch, case):
    setup, text, words = BAD[case]
    write_sets(tmp_path)
    (tmp_path / "short.txt").write_text("a\nb\n")
    if setup is not None:
        setup(tmp_path)
    monkeypatch.setattr(stores, "BLOCK_BYTES", TINY)  # read in blocks: the corrupt chunk is one of many
    out = tmp_path / "report"
    assert main(["run", str(manifest(tmp_path, text)), "--out", str(out), "--chapters", "isotropy",
                 "--formats", "html", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("embeval-report: error: ") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not out.exists()


def test_corrupt_chunk_names_the_block_rows(tmp_path, monkeypatch):
    write_sets(tmp_path)
    corrupt_chunk(tmp_path)
    monkeypatch.setattr(stores, "BLOCK_BYTES", 4 * 250 * D * 8)  # one chunk per block: rows 2751-3000
    with pytest.raises(InputError, match=r"^g\.zarr, rows 2751-3000: could not read \(a Zarr array; a corrupt"):
        load_source(tmp_path / "g.zarr")


def test_missing_zarr_package_says_how_to_install(tmp_path, monkeypatch):
    write_sets(tmp_path)
    monkeypatch.setitem(__import__("sys").modules, "zarr", None)  # import zarr -> ImportError
    with pytest.raises(InputError, match=r"g\.zarr: reading a Zarr store needs the zarr package: pip install "
                                         r"'embeval-report\[scale\]'"):
        load_source(tmp_path / "g.zarr")
