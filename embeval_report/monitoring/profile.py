r"""The reference profile ``embeval-report profile`` writes and ``monitor`` scores new batches against.

A profile is a small folder holding what the drift signals of :mod:`.score` need from the reference
set, so the reference vectors themselves are never read again:

* ``profile.json`` — format name and version, the set's name, size and dimension, the seed, and the
  scalar statistics: trace of the covariance :math:`\mathrm{tr}\,\Sigma` and :math:`\mathrm{tr}\,\Sigma^2`
  (the mean-shift test), mean and standard deviation of the row norms, the all-pairs mean cosine
  (APCS, seed 000 §217.0.5.2) with the two variance components of its U-statistic, the participation
  ratio, and the k-NN calibration (threshold, its rank among the held-out rows' scores, the nominal rate);
* ``arrays.npz`` — the mean and the covariance (float64), the mean unit vector, 101 quantiles of the
  row norms and of every dimension, the row sample, and the calibration rows' k-NN distances.

**Row sample.** A seeded uniform sample of ``sample_size + calibration`` reference rows without
replacement (what a reservoir sample over the rows as a stream holds; Vitter 1985, Algorithm R). The
two-sample tests (MMD, per-dimension KS, domain classifier) compare a batch with it. Its first part is
the **k-NN reference**: the distance of a row to its ``k``-th nearest neighbour there is the row's
outlier score (Ramaswamy et al. 2000). The last ``calibration`` rows are held out of that index; their
scores give the no-drift distribution the batch's scores are compared with (both are rows outside the
index, so under no drift their scores are exchangeable).

**Calibrated anomaly threshold.** A batch row is anomalous when its score exceeds the
:math:`k`-th smallest of the :math:`m` held-out scores, :math:`k = \lceil (1-q)(m+1) \rceil` for the nominal
rate :math:`q` (:data:`ANOMALY_RATE`, 2.5 %: the share beyond :math:`\mu + 2\sigma` of a normal score, the
seed's rule, whatever the scores' actual tails; the conformal quantile, Vovk et al. 2005). Under no drift a new
row exceeds it with probability :math:`(m-k+1)/(m+1) \le q`, and the number of a batch's :math:`n` rows that do
is beta-binomial, :math:`\mathrm{BetaBin}(n, m-k+1, k)` (the exceedances of an order statistic; Gumbel &
von Schelling 1950), exactly, whatever the distribution of the scores. (Seed 000's :math:`\mu + 2\sigma` of the
scores flags 10–12 % of a heavy-tailed set's own rows.) A profile written before the calibration keeps its
held-out scores and is calibrated when it is read.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..version import __version__
from ..errors import InputError
from ..safe_files import check_target, replace_file, replace_with
from ..kernels import as_numpy, knn, resolve_device
from ..metrics.isotropy import cosine_moments, spectral_metrics

#: the folder format this version writes and reads
FORMAT = "embeval-report monitoring profile"
FORMAT_VERSION = 1
#: rows of the k-NN reference and two-sample tests, and held-out calibration rows
SAMPLE_SIZE, CALIBRATION = 5000, 1000
#: neighbour rank of the k-NN outlier score
K = 10
#: nominal share of reference rows beyond the anomaly threshold (the normal tail beyond mu + 2 sigma, the rule of
#: seed 000 §217.2.3.2, is 2.3 %), calibrated on the held-out rows
ANOMALY_RATE = 0.025
#: quantile levels stored for the norms and each dimension
QUANTILES = np.linspace(0.0, 1.0, 101)
#: rows per chunk of the moment passes
CHUNK = 32768
JSON_FILE, ARRAYS_FILE = "profile.json", "arrays.npz"
_ARRAYS = ("mean", "covariance", "mean_unit", "norm_quantiles", "dim_quantiles", "sample", "calibration_scores")


@dataclass
class Profile:
    """A reference set's sufficient statistics for monitoring (see the module docstring)."""

    name: str
    n: int
    d: int
    seed: int
    k: int
    n_index: int
    trace: float
    trace_sq: float
    norm_mean: float
    norm_sd: float
    apcs: float
    apcs_zeta1: float      # Var_x(u_x . E[u]) (first U-statistic variance component of APCS)
    apcs_zeta2: float      # Var over pairs of cos(x, y) (second component)
    participation_ratio_fraction: float
    anomaly_threshold: float
    calibration_anomalous_fraction: float
    mean: np.ndarray = field(repr=False)
    covariance: np.ndarray = field(repr=False)
    mean_unit: np.ndarray = field(repr=False)
    norm_quantiles: np.ndarray = field(repr=False)
    dim_quantiles: np.ndarray = field(repr=False)
    sample: np.ndarray = field(repr=False)
    calibration_scores: np.ndarray = field(repr=False)
    created: str = ""
    version: str = __version__
    format_version: int = FORMAT_VERSION
    anomaly_rate: float = ANOMALY_RATE   # the nominal rate q the threshold is calibrated to
    anomaly_rank: int = 0                # k: the threshold is the k-th smallest held-out score

    @property
    def exceedance(self) -> tuple[int, int]:
        """``(a, b)`` of the no-drift law of a batch's exceedances, BetaBin(n, a, b) = BetaBin(n, m − k + 1, k)."""
        m = len(self.calibration_scores)
        return m - self.anomaly_rank + 1, self.anomaly_rank

    @property
    def nominal_rate(self) -> float:
        """The probability that a row of the reference distribution exceeds the threshold, (m − k + 1)/(m + 1)."""
        a, b = self.exceedance
        return a / (a + b)

    @property
    def index(self) -> np.ndarray:
        """The k-NN reference rows (the first ``n_index`` rows of the sample)."""
        return self.sample[: self.n_index]

    @property
    def norm_cv(self) -> float:
        return self.norm_sd / self.norm_mean if self.norm_mean > 0 else float("nan")

    def scalars(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in _ARRAYS}
        return {"format": FORMAT, **d}


def _moments(X: np.ndarray, dev: torch.device) -> tuple:
    """Row sum, second-moment matrix (about a pilot mean), unit-row sum and unit-row Gram, in float64."""
    n, d = X.shape
    pilot = torch.as_tensor(X[: min(n, CHUNK)].astype(np.float64).mean(0), device=dev)
    s, G = torch.zeros(d, dtype=torch.float64, device=dev), torch.zeros(d, d, dtype=torch.float64, device=dev)
    su, Gu = torch.zeros_like(s), torch.zeros_like(G)
    norms = np.empty(n)
    for start in range(0, n, CHUNK):
        x = torch.as_tensor(X[start:start + CHUNK], device=dev, dtype=torch.float64)
        nr = x.norm(dim=1)
        norms[start:start + len(x)] = nr.cpu().numpy()
        u = x / nr[:, None]
        x = x - pilot
        s += x.sum(0)
        G += x.T @ x
        su += u.sum(0)
        Gu += u.T @ u
    mean = pilot + s / n
    cov = G / n - torch.outer(s / n, s / n)
    return mean.cpu().numpy(), cov.cpu().numpy(), su.cpu().numpy(), Gu.cpu().numpy(), norms


def calibrate(scores: np.ndarray, rate: float = ANOMALY_RATE) -> tuple[float, int]:
    """``(threshold, k)``: the k-th smallest of the held-out ``scores``, k = ⌈(1 − rate)(m + 1)⌉ (at most m; see
    the module docstring)."""
    s = np.sort(np.asarray(scores, float))
    k = min(len(s), math.ceil((1 - rate) * (len(s) + 1) - 1e-9))
    return float(s[k - 1]), int(k)


def knn_scores(index: np.ndarray, rows: np.ndarray, k: int, device="auto") -> np.ndarray:
    """Distance of each of ``rows`` to its ``k``-th nearest neighbour among ``index`` (Euclidean, exact)."""
    dist = knn(index, k, queries=rows, metric="euclidean", device=device, desc=None)[1]
    return dist[:, k - 1].astype(np.float64)


def build_profile(X, *, name: str = "", seed: int = 0, sample_size: int = SAMPLE_SIZE,
                  calibration: int = CALIBRATION, k: int = K, device="auto") -> Profile:
    """The monitoring profile of the reference vectors ``X`` (n x d; see the module docstring).

    The sample holds ``min(n, sample_size + calibration)`` rows; the calibration part is
    ``min(calibration, sample // 5)`` of them, the k-NN index the rest (at least ``k`` rows).
    """
    X = np.ascontiguousarray(as_numpy(X), dtype=np.float32)
    n, d = X.shape
    if n < 10:
        raise InputError(f"{name or 'reference'}: {n} vectors; a monitoring profile needs at least 10")
    dev = resolve_device(device)
    mean, cov, su, Gu, norms = _moments(X, dev)
    eig = np.linalg.eigvalsh(cov)
    apcs, apcs_sd = cosine_moments(su, Gu, float(n))
    mean_unit = su / n
    proj = np.empty(n)
    for start in range(0, n, CHUNK):
        x = X[start:start + CHUNK].astype(np.float64)
        proj[start:start + len(x)] = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ mean_unit
    rng = np.random.default_rng([seed, 82])
    size = min(n, sample_size + calibration)
    rows = np.sort(rng.choice(n, size, replace=False))
    rows = rows[rng.permutation(size)]  # the index and the calibration part are both uniform samples
    sample = X[rows].copy()
    n_cal = min(calibration, size // 5)
    n_index = size - n_cal
    if n_index < k + 1 or n_cal < 2:
        raise InputError(f"{name or 'reference'}: {n} vectors are too few for a k-NN reference with k = {k}")
    scores = knn_scores(sample[:n_index], sample[n_index:], k, device=dev)
    threshold, rank = calibrate(scores)
    dim_q = np.quantile(sample if n > 200_000 else X, QUANTILES, axis=0).astype(np.float32)
    return Profile(
        name=name, n=n, d=d, seed=seed, k=k, n_index=n_index, trace=float(np.trace(cov)),
        trace_sq=float((cov * cov).sum()), norm_mean=float(norms.mean()), norm_sd=float(norms.std(ddof=1)),
        apcs=float(apcs), apcs_zeta1=float(proj.var(ddof=1)), apcs_zeta2=float(apcs_sd ** 2),
        participation_ratio_fraction=spectral_metrics(eig, d)["participation_ratio_fraction"],
        anomaly_threshold=threshold, calibration_anomalous_fraction=float((scores > threshold).mean()),
        mean=mean, covariance=cov, mean_unit=mean_unit, norm_quantiles=np.quantile(norms, QUANTILES),
        dim_quantiles=dim_q, sample=sample, calibration_scores=scores,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), anomaly_rate=ANOMALY_RATE, anomaly_rank=rank)


def save_profile(profile: Profile, folder) -> Path:
    """Write ``profile`` into ``folder`` (created; an earlier profile there is replaced); return the folder."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--out {folder}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / JSON_FILE).exists():
        raise InputError(f"--out {folder}: a non-empty folder that is not a monitoring profile; give a new or empty "
                         "folder")
    folder.mkdir(parents=True, exist_ok=True)
    for name in (ARRAYS_FILE, JSON_FILE):  # both refused before either is written: a link there, a folder
        check_target(folder / name, "--out")

    def save_arrays(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez adds no suffix
            np.savez(f, **{k: getattr(profile, k) for k in _ARRAYS})

    replace_with(folder / ARRAYS_FILE, save_arrays, "--out")  # new files renamed into place, never through a link
    replace_file(folder / JSON_FILE, json.dumps(profile.scalars(), indent=2), "--out")
    return folder


def load_profile(folder) -> Profile:
    """Read a profile folder written by :func:`save_profile` (one clear :class:`InputError` when it is not one,
    is damaged, or was written by another format version)."""
    folder = Path(folder)
    meta_path = folder / JSON_FILE
    if not folder.is_dir() or not meta_path.is_file():
        raise InputError(f"{folder}: not a monitoring profile (expected a folder with {JSON_FILE}, written by "
                         "`embeval-report profile`)")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{meta_path}: unreadable ({exc}); re-run `embeval-report profile`") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise InputError(f"{meta_path}: not a monitoring profile (field 'format' is {meta.get('format')!r} "
                         f"where {FORMAT!r} was expected)" if isinstance(meta, dict)
                         else f"{meta_path}: not a monitoring profile")
    if meta.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{meta_path}: profile format version {meta.get('format_version')!r} (written by "
                         f"embeval-report {meta.get('version', '?')}); this embeval-report {__version__} reads "
                         f"version {FORMAT_VERSION}: re-run `embeval-report profile` on the reference set")
    try:
        with np.load(folder / ARRAYS_FILE) as z:
            arrays = {k: z[k] for k in _ARRAYS}
    except (OSError, KeyError, ValueError) as exc:
        raise InputError(f"{folder / ARRAYS_FILE}: missing or damaged ({exc}); re-run `embeval-report profile`") \
            from None
    meta.pop("format")
    if "anomaly_rank" not in meta:  # written before the calibration (mu + 2 sigma): calibrated from its scores
        meta["anomaly_threshold"], meta["anomaly_rank"] = calibrate(arrays["calibration_scores"], ANOMALY_RATE)
        above = arrays["calibration_scores"] > meta["anomaly_threshold"]
        meta["calibration_anomalous_fraction"] = float(above.mean())
        meta["anomaly_rate"] = ANOMALY_RATE
    try:
        p = Profile(**meta, **arrays)
    except TypeError as exc:
        raise InputError(f"{meta_path}: fields do not match format version {FORMAT_VERSION} ({exc})") from None
    if p.mean.shape != (p.d,) or p.sample.shape[1:] != (p.d,) or not math.isfinite(p.trace):
        raise InputError(f"{folder}: the arrays do not match the recorded dimension {p.d}; re-run "
                         "`embeval-report profile`")
    return p
