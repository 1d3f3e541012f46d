"""Bootstrap replicates of moment statistics computed all at once on the host (one product of the weights with
the blocks' moments, stacked eigendecompositions): the same replicates as one at a time, to rounding, and the
covariance spectra shared by the isotropy and collapse chapters through the run's moments cache; and the
clustering chapter's t-SNE map made in a thread of its own, the same as made in turn."""
from __future__ import annotations

import numpy as np

from embeval_report.context import CacheFolder, ComputeContext
from embeval_report.kernels import moments_cache
from embeval_report.kernels.moments import block_moments
from embeval_report.metrics import collapse as col
from embeval_report.metrics import isotropy as iso
from embeval_report.stats import bootstrap_weights


def _set(n=900, d=10, seed=5):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) + 1.5).astype(np.float32)


def test_totals_equal_total_row_by_row_in_chunks():
    X = _set()
    m = block_moments(X, shift=X.mean(0).astype(float), n_blocks=23, seed=1, device="cpu")
    W = bootstrap_weights(23, 17, 4)
    N, s, G = m.totals(W)
    chunks = list(m.replicate_totals(W, d_total=2048))  # 2 replicates a chunk (64 MiB / 8 d²)
    assert len(chunks) == 9
    for r, w in enumerate(W):
        n1, s1, G1 = m.total(w)
        assert N[r] == n1
        np.testing.assert_allclose(s[r], s1, rtol=1e-13, atol=1e-9)
        np.testing.assert_allclose(G[r], G1, rtol=1e-13, atol=1e-9)
    np.testing.assert_allclose(np.concatenate([c[1][2] for c in chunks]), G, rtol=1e-13, atol=1e-9)


def test_isotropy_intervals_equal_the_replicates_computed_one_at_a_time():
    X = _set()
    r = iso.measure_isotropy(X, n_boot=60, seed=2, device="cpu")
    plan, mean, cov_m = iso.covariance_moments(X, n_boot=60, seed=2, device="cpu")
    assert plan.method == "bootstrap"
    W = bootstrap_weights(plan.units, plan.n_boot, 2)
    ref = np.array([np.linalg.eigvalsh(iso.covariance_from_moments(*cov_m.total(w))) for w in W])
    np.testing.assert_allclose(iso.covariance_replicate_spectra(X, plan, cov_m, 2), ref, rtol=1e-11, atol=1e-12)
    # the interval from replicates computed one at a time, here in the test: the same to rounding
    lam = ref[:, ::-1]
    pr = lam.sum(1) ** 2 / (lam ** 2).sum(1)
    lo, hi = plan.interval(r.values["participation_ratio"], pr, 0.95, iso.SPECS["participation_ratio"].range)
    m = r.metrics["participation_ratio"]
    np.testing.assert_allclose([m.ci_low, m.ci_high], [lo, hi], rtol=1e-12)


def test_collapse_replicate_spectra_equal_one_at_a_time():
    X = _set()
    n, d = X.shape
    plan = col.resampling_plan(n, d, 40)
    mean = X.astype(float).mean(0)
    mom = block_moments(X, shift=mean, n_blocks=plan.units, seed=3, device="cpu")
    W = bootstrap_weights(plan.units, plan.n_boot, 3)
    got = list(col._replicate_spectra(X, plan, mom, mean, n, 3))
    assert len(got) == len(W)
    for w, (N, parts) in zip(W, got):
        ref = col._spectra(*mom.total(w), mean, n)
        for a, b in zip(parts, ref):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)


def test_collapse_reads_the_isotropy_chapters_replicate_spectra(tmp_path):
    X = _set(1200, 12)
    np.save(tmp_path / "vectors.npy", X)
    Xm = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    events = []
    cache = CacheFolder(tmp_path / "moments", log=events.append)
    with ComputeContext(moments_cache=cache):
        iso.measure_isotropy(Xm, n_boot=30, seed=1, device="cpu")
        moments_cache._memory.clear()  # the collapse chapter's own process: only the folder is left
        shared = col.measure_collapse(Xm, n_boot=30, seed=1, id_rows=300, device="cpu")
        moments_cache._memory.clear()
    spectra = [e["source"] for e in events if e["pass"].startswith("covariance_replicate_spectra")]
    assert spectra == ["computed", "cache"]
    own = col.measure_collapse(X, n_boot=30, seed=1, id_rows=300, device="cpu")  # no cache: computed here
    for name, m in own.metrics.items():
        assert (m.value, m.ci_low, m.ci_high) == (shared.metrics[name].value, shared.metrics[name].ci_low,
                                                  shared.metrics[name].ci_high), name


def test_the_t_sne_map_made_aside_equals_the_one_made_in_turn(monkeypatch):
    """The clustering chapter makes its t-SNE map in a thread while k-means runs: the same coordinates as
    :func:`project` called in turn (single-threaded BLAS and OpenMP), here with the BLAS threads left as
    they are, as the chapter's other work leaves them."""
    from embeval_report.metrics import clustering as mclu
    from embeval_report.metrics import labels as mlab
    from embeval_report.metrics.labels import as_labelset

    X = _set(400, 16)
    labels = as_labelset(np.arange(400) % 4, 400, 2, "label")
    turn = mclu.project(X, labels, method="tsne", sample_size=150, seed=2)
    for module in (mclu, mlab):  # a thread even on a one-core runner (labels.aside starts it)
        monkeypatch.setattr(module, "_cores", lambda: 2)
    aside = mclu.project_aside(X, labels, method="tsne", sample_size=150, seed=2)
    got = aside()
    np.testing.assert_array_equal(got.positions, turn.positions)
    np.testing.assert_array_equal(got.coords, turn.coords)


def test_stacked_eigvalsh_is_each_matrix_decomposed_single_threaded(monkeypatch):
    from threadpoolctl import threadpool_limits

    from embeval_report.metrics import labels

    rng = np.random.default_rng(1)
    A = rng.standard_normal((7, 30, 30))
    A = A @ A.transpose(0, 2, 1)
    with threadpool_limits(1, user_api="blas"):
        ref = np.array([np.linalg.eigvalsh(a) for a in A])
    for cores in (1, 2, 3):
        monkeypatch.setattr(labels, "_cores", lambda cores=cores: cores)
        np.testing.assert_array_equal(iso.stacked_eigvalsh(A), ref)
