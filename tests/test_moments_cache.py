"""The run's moments cache: a pass over a memory-mapped set is made once per run, other arrays as before."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from embeval_report.kernels import moments, moments_cache, transforms
from embeval_report.kernels.device import unit_rows
from embeval_report.context import CacheFolder, ComputeContext
from embeval_report.kernels.moments_cache import space_of
from embeval_report.metrics import isotropy as iso
from embeval_report.metrics import uniformity as uni


@pytest.fixture
def mapped(tmp_path):
    rng = np.random.default_rng(3)
    X = (rng.standard_normal((3000, 12)) @ rng.standard_normal((12, 12)) + 2).astype(np.float32)
    np.save(tmp_path / "vectors.npy", X)
    with ComputeContext(moments_cache=CacheFolder(tmp_path / "moments")):
        yield np.load(tmp_path / "vectors.npy", mmap_mode="r"), X


def _no_pass(*args, **kwargs):
    raise AssertionError("a pass over the rows was made although the cache holds its result")


def test_passes_over_a_mapped_set_are_made_once_and_equal_the_computed(mapped, monkeypatch):
    Xm, X = mapped
    first = (moments.column_mean(Xm, device="cpu"), moments.unit_row_sum(Xm, device="cpu"),
             moments.block_moments(Xm, shift=np.ones(12), n_blocks=7, seed=2, device="cpu"),
             moments.block_moments(Xm, transform=unit_rows, n_blocks=3, device="cpu"))
    moments_cache._memory.clear()  # a later chapter's process: only the folder is left
    monkeypatch.setattr(moments, "iter_chunks", _no_pass)
    again = (moments.column_mean(Xm, device="cpu"), moments.unit_row_sum(Xm, device="cpu"),
             moments.block_moments(Xm, shift=np.ones(12), n_blocks=7, seed=2, device="cpu"),
             moments.block_moments(Xm, transform=unit_rows, n_blocks=3, device="cpu"))
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    for a, b in zip(first[2:], again[2:]):
        for x, y in zip(a.arrays(), b.arrays()):
            np.testing.assert_array_equal(x, y)
    monkeypatch.undo()
    # the same numbers as the computation on the array in memory (never cached)
    np.testing.assert_array_equal(first[0], moments.column_mean(X, device="cpu"))
    np.testing.assert_array_equal(first[2].G, moments.block_moments(X, shift=np.ones(12), n_blocks=7, seed=2,
                                                                     device="cpu").G)
    np.testing.assert_allclose(first[0], X.astype(float).mean(0), rtol=1e-12)


def test_other_parameters_slices_samples_and_a_changed_file_are_computed(mapped, tmp_path):
    Xm, X = mapped
    assert space_of(Xm) is not None
    assert space_of(Xm[:100]) is None and space_of(Xm[10:]) is None and space_of(np.asarray(X)) is None
    a = moments.block_moments(Xm, n_blocks=4, seed=0, device="cpu")
    b = moments.block_moments(Xm, n_blocks=4, seed=1, device="cpu")  # another seed: other blocks
    assert not np.array_equal(a.G, b.G)
    np.testing.assert_allclose(a.G.sum(0), b.G.sum(0), rtol=1e-10)
    mean = moments.column_mean(Xm, device="cpu")
    Y = X * 3
    np.save(tmp_path / "vectors.npy", Y)  # the file changed: its identity (size, time) with it
    st = os.stat(tmp_path / "vectors.npy")
    os.utime(tmp_path / "vectors.npy", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    Ym = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    np.testing.assert_allclose(moments.column_mean(Ym, device="cpu"), 3 * mean, rtol=1e-6)


def test_a_transform_the_cache_cannot_name_is_computed_every_time(mapped):
    Xm, _ = mapped
    calls = []

    def doubled(x):
        calls.append(1)
        return 2 * x

    moments.block_moments(Xm, transform=doubled, device="cpu")
    moments.block_moments(Xm, transform=doubled, device="cpu")
    moments.row_sum(Xm, transform=doubled, device="cpu")
    moments.row_sum(Xm, transform=doubled, device="cpu")
    assert len(calls) == 4


def test_uniformity_takes_the_isotropy_chapters_directions_and_abtt_pass(mapped, monkeypatch):
    Xm, X = mapped
    r_iso = iso.measure_isotropy(Xm, seed=5, device="cpu")
    iso.all_but_the_top_effect(Xm, base=r_iso, pcs=r_iso.directions(), seed=5, device="cpu", spread="sampled")
    moments_cache._memory.clear()
    # set_directions equals a separate single-block fit up to the order of summation
    fit = iso.PrincipalDirections.fit(X, device="cpu")
    shared = iso.set_directions(Xm, seed=5, device="cpu")
    np.testing.assert_allclose(shared.eigenvalues, fit.eigenvalues, rtol=1e-10)
    np.testing.assert_array_equal(shared.vectors, r_iso.directions().vectors)
    monkeypatch.setattr(moments, "iter_chunks", _no_pass)
    monkeypatch.setattr(transforms, "iter_chunks", _no_pass)  # the all-but-the-top every-D pass
    D = iso.best_apcs_removal(Xm, pcs=shared, device="cpu")
    monkeypatch.undo()
    assert D == iso.best_apcs_removal(X, pcs=fit, device="cpu")
    cached = uni.measure_uniformity(Xm, seed=5, sample_size=2000, device="cpu")
    moments_cache._memory.clear()
    with ComputeContext():  # no cache folder
        direct = uni.measure_uniformity(X, seed=5, sample_size=2000, device="cpu")
    assert cached.abtt["removed"] == direct.abtt["removed"]
    assert cached.uniformity.value == direct.uniformity.value
    assert cached.abtt["uniformity"].value == pytest.approx(direct.abtt["uniformity"].value, rel=1e-9)


def test_the_identity_is_the_whole_map_only(mapped):
    Xm, X = mapped
    assert space_of(np.asarray(Xm)) == space_of(Xm) is not None  # the plain view every metric takes
    assert space_of(np.asarray(Xm)[1:]) is None and space_of(np.asarray(Xm)[:, :5]) is None
    assert space_of(Xm.T) is None and space_of(np.asarray(Xm).reshape(-1)) is None


def test_all_but_the_top_sums_take_one_pass_for_every_d(monkeypatch):
    X = np.random.default_rng(1).standard_normal((500, 20))
    pcs = iso.PrincipalDirections.fit(X, device="cpu")
    chunks = []
    real = transforms.iter_chunks

    def counted(*args, **kwargs):
        chunks.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(transforms, "iter_chunks", counted)  # the pass: kernels.transforms.removed_unit_sums
    sums = iso._unit_sums(X, pcs, [0, 1, 2, 3, 5], "cpu")
    assert len(chunks) == 1 and sorted(sums) == [0, 1, 2, 3, 5]
    corrected = torch.as_tensor(iso.all_but_the_top(X, 2, pcs=pcs, device="cpu"), dtype=torch.float64)
    np.testing.assert_allclose(sums[2], unit_rows(corrected).sum(0).numpy(), rtol=1e-5, atol=1e-5)


def test_collapse_reads_the_isotropy_chapters_covariance_pass_at_any_dimension(tmp_path, monkeypatch):
    """Above 724 dimensions at the default budget (here 45, under a 16 MiB budget) the covariance moments get
    fewer than 64 blocks; collapse takes the same plan, so its second moments come from isotropy's pass."""
    from embeval_report.metrics import collapse as col

    X = np.random.default_rng(4).standard_normal((1200, 50)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", X)
    Xm = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    with ComputeContext(memory_budget="16MiB", moments_cache=CacheFolder(tmp_path / "moments")):
        plan = col.resampling_plan(*X.shape, 20)
        assert plan.method == "bootstrap" and plan.units < 64
        iso.measure_isotropy(Xm, n_boot=20, seed=3, device="cpu")
        moments_cache._memory.clear()
        monkeypatch.setattr(moments, "iter_chunks", _no_pass)
        shared = col.measure_collapse(Xm, n_boot=20, seed=3, id_rows=300, device="cpu")
        monkeypatch.undo()
        moments_cache._memory.clear()
    with ComputeContext(memory_budget="16MiB"):  # no cache: its own pass, the same numbers
        own = col.measure_collapse(X, n_boot=20, seed=3, id_rows=300, device="cpu")
    assert shared.values == own.values
