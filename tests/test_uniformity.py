"""Uniformity and alignment against independent references: dense numpy, quadrature, Monte Carlo, by hand."""
import math
import re
import warnings

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from scipy import integrate, special

from embeval_report import kernels
from embeval_report.chapters import uniformity as chapter_uni
from embeval_report.errors import InputError, UndefinedMetricWarning
from embeval_report.io import load_source
from embeval_report.chapters.uniformity import (alignment_uniformity_plane, distance_distribution, enable_alignment_text,
                                                narrative)
from embeval_report.io.pairs import PositivePairs, read_positive_pairs
from embeval_report.io.side_data import load_side_data
from embeval_report.metrics.uniformity import (alignment, label_pairs, measure_uniformity, positive_pairs_for,
                                               random_pair_sq_distance, sphere_sq_distance_density, sphere_uniformity,
                                               uniformity, uniformity_score)

matplotlib.use("Agg")


def dense_uniformity(z, normalize=True, t=2.0, eps=1e-12):
    """Seed 004's numpy reference: the full n x n matrix, diagonal removed."""
    z = np.asarray(z, np.float64)
    if normalize:
        z = z / (np.linalg.norm(z, axis=1, keepdims=True) + eps)
    D = ((z[:, None, :] - z[None, :, :]) ** 2).sum(-1)
    off = D[~np.eye(len(z), dtype=bool)]
    return np.log(np.exp(-t * off).mean())


def uniform_sphere(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 23 rows, so that small inputs span several diagonal and off-diagonal blocks."""
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 23 * 23 * 24)


# ------------------------------------------------------------------ closed form for the sphere

@pytest.mark.parametrize("d", [2, 3, 7, 64, 300])
@pytest.mark.parametrize("t", [0.5, 2.0, 5.0])
def test_sphere_closed_form_matches_quadrature(d, t):
    if d == 2:  # c = cos θ with θ uniform on [0, π]
        val, _ = integrate.quad(lambda th: math.exp(-t * (2 - 2 * math.cos(th))), 0, math.pi)
        expected = math.log(val / math.pi)
    else:  # c has density ∝ (1 − c²)^((d − 3)/2) on [−1, 1]
        w = lambda c: (1 - c * c) ** ((d - 3) / 2)  # noqa: E731
        num, _ = integrate.quad(lambda c: w(c) * math.exp(-t * (2 - 2 * c)), -1, 1, limit=200)
        expected = math.log(num / integrate.quad(w, -1, 1, limit=200)[0])
    assert sphere_uniformity(d, t) == pytest.approx(expected, abs=1e-9)


def test_sphere_closed_form_limits():
    assert sphere_uniformity(1, 2.0) == pytest.approx(math.log((1 + math.exp(-8)) / 2))  # S^0 = {−1, +1}
    assert sphere_uniformity(4096, 2.0) == pytest.approx(-4 + 8 / 4096, abs=1e-5)  # −2t + 2t²/d
    assert sphere_uniformity(64) == pytest.approx(-3.8752, abs=1e-4)


@pytest.mark.parametrize("d", [3, 16])
def test_uniform_points_on_sphere_match_closed_form_by_monte_carlo(d):
    m = 400_000  # independent pairs: direct Monte Carlo of E exp(−2‖x − y‖²)
    x, y = uniform_sphere(m, d, 1), uniform_sphere(m, d, 2)
    k = np.exp(-2 * ((x - y) ** 2).sum(1))
    assert math.log(k.mean()) == pytest.approx(sphere_uniformity(d), abs=4 * k.std() / k.mean() / math.sqrt(m))
    # the all-pairs uniformity of one uniform sample: its interval covers the closed form
    u = uniformity(uniform_sphere(3000, d, 3).astype(np.float32), device="cpu")
    assert u.method == "exact"
    assert u.ci_low <= sphere_uniformity(d) <= u.ci_high
    assert abs(u.value - sphere_uniformity(d)) < 0.01


def test_sphere_distance_density_integrates_to_one_and_matches_samples():
    for d in (3, 10, 64):
        assert integrate.quad(lambda s: sphere_sq_distance_density(s, d), 0, 4)[0] == pytest.approx(1, abs=1e-6)
    x, y = uniform_sphere(200_000, 10, 4), uniform_sphere(200_000, 10, 5)
    sq = ((x - y) ** 2).sum(1)
    frac = integrate.quad(lambda s: sphere_sq_distance_density(s, 10), 0, 1.5)[0]
    assert np.mean(sq < 1.5) == pytest.approx(frac, abs=0.005)


# ------------------------------------------------------------------ exact chunked == dense

@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("t", [0.5, 2.0, 7.0])
@pytest.mark.parametrize("n", [101, 47])  # 47 = 2 blocks of 23 + a block of one row
def test_exact_chunked_equals_dense_reference_numpy_and_torch(small_blocks, normalize, t, n):
    rng = np.random.default_rng(int(10 * t) + normalize)
    X = (rng.standard_normal((n, 6)) * rng.uniform(0.2, 1.5, 6) + 0.3).astype(np.float32)
    ref = dense_uniformity(X, normalize, t)
    got = uniformity_score(X, normalize=normalize, t=t)
    assert type(got) is np.float64
    assert got == pytest.approx(ref, rel=1e-10, abs=1e-12)
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        gt = uniformity_score(torch.tensor(X, dtype=dtype), normalize=normalize, t=t)
        assert isinstance(gt, torch.Tensor) and gt.ndim == 0 and gt.dtype == dtype
        # torch normalisation is F.normalize (max(‖z‖, eps)); both are within rounding of the reference
        ref_t = dense_uniformity(torch.nn.functional.normalize(torch.tensor(X, dtype=torch.float64), dim=1).numpy(),
                                 False, t) if normalize else ref
        assert float(gt) == pytest.approx(ref_t, rel=tol, abs=tol)


def test_exact_does_not_underflow_for_far_apart_unnormalised_rows(small_blocks):
    X = np.random.default_rng(0).standard_normal((60, 4)) * 40  # exp(−2‖x−y‖²) underflows in float64
    D = ((X[:, None] - X[None]) ** 2).sum(-1)[~np.eye(60, dtype=bool)]
    expected = special.logsumexp(-2 * D) - math.log(60 * 59)
    assert uniformity_score(X, normalize=False) == pytest.approx(expected, rel=1e-9)


def test_potential_kernel_rows_equal_dense_row_sums(small_blocks):
    X = np.random.default_rng(3).standard_normal((75, 5))
    rows = kernels.gaussian_potential_rows(X, 1.3, device="cpu")
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    K = np.exp(-1.3 * D)
    np.fill_diagonal(K, 0)
    np.testing.assert_allclose(rows, np.log(K.sum(1)), rtol=1e-10)


def test_uniformity_score_rejects_other_types_and_shapes():
    with pytest.raises(TypeError):
        uniformity_score([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError):
        uniformity_score(np.ones((1, 3)))


# ------------------------------------------------------------------ intervals

def test_jackknife_interval_equals_brute_force_leave_one_out(small_blocks):
    X = np.random.default_rng(5).standard_normal((40, 3)) + 0.5
    u = uniformity(X, device="cpu")
    assert u.value == pytest.approx(dense_uniformity(X), abs=1e-10)
    loo = np.array([dense_uniformity(np.delete(X, i, 0)) for i in range(40)])
    se = math.sqrt(39 / 40 * np.sum((loo - loo.mean()) ** 2))
    assert u.std_error == pytest.approx(se, rel=1e-6)
    assert u.ci_low == pytest.approx(u.value - 1.959964 * se, rel=1e-5)


def test_sampled_estimate_is_unbiased_and_its_interval_covers_the_exact_value():
    X = (np.random.default_rng(6).standard_normal((400, 8)) + 0.4).astype(np.float32)
    exact = uniformity(X, device="cpu").value
    assert exact == pytest.approx(dense_uniformity(X), abs=1e-9)
    reps = [uniformity(X, sample_size=4000, seed=s, device="cpu") for s in range(60)]
    assert all(r.method == "sampled" and r.n_pairs == 4000 and "sample size" in r.reason for r in reps)
    covered = np.mean([r.mc_ci[0] <= exact <= r.mc_ci[1] for r in reps])
    assert covered >= 0.85  # nominal 95 %
    assert all(r.ci_low <= r.mc_ci[0] and r.ci_high >= r.mc_ci[1] for r in reps)  # entity error added
    assert np.mean([math.exp(r.value) for r in reps]) == pytest.approx(math.exp(exact), rel=0.01)
    big = uniformity(X, sample_size=400_000, seed=1, device="cpu")
    assert big.ci_low <= exact <= big.ci_high and big.mc_ci[0] <= exact <= big.mc_ci[1]


def test_pair_budget_switches_to_sampling_and_says_why():
    X = np.random.default_rng(7).standard_normal((300, 4))
    u = uniformity(X, pair_budget=1000, device="cpu")
    assert u.method == "sampled" and "exceed the exact budget" in u.reason


# ------------------------------------------------------------------ alignment

def test_alignment_hand_computed():
    X = np.array([[1.0, 0.0], [0.0, 3.0], [-2.0, 0.0], [5.0, 0.0]])
    i, j = np.array([0, 0, 0]), np.array([1, 2, 3])  # squared distances on the circle: 2, 4, 0
    a2 = alignment(X, i, j, device="cpu")
    assert a2.value == pytest.approx(2.0) and a2.n_pairs == 3
    np.testing.assert_allclose(a2.sq_distances, [2.0, 4.0, 0.0], atol=1e-12)
    assert alignment(X, i, j, alpha=1.0, device="cpu").value == pytest.approx((math.sqrt(2) + 2 + 0) / 3)
    # one entity in every pair: the entity jackknife is undefined, pairs are treated as independent
    assert "independent" in a2.ci_method and a2.ci_low == pytest.approx(max(0.0, 2 - 1.959964 * 2 / math.sqrt(3)))


def test_alignment_entity_jackknife_equals_brute_force():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((30, 4))
    i, j = rng.integers(0, 30, 80), rng.integers(0, 30, 80)
    keep = i != j
    i, j = i[keep], j[keep]
    a = alignment(X, i, j, device="cpu")
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    per = ((U[i] - U[j]) ** 2).sum(1)
    assert a.value == pytest.approx(per.mean())
    ents = np.unique(np.concatenate([i, j]))
    loo = np.array([per[(i != e) & (j != e)].mean() for e in ents])
    se = math.sqrt((len(ents) - 1) / len(ents) * np.sum((loo - loo.mean()) ** 2))
    assert a.ci_high == pytest.approx(a.value + 1.959964 * se, rel=1e-5)
    assert "jackknife" in a.ci_method


def test_random_pair_distance_is_exact_mean_over_all_pairs():
    X = np.random.default_rng(9).standard_normal((50, 5)) + 1
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    D = ((U[:, None] - U[None]) ** 2).sum(-1)[~np.eye(50, dtype=bool)]
    assert random_pair_sq_distance(X, device="cpu") == pytest.approx(D.mean(), abs=1e-10)


# ------------------------------------------------------------------ positive pairs from a file

IDS = np.array(["a", "b", "c", "d_1", "e e"], dtype=object)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_positive_pairs_file_is_parsed_with_free_column_names(tmp_path):
    p = write(tmp_path, "pairs.csv", "left,right,weight\na,b,1\n c , d_1 ,0.5\ne e,a,2\n")
    pairs = read_positive_pairs(p, IDS)
    assert pairs.i.tolist() == [0, 2, 4] and pairs.j.tolist() == [1, 3, 0]
    assert pairs.source == "file" and not pairs.sampled and "3 pairs from pairs.csv" in pairs.description
    tsv = read_positive_pairs(write(tmp_path, "p.tsv", "q\tq\nb\tc\n\n"), IDS)  # duplicate names, blank end
    assert tsv.i.tolist() == [1] and tsv.j.tolist() == [2]


@pytest.mark.parametrize("text, expected", [
    ("x,y\na,b\nb,zz\n", ["pairs.csv", "row 2", "line 3", "'zz'", "column 'y'"]),
    ("x,y\na,b\n,c\n", ["pairs.csv", "row 2", "missing id"]),
    ("x,y\na,b\nc,c\n", ["pairs.csv", "row 2", "'c' with itself"]),
    ("only\na\n", ["pairs.csv", "1 column", "two id columns"]),
    ("x,y\n", ["pairs.csv", "no pairs"]),
    ("x,y\na,b,c,d\n", ["pairs.csv", "could not read", "line 2"]),
    ("a,b\nc,d_1\n", ["pairs.csv", "line 1", "header row"]),
    ("x,y\n\na,b\n\nb,zz\n", ["pairs.csv", "row 2 (line 5)", "'zz'"]),
])
def test_positive_pairs_file_errors_name_file_row_and_id(tmp_path, text, expected):
    with pytest.raises(InputError) as e:
        read_positive_pairs(write(tmp_path, "pairs.csv", text), IDS)
    for part in expected:
        assert part in str(e.value)


def make_set(tmp_path, labels=None, pairs_text=None):
    X = np.random.default_rng(10).standard_normal((5, 3)).astype(np.float32)
    np.save(tmp_path / "v.npy", X)
    (tmp_path / "ids.txt").write_text("\n".join(IDS) + "\n")
    man = {"vectors": "v.npy", "ids": "ids.txt"}
    if labels is not None:
        (tmp_path / "meta.csv").write_text("id,label\n" + "".join(f"{i},{lab}\n" for i, lab in zip(IDS, labels)))
        man["metadata"] = "meta.csv"
    if pairs_text is not None:
        write(tmp_path, "pairs.csv", pairs_text)
        man["positive_pairs"] = "pairs.csv"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(man))
    return load_source(tmp_path / "m.yaml")


def with_side(es):
    return es, load_side_data(es)


def test_positive_pairs_for_prefers_the_file_then_labels_then_none(tmp_path):
    for sub in ("f", "l", "n"):
        (tmp_path / sub).mkdir()
    es = make_set(tmp_path / "f", labels=["x", "x", "y", "y", ""], pairs_text="s,t\na,e e\n")
    assert positive_pairs_for(es, load_side_data(es)).source == "file"
    lp = positive_pairs_for(*with_side(make_set(tmp_path / "l", labels=["x", "x", "y", "y", ""])))
    assert lp.source == "labels" and sorted(zip(lp.i.tolist(), lp.j.tolist())) == [(0, 1), (2, 3)]
    assert positive_pairs_for(*with_side(make_set(tmp_path / "n"))) is None


# ------------------------------------------------------------------ label-derived pairs

def test_label_pairs_enumerates_all_same_label_pairs():
    labels = np.array(["a", "b", "a", None, "c", "a", "b", np.nan], dtype=object)
    p = label_pairs(labels)
    got = sorted(tuple(sorted(x)) for x in zip(p.i.tolist(), p.j.tolist()))
    brute = sorted((i, j) for i in range(8) for j in range(i + 1, 8)
                   if isinstance(labels[i], str) and labels[i] == labels[j])
    assert got == brute and p.n_available == 4 and not p.sampled
    assert label_pairs(np.array(["a", "b", "c"], dtype=object)) is None


def test_label_pairs_are_sampled_uniformly_over_all_same_label_pairs():
    labels = np.repeat(np.array(["big", "small", "solo"], dtype=object), [400, 40, 1])
    p = label_pairs(labels, max_pairs=20_000, seed=3)
    assert p.sampled and len(p) == 20_000 and p.n_available == 79_800 + 780
    assert np.all(labels[p.i] == labels[p.j]) and np.all(p.i != p.j)
    assert np.mean(labels[p.i] == "small") == pytest.approx(780 / 80_580, abs=0.003)  # ∝ C(n_c, 2)
    assert "sampled at random (seed 3)" in p.description
    q = label_pairs(labels, max_pairs=20_000, seed=3)
    assert np.array_equal(p.i, q.i) and np.array_equal(p.j, q.j)
    # members are drawn uniformly within a class
    both = np.concatenate([p.i, p.j])
    counts = np.bincount(both[labels[both] == "big"], minlength=400)
    assert counts.min() > 0.6 * counts.mean()


# ------------------------------------------------------------------ the chapter's result

def test_measure_uniformity_metrics_verdicts_and_figures(tmp_path):
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((4, 16))
    lab = rng.integers(0, 4, 300)
    X = (centres[lab] + 0.8 * rng.standard_normal((300, 16))).astype(np.float32)
    labels = np.array([f"g{k}" for k in lab], dtype=object)
    r = measure_uniformity(X, label_pairs(labels), seed=0, device="cpu")
    assert set(r.metrics) == {"uniformity", "uniformity_gap", "alignment"}
    assert r.values["uniformity"] == pytest.approx(dense_uniformity(X), abs=1e-9)
    assert r.values["uniformity_gap"] == pytest.approx(r.values["uniformity"] - sphere_uniformity(16))
    assert r.metrics["alignment"].verdict is None  # same-label pairs: no verdict
    assert r.metrics["uniformity"].verdict == ("healthy" if r.values["uniformity"] < -2 else "concerning")
    assert r.values["alignment"] < r.random_pair_sq_distance  # same-cluster pairs are closer than random ones
    assert r.abtt is not None and r.abtt["alignment"] is not None
    text = narrative(r)
    assert "same-label pairs" in text and "gets no verdict" in text and "closer than random pairs" in text
    # explicit pairs get the box's verdict
    i = np.arange(0, 300, 2)
    rp = measure_uniformity(X, PositivePairs(i, i + 1, "file", "150 pairs from p.csv", 150, False),
                            abtt=False, device="cpu")
    assert rp.metrics["alignment"].verdict in ("healthy", "concerning")
    assert "Trade-off" in rp.metrics["alignment"].reference
    # without pairs: uniformity alone, and the narrative says what would enable alignment
    r0 = measure_uniformity(X, None, sample_size=20_000, device="cpu")
    assert "alignment" not in r0.metrics and r0.uniformity.method == "sampled"
    assert "alignment is not reported" in narrative(r0) and "positive_pairs" in enable_alignment_text()
    for res in (r, r0):
        for fig in (alignment_uniformity_plane(res), distance_distribution(res)):
            assert isinstance(fig, matplotlib.figure.Figure)
            matplotlib.pyplot.close(fig)


def test_uniformity_verdict_withheld_where_the_box_value_is_unreachable():
    X = uniform_sphere(200, 2, 12)  # on the circle the optimum is −1.575 > −2
    r = measure_uniformity(X, None, abtt=False, device="cpu")
    assert r.metrics["uniformity"].verdict is None
    assert "cannot be reached" in narrative(r)


# ------------------------------------------------------------------ degenerate input, side data, old import path

def test_positive_pairs_come_from_the_validated_side_data_then_labels():
    from embeval_report.io.side_data import SideData

    class Set:  # the part of an EmbeddingSet positive_pairs_for reads
        def __init__(self, labels):
            self.metadata = {"label": pd.Series(labels, dtype=object)}

        def has(self, what):
            return what == "metadata.label" and self.metadata["label"] is not None

    given = PositivePairs(np.array([0]), np.array([1]), "file", "1 pair from p.csv", 1, False)
    assert positive_pairs_for(Set(["a", "a", "b"]), SideData({"positive_pairs": given})) is given
    assert positive_pairs_for(Set(["a", "a", "b"]), SideData()).source == "labels"
    one_class = positive_pairs_for(Set(["a"] * 6), SideData())
    assert len(one_class) == 15 and "1 label with" in one_class.description
    assert positive_pairs_for(Set(["a", "b", "c"]), SideData()) is None  # all labels distinct: no pairs
    assert positive_pairs_for(Set(None), SideData()) is None


def test_two_vectors_give_values_without_intervals():
    X = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    r = measure_uniformity(X, PositivePairs(np.array([0]), np.array([1]), "file", "1 pair", 1, False), device="cpu")
    assert r.values["uniformity"] == pytest.approx(-4.0)
    assert r.metrics["uniformity"].ci_low is None and r.metrics["alignment"].ci_low is None
    assert r.metrics["uniformity"].to_json()["value"] == pytest.approx(-4.0)
    assert "no interval" in chapter_uni.metrics_caption(r) and narrative(r)
    for fig in (alignment_uniformity_plane(r), distance_distribution(r)):
        matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("labels", [None, ["a"] * 100 + ["b"] * 100])
def test_identical_rows_are_a_collapsed_set_not_an_error(labels):
    X = np.tile(np.arange(1, 9, dtype=np.float32), (200, 1))
    pairs = None if labels is None else label_pairs(np.array(labels, dtype=object))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UndefinedMetricWarning)  # nothing here is undefined
        r = measure_uniformity(X, pairs, device="cpu")
    assert r.values["uniformity"] == pytest.approx(0.0, abs=1e-9)
    assert r.abtt is None and r.info["all_but_the_top"] is None  # nothing left after removing the mean
    text = narrative(r)
    assert "not compared" in text and not re.search(r"\bnan\b", text)
    if labels is not None:
        assert r.values["alignment"] == pytest.approx(0.0, abs=1e-9)
        assert "not comparable with random pairs" in text
    for fig in (alignment_uniformity_plane(r), distance_distribution(r)):
        matplotlib.pyplot.close(fig)


def test_small_and_wide_sets_run_and_precheck_needs_two_vectors():
    rng = np.random.default_rng(13)
    for X in (rng.standard_normal((3, 2)), rng.standard_normal((10, 50))):
        r = measure_uniformity(X, None, device="cpu")
        assert math.isfinite(r.values["uniformity"]) and not re.search(r"\bnan\b", narrative(r))
    small = measure_uniformity(rng.standard_normal((10, 50)), None, device="cpu")
    if small.values["uniformity_gap"] < 0:
        assert "below it" in narrative(small)

    class Tiny:
        n = 1
    assert "at least 2" in chapter_uni.precheck(Tiny(), None, None)


def test_threshold_text_comes_from_the_bands(monkeypatch):
    from embeval_report.metrics.thresholds import Bands

    X = uniform_sphere(300, 16, 14)
    r = measure_uniformity(X, PositivePairs(np.arange(0, 300, 2), np.arange(1, 300, 2), "file", "p", 150, False),
                           abtt=False, device="cpu")
    monkeypatch.setattr(chapter_uni, "ALIGNMENT_BOX", Bands("lower", 0.37, math.inf, "box", "typical good < 0.37"))
    assert "alignment < 0.37" in narrative(r) and "alignment < 0.37" in chapter_uni.plane_caption(r)
