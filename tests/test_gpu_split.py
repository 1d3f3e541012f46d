"""The split candidate product (``tf32x3``: 22-bit inputs as two TF32 halves, three TF32 passes) and its error bound,
emulated on the CPU (its passes are IEEE float32 there, exact products of TF32 halves as on a GPU) and run on a GPU
by the ``device`` fixture where one is lent."""
import numpy as np
import pytest
import torch

from embeval_report.kernels import device as dv
from embeval_report.kernels import graph_cache, knn
from embeval_report.kernels import neighbours as nb
from tests.test_neighbours import _reference

P = dv.TF32X3


@pytest.fixture(autouse=True)
def _fresh_cache():
    graph_cache.clear_memory()
    yield
    graph_cache.clear_memory()


def _bound(q, C64, Q64, prod=P):
    c_d = prod.rounded(C64).double()
    return dv.product_bound(q.double().norm(dim=1), (q.double() - Q64).norm(dim=1), float(C64.norm(dim=1).max()),
                            float((c_d - C64).norm(dim=1).max()), float(c_d.norm(dim=1).max()), Q64.shape[1], prod)


def _error_and_bound(Q64, C64, prod=P):
    q, c = prod.rounded(Q64), prod.rounded(C64)
    with prod.matmul():
        p = dv.candidate_mm(q, c.T).double()
    return (p - Q64 @ C64.T).abs(), _bound(q, C64, Q64, prod)


def test_split_inputs_are_two_exact_tf32_halves():
    """The rounded input is float32 rounded to nearest even at 22 bits (checked through frexp in float64), and it
    is exactly h + l with h and l TF32 values (11 significand bits), l at most half an ulp of h, so the three
    passes multiply exact TF32 numbers whatever rounding the hardware's own TF32 conversion does."""
    rng = np.random.default_rng(40)
    x = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-30, 30, 20000),
                        (1 + (2 * np.arange(64) + 1) * 2.0**-22) * 2.0 ** rng.integers(-5, 5, 64)]).astype(np.float32)
    t = torch.as_tensor(x)
    r = P.rounded(t)
    mant, expo = np.frexp(x.astype(np.float64))
    want = np.ldexp(np.round(mant * 2.0**22) / 2.0**22, expo).astype(np.float32)
    np.testing.assert_array_equal(r.numpy(), want)
    hi, lo = dv._split(r)
    assert torch.equal(hi + lo, r)
    assert torch.equal(dv._round_bits(hi, 11), hi) and torch.equal(dv._round_bits(lo, 11), lo)
    assert bool((lo.abs() <= hi.abs() * 2.0**-11).all())
    assert bool(((r.double() - t.double()).abs() <= t.double().abs() * 2.0**-22).all())


def test_the_split_bound_is_tighter_than_one_tf32_pass():
    """For unit rows of 768 dimensions the split's bound is under half the TF32 bound (the inputs' rounding term
    falls from about 2^-11 to 2^-22 of the norms; the accumulation allowance stays about gamma_{d+1})."""
    rng = np.random.default_rng(41)
    X = torch.as_tensor(rng.standard_normal((50, 768)))
    X = X / X.norm(dim=1, keepdim=True)
    b_split = float(_bound(P.rounded(X), X, X).max())
    b_tf32 = float(_bound(dv.TF32.rounded(X), X, X, dv.TF32).max())
    assert b_split < 0.5 * b_tf32
    assert P.accumulation(768) == pytest.approx(dv.TF32.accumulation(768), rel=5e-3)  # kappa^2, cross terms


def test_split_bound_holds(device):
    """|p - s| <= B for random rows, unit rows, a clustered set and rows of very different scales."""
    dev = torch.device(device)
    rng = np.random.default_rng(42)
    centres = rng.standard_normal((8, 200))
    clustered = centres[rng.integers(0, 8, 600)] + 0.3 * rng.standard_normal((600, 200))
    scaled = rng.standard_normal((300, 200)) * 10.0 ** rng.uniform(-6, 6, (300, 1))
    for X in (rng.standard_normal((300, 200)), clustered, scaled):
        X = torch.as_tensor(X, device=dev)
        for Xn in (X, X / X.norm(dim=1, keepdim=True)):
            err, B = _error_and_bound(Xn[:64], Xn)
            assert bool((err <= B[:, None]).all())


def test_split_bound_is_attained_on_adversarial_inputs(device):
    r"""Rows built so that each term of the bound other than the accumulation allowance is attained (float32 sums
    exact in any order, so the platform's accumulation order cannot move the result):

    * the inputs' rounding: every coordinate m 2^e with m just above the midpoint below 1 at 22 bits rounds up to
      2^e (so l = 0), and p - s = (2c + c^2)|x|^2 exactly;
    * the omitted l l': every coordinate (1 + 2^-11) 2^e is exact at 22 bits, a tie at 11 bits, so h = 2^e (even)
      and l = 2^(e-11): the passes give |x|^2 - |l|^2, short by 2^-22 |h|^2, the bound's 2^-22 kappa^2 |x|^2 within
      2^-9.

    The rest of the bound is the accumulation allowance (about gamma_{d+1} |x|^2 with the tensor cores' unit 2^-21),
    which round-to-nearest float32 sums that are exact cannot show."""
    dev = torch.device(device)
    rng = np.random.default_rng(43)
    d = 256
    signs = torch.as_tensor(rng.choice([-1.0, 1.0], d), device=dev)
    g = (d + 1) * P.unit / (1 - (d + 1) * P.unit)
    kappa2 = 1 / (1 - 2.0**-11) ** 2
    allowance = 1.01 * kappa2 * (g + 3 * g * (1 + g) ** 2 * 2.0**-10)

    m = 1 - 2.0**-24
    x = (signs * m * 2.0 ** torch.as_tensor(rng.integers(-6, 1, d), device=dev).double())[None, :]
    assert torch.equal(P.rounded(x).double(), x / m)
    err, B = _error_and_bound(x, x)
    c = 1 / m - 1
    rounded_sq = float(((x / m) ** 2).sum())
    assert float(err) == pytest.approx((2 * c + c * c) * rounded_sq, rel=1e-9)
    assert float(err) <= float(B) <= float(err) * (1 + 1e-9) + allowance * rounded_sq

    e = torch.as_tensor(rng.integers(-1, 1, d), device=dev).double()
    x = (signs * (1 + 2.0**-11) * 2.0**e)[None, :]
    hi, lo = dv._split(P.rounded(x).float())
    assert torch.equal(P.rounded(x).double(), x) and torch.equal(hi.double(), (signs * 2.0**e)[None, :])
    err, B = _error_and_bound(x, x)
    assert float(err) == float((lo.double() ** 2).sum()) == 2.0**-22 * float((hi.double() ** 2).sum())
    omitted = 2.0**-22 * kappa2 * float((x * x).sum())  # the bound's term for the omitted l l'
    assert float(err) <= float(B) and float(err) >= omitted * (1 - 2.0**-9)
    assert float(B) <= omitted * (1 + 1e-9) + allowance * float((x * x).sum())


def test_the_split_runs_three_tf32_passes_and_plain_products_stay_ieee(monkeypatch):
    """Inside the split's block a plain float32 product is IEEE (its 22-bit inputs are then well within the bound),
    and :func:`candidate_mm` splits both sides once and sets TF32 only around its passes."""
    cuda = torch.backends.cuda.matmul
    a, b = P.rounded(torch.randn(5, 8)), P.rounded(torch.randn(8, 3))
    splits, passes = [], []
    real_split, real_matmul = dv._split, torch.matmul
    monkeypatch.setattr(dv, "_split", lambda x: (splits.append(cuda.fp32_precision), real_split(x))[1])
    monkeypatch.setattr(torch, "matmul", lambda *x, **k: (passes.append(cuda.fp32_precision), real_matmul(*x, **k))[1])
    saved = cuda.fp32_precision
    try:
        cuda.fp32_precision = "tf32"
        with P.matmul():
            assert cuda.fp32_precision == "ieee"
            p = dv.candidate_mm(a, b)
            assert cuda.fp32_precision == "ieee"
        monkeypatch.undo()
        assert splits == ["ieee", "ieee"] and passes == ["tf32"] and cuda.fp32_precision == "tf32"
        with dv.exact_matmul():
            assert torch.allclose(p, a @ b, rtol=0, atol=1e-5)
    finally:
        cuda.fp32_precision = saved


def test_gpus_take_one_tf32_pass_and_the_split_only_when_asked(monkeypatch):
    """The measured decision (benchmarks/README.md, "split products"): on clustered data the split saves about two
    re-scored entries a row in 100,000 (tight clusters: 17), far below the ~375 that would pay for its two extra
    passes, so a GPU of capability 8+ keeps one TF32 pass; the split is taken when forced."""
    monkeypatch.setattr(dv, "CANDIDATES", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert dv.exact_product(torch.device("cuda")) is dv.TF32
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert dv.exact_product(torch.device("cuda")) is dv.FP32
    monkeypatch.setattr(dv, "CANDIDATES", "tf32x3")
    assert dv.exact_product(torch.device("cuda")) is dv.TF32X3 and dv.exact_product(torch.device("cpu")) is P


def _float64_lists(X, Q, metric, drop_self, k):
    """The float64 scores (the reference of tests/test_neighbours.py) and numpy's stable top-k of them."""
    S = _reference(X, Q, metric, drop_self)
    return S, np.argsort(-S, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_split_candidates_give_the_float64_lists(metric, device, monkeypatch):
    """Searches on split candidates (forced), the kept-entry pass and the proven pool with its second search: the
    float64 lists (exact ties: the lower index), over several tiles, near-ties included; the passes ran split."""
    monkeypatch.setattr(dv, "CANDIDATES", "tf32x3")
    monkeypatch.setattr(nb, "CPU_COLLECT_TILE", (97, 300))
    monkeypatch.setattr(nb, "CPU_TILE", (97, 300))
    calls = []
    real = dv._split
    monkeypatch.setattr(dv, "_split", lambda x: (calls.append(1), real(x))[1])
    rng = np.random.default_rng(44)
    X = (rng.standard_normal((900, 24)) + 0.7 * rng.standard_normal(24)).astype(np.float32)
    X[100:140] = X[100] + (np.arange(40)[:, None] * np.float32(1e-7) * rng.standard_normal(24)).astype(np.float32)
    Q = rng.standard_normal((80, 24)).astype(np.float32)
    for k in (1, 10, 45):
        graph_cache.clear_memory()
        idx, _ = knn(X, k, metric=metric, device=device, desc=None)
        S, want = _float64_lists(X, X, metric, True, k)
        differ = idx != want
        assert np.all(np.abs(np.take_along_axis(S, idx, 1) - np.take_along_axis(S, want, 1))[differ] <= 1e-13)
        idx, _ = knn(X, k, queries=Q, metric=metric, device=device, desc=None)
        S, want = _float64_lists(X, Q, metric, False, k)
        differ = idx != want
        assert np.all(np.abs(np.take_along_axis(S, idx, 1) - np.take_along_axis(S, want, 1))[differ] <= 1e-13)
    assert calls
    for k in (3, 30):  # the proven pool of a search of two plain plans, searched again where it cannot prove
        stats = {}
        found, _ = nb._search(X, X, [(k, None), (k + 2, None)], "cosine", True, torch.device(device), None,
                              product=dv.TF32X3, stats=stats)
        S, want = _float64_lists(X, X, "cosine", True, k + 2)
        for (idx, _), kk in zip(found, (k, k + 2)):
            differ = idx != want[:, :kk]
            assert np.all(np.abs(np.take_along_axis(S, idx, 1) - np.take_along_axis(S, want[:, :kk], 1))[differ]
                          <= 1e-13)
        assert stats["sweep"] == "pool" and stats["product"] == "tf32x3"
