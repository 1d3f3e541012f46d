"""GPU memory decisions made on the CPU with a fake device memory size: the tile shapes a search takes, whether a
set is held on the device, and one upload of a held set for a whole search (its corpus and every query block)."""
import numpy as np
import pytest
import torch

from embeval_report.kernels import device as dv
from embeval_report.kernels import graph_cache
from embeval_report.kernels import neighbours as nb

CUDA = torch.device("cuda")  # only a name: nothing is allocated


@pytest.fixture(autouse=True)
def _fresh_cache():
    graph_cache.clear_memory()
    yield
    graph_cache.clear_memory()


@pytest.fixture
def free(monkeypatch):
    """Set the GPU's free memory (bytes) that ``torch.cuda.mem_get_info`` and :func:`~.device.free_memory` report."""
    size = {"free": 0}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (size["free"], 141 * 2**30))

    def set_free(value: int) -> None:
        size["free"] = int(value)

    return set_free


@pytest.mark.parametrize("gib, n, rows, cols", [
    (132, 1_000_000, 36_044, 65_536),  # an H200 at the start of a search: column tiles of GPU_TILE_COLS
    (70, 1_000_000, 19_114, 65_536),  # an 80 GB card with a set held (10 GB used)
    (70, 50_000, 25_053, 50_000),  # a corpus narrower than a column tile: whole rows, two query blocks
    (0.5, 1_000_000, 136, 65_536),  # little room: few rows of a column tile
])
def test_tile_shapes_follow_the_free_memory(free, gib, n, rows, cols):
    """The tile shape of a search of n queries against n rows read from the device's free memory (no ``free``
    given): as many query rows as GPU_TILE_SHARE of it holds GPU_TILE_COPIES float32 tiles of GPU_TILE_COLS."""
    free(gib * 2**30)
    room = int(gib * 2**30 * nb.GPU_TILE_SHARE) // (4 * nb.GPU_TILE_COPIES)
    want = (min(n, room // cols), cols)
    assert nb._tile_shape(n, n, CUDA) == want == (rows, cols)
    assert nb._tile_shape(n, n, CUDA) == nb._tile_shape(n, n, CUDA, free=gib * 2**30)


def test_tiles_for_bfloat16_products_hold_twice_the_rows(free):
    free(8 * 2**30)
    rows4, cols = nb._tile_shape(10**6, 10**6, CUDA)
    rows2, cols2 = nb._tile_shape(10**6, 10**6, CUDA, itemsize=2)
    assert cols == cols2 == nb.GPU_TILE_COLS and rows2 in (2 * rows4, 2 * rows4 + 1)


def test_below_one_column_tile_one_row_of_whole_groups(free):
    free(nb.GROUP * 40 * nb.GPU_TILE_COPIES * 4 / nb.GPU_TILE_SHARE + 8)  # room for 40 groups of 32 columns
    assert nb._tile_shape(1000, 10**6, CUDA) == (1, 40 * nb.GROUP)


def test_a_set_is_held_on_the_device_only_when_it_fits_its_share(free, monkeypatch):
    """:func:`~.device.resident` keeps a device copy when the set takes at most RESIDENT_SHARE of the free memory
    (here the copy is a host tensor: the upload is replaced), and drops it after the block."""
    X = np.zeros((1000, 256), dtype=np.float32)  # 1 MB
    monkeypatch.setattr(dv, "to_tensor", lambda a, dtype=None, device=None: torch.as_tensor(a))
    for size, held in ((X.nbytes / dv.RESIDENT_SHARE, True), (X.nbytes / dv.RESIDENT_SHARE - 1, False)):
        free(size)
        with dv.resident(X, CUDA):
            assert (id(X) in dv._RESIDENT) is held
        assert id(X) not in dv._RESIDENT
    with dv.resident(X, "cpu"):
        assert id(X) not in dv._RESIDENT  # nothing on the CPU


def test_gpu_steps_read_the_free_memory(free):
    free(80 * 2**30)
    assert dv.step_budget(CUDA) == int(dv.GPU_STEP_SHARE * 80 * 2**30)


@pytest.mark.parametrize("product", ["fp32", "tf32", "tf32x3"])
def test_a_held_set_is_uploaded_once_for_a_whole_search(product, monkeypatch):
    """Inside :func:`~.device.resident` a search's corpus and every query block (slices of the set's rows) are rows
    of the one device copy: no upload (emulated on the CPU: the copy registered by hand), the same lists."""
    monkeypatch.setattr(dv, "CANDIDATES", product)
    monkeypatch.setattr(nb, "CPU_COLLECT_TILE", (128, 256))
    monkeypatch.setattr(nb, "CPU_TILE", (128, 256))
    X = np.random.default_rng(60).standard_normal((700, 24)).astype(np.float32)
    cpu = torch.device("cpu")
    want, _ = nb._search(X, X, [(8, None)], "cosine", True, cpu, None, product=dv.exact_product(cpu))
    copy = torch.as_tensor(X.copy())
    looked = []
    real = dv._resident_rows

    def lookup(a, device):
        got = real(a, device)
        if isinstance(a, np.ndarray) and (a is X or a.base is X):
            looked.append(got is not None and got.data_ptr() >= copy.data_ptr()
                          and got.data_ptr() < copy.data_ptr() + copy.numel() * 4)
        return got

    monkeypatch.setattr(dv, "_resident_rows", lookup)
    dv._RESIDENT[id(X)] = (X, copy)
    try:
        got, _ = nb._search(X, X, [(8, None)], "cosine", True, cpu, None, product=dv.exact_product(cpu))
    finally:
        del dv._RESIDENT[id(X)]
    assert len(looked) >= 1 + -(-700 // 128) and all(looked)  # the corpus and each query block
    assert np.array_equal(want[0][0], got[0][0]) and np.array_equal(want[0][1], got[0][1])


def test_rows_of_a_held_set_are_found_only_for_whole_row_slices():
    X = np.arange(60, dtype=np.float32).reshape(20, 3)
    copy = torch.as_tensor(X.copy()) + 0  # another buffer: values tell the rows apart
    dv._RESIDENT[id(X)] = (X, copy)
    cpu = torch.device("cpu")
    try:
        assert torch.equal(dv._resident_rows(X[5:9], cpu), copy[5:9])
        assert dv._resident_rows(X, cpu) is copy
        assert dv._resident_rows(X[5:9, :2], cpu) is None  # not whole rows
        assert dv._resident_rows(X[::2], cpu) is None  # not consecutive
        assert dv._resident_rows(X[5:9].copy(), cpu) is None  # another array
        assert dv._resident_rows(X[5:9], CUDA) is None  # held on another device
    finally:
        del dv._RESIDENT[id(X)]
