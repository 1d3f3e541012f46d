"""Scattered rows of a memory-mapped set: their pages are asked of the OS in merged requests, and the rows read are
the rows (:mod:`embeval_report.kernels.prefetch`)."""
import mmap

import numpy as np
import pytest

from embeval_report.kernels import prefetch
from embeval_report.kernels.pairs import gather_rows


@pytest.fixture
def mapped(tmp_path):
    X = np.random.default_rng(0).standard_normal((5000, 96)).astype(np.float32)  # 384-byte rows
    np.save(tmp_path / "x.npy", X)
    return X, np.load(tmp_path / "x.npy", mmap_mode="r")


def test_mapped_arrays_and_their_views_are_recognised(mapped):
    X, M = mapped
    assert prefetch.is_mapped(M) and prefetch.is_mapped(M[10:20]) and not prefetch.is_mapped(X)
    assert prefetch.prefetch_array_rows(X, np.arange(10)) == 0  # in memory: nothing asked


@pytest.mark.skipif(prefetch._MADVISE is None, reason="no madvise on this platform")
def test_neighbouring_pages_make_one_request(mapped, monkeypatch):
    _, M = mapped
    asked = []
    monkeypatch.setattr(prefetch, "_MADVISE", lambda address, length, advice: asked.append((address, length)) or 0)
    page = mmap.PAGESIZE
    rows_per_page = page // M.strides[0]
    far = 40 * rows_per_page
    rows = np.array([far + 3, 1, 2, 0, far, 4000])  # unordered, repeated pages
    assert prefetch.prefetch_array_rows(M, rows) == len(asked) == 3
    starts = [a for a, _ in asked]
    assert starts == sorted(starts) and all(a % page == 0 and n % page == 0 for a, n in asked)
    for r in rows:  # every row's bytes lie within a request
        lo, hi = M.ctypes.data + r * M.strides[0], M.ctypes.data + (r + 1) * M.strides[0]
        assert any(a <= lo and hi <= a + n for a, n in asked), r


@pytest.mark.skipif(prefetch._MADVISE is None, reason="no madvise on this platform")
def test_rows_read_through_a_row_map_ask_for_its_base_rows(mapped, monkeypatch):
    import torch

    from embeval_report.kernels.device import RowMap

    X, M = mapped
    asked = []
    monkeypatch.setattr(prefetch, "_MADVISE", lambda address, length, advice: asked.append(address) or 0)
    rows = np.array([3, 2000, 4000])
    mapped_rows = RowMap(M, lambda x: 2 * x, torch.device("cpu"))
    np.testing.assert_array_equal(prefetch.read_rows(mapped_rows, rows), 2 * X[rows])
    assert len(asked) == 3 and prefetch.prefetch_array_rows(RowMap(X, lambda x: x, torch.device("cpu")), rows) == 0


def test_gathered_rows_are_the_rows(mapped):
    X, M = mapped
    rng = np.random.default_rng(1)
    i, j = rng.integers(0, len(X), 700), rng.integers(0, len(X), 700)
    a, b = gather_rows(M, i, j)
    np.testing.assert_array_equal(a, X[i])
    np.testing.assert_array_equal(b, X[j])
    rows = np.unique(i)
    np.testing.assert_array_equal(prefetch.read_rows(M, rows), X[rows])
