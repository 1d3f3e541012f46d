r"""Isotropy: is the embedding set using the whole space?

Implements seed 000 §217.0 (condition number, participation ratio, APCS, dimensions for 90 %
of the variance, entropy effective dimension; Tables 217.1 and 217.2) and seed 001 §21.1.1
(top-10 variance ratio; the *Isotropy Benchmarks* box).

Everything is computed **exactly** from two d x d moment matrices gathered in one chunked
pass over the rows (:func:`embeval_report.kernels.block_moments`):

* the covariance :math:`\Sigma = \frac1n \tilde E^\top \tilde E` of the mean-centred vectors, whose
  eigenvalues :math:`\lambda_1 \ge \dots \ge \lambda_d` give the spectral metrics;
* the sum :math:`s = \sum_i u_i` and Gram :math:`G = \sum_i u_i u_i^\top` of the unit vectors
  :math:`u_i = e_i / \lVert e_i \rVert`, which give the mean and spread of the cosine over all
  :math:`n(n-1)` ordered pairs :math:`i \ne j` without forming an n x n matrix:

  .. math::
     \mathrm{APCS} = \frac{\lVert s\rVert^2 - n}{n(n-1)}, \qquad
     \overline{\cos^2} = \frac{\lVert G\rVert_F^2 - n}{n(n-1)}, \qquad
     \mathrm{sd} = \sqrt{\overline{\cos^2} - \mathrm{APCS}^2}.

Confidence intervals come from a bootstrap over random blocks of rows, re-using the
per-block moment matrices (no second pass over the data).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from .io import category_column, iter_groups
from .kernels import (as_numpy, block_moments, column_mean, iter_chunks, pair_cosines, random_pairs,
                      resolve_device, unit_rows)
from .display import escape
from .results import Metric
from .stats import basic_interval, weighted_bootstrap
from .thresholds import THRESHOLDS, condition_number_reading, verdict, worst as worst_verdict

SEED_000 = "seed 000 §217.0.5"
#: memory allowed for the per-block moment matrices of the bootstrap
BOOTSTRAP_BYTES = 512 * 2**20
MIN_BLOCKS = 20

#: name -> (label, direction, LaTeX formula, reference, threshold quantity or None)
METRICS = {
    "condition_number": ("Condition number κ", "lower", r"\kappa = \lambda_1 / \lambda_d",
                         "seed 000 §217.0.5.2.1; verdict Table 217.2", "condition_number"),
    "participation_ratio": ("Participation ratio", "higher",
                            r"\mathrm{PR} = (\sum_j \lambda_j)^2 / \sum_j \lambda_j^2",
                            "seed 000 §217.0.5.2.2", None),
    "participation_ratio_fraction": ("Participation ratio / d", "higher", r"\mathrm{PR}/d",
                                     "seed 000 §217.0.5.2.2; verdict Table 217.2",
                                     "participation_ratio_fraction"),
    "apcs": ("Mean pairwise cosine (APCS)", "lower", r"\mathrm{APCS} = \mathbb{E}_{i \ne j}[\cos(e_i, e_j)]",
             "seed 000 §217.0.5.2.3; verdict Table 217.2", "apcs"),
    "apcs_std": ("Std of pairwise cosine", "higher", r"\mathrm{sd}_{i \ne j}[\cos(e_i, e_j)]",
                 "seed 000 §217.0.5.2.3 (isotropic: ≈ 1/√d)", None),
    "dims_for_90pct_variance": ("Dimensions for 90 % variance", "higher",
                                r"\min\{k : \sum_{j \le k} \lambda_j \ge 0.9 \sum_j \lambda_j\}",
                                "seed 000 §217.0.11; verdict Table 217.2 (as % of d)",
                                "dims_for_90pct_variance_fraction"),
    "effective_dim_entropy": ("Entropy effective dimension", "higher",
                              r"\exp(-\sum_j p_j \ln p_j),\ p_j = \lambda_j / \sum_k \lambda_k",
                              "seed 000 §217.0.11 (compute_isotropy_metrics)", None),
    "top10_variance_ratio": ("Top-10 variance ratio", "lower", r"\sum_{j \le 10} \lambda_j / \sum_j \lambda_j",
                             "seed 001 §21.1.1; verdict Isotropy Benchmarks box", "top10_variance_ratio"),
}


#: valid range of each metric, used to clip interval ends
_BOUNDS = {"condition_number": (1.0, np.inf), "participation_ratio_fraction": (0.0, 1.0),
           "participation_ratio": (1.0, np.inf), "effective_dim_entropy": (1.0, np.inf),
           "top10_variance_ratio": (0.0, 1.0), "apcs_std": (0.0, 1.0), "dims_for_90pct_variance": (1, np.inf)}


def spectral_metrics(eigenvalues, d: int | None = None) -> dict[str, float]:
    """Spectral isotropy metrics from covariance eigenvalues (any order; negatives clipped to 0).

    ``condition_number`` is ``inf`` when the covariance is singular (smallest eigenvalue at or
    below ``1e-12 * λ1``, e.g. ``n <= d`` or collapsed dimensions).
    """
    lam = np.sort(np.clip(np.asarray(eigenvalues, float), 0, None))[::-1]
    d = len(lam) if d is None else d
    total = lam.sum()
    if total <= 0:
        return dict(condition_number=math.inf, participation_ratio=0.0, participation_ratio_fraction=0.0,
                    dims_for_90pct_variance=d, effective_dim_entropy=0.0, top10_variance_ratio=1.0)
    p = lam / total
    pr = total ** 2 / (lam ** 2).sum()
    nz = p[p > 0]
    return dict(
        condition_number=float(lam[0] / lam[-1]) if lam[-1] > 1e-12 * lam[0] else math.inf,
        participation_ratio=float(pr),
        participation_ratio_fraction=float(pr / d),
        dims_for_90pct_variance=int(min(np.searchsorted(np.cumsum(p), 0.9 - 1e-12) + 1, len(lam))),
        effective_dim_entropy=float(np.exp(-(nz * np.log(nz)).sum())),
        top10_variance_ratio=float(p[:10].sum()),
    )


def cosine_moments(s: np.ndarray, G: np.ndarray, n: float, same_row_pairs: float | None = None
                   ) -> tuple[float, float]:
    """Mean and standard deviation of the cosine over all ordered pairs of distinct rows.

    ``s`` and ``G`` are the sum and Gram of the unit vectors. ``same_row_pairs`` is the number of
    ordered pairs that are one row with itself (``n``; more for a bootstrap replicate, where it is
    the sum of squared multiplicities); they are removed from numerator and denominator.
    """
    same = n if same_row_pairs is None else same_row_pairs
    denom = n * n - same
    mean = (s @ s - same) / denom
    mean_sq = ((G * G).sum() - same) / denom
    return float(mean), float(math.sqrt(max(mean_sq - mean * mean, 0.0)))


def covariance_from_moments(N: float, s: np.ndarray, G: np.ndarray) -> np.ndarray:
    """The 1/N covariance from row count, (shifted) row sum and (shifted) second-moment matrix."""
    m = s / N
    return G / N - np.outer(m, m)


@dataclass(frozen=True)
class IsotropyResult:
    """Everything the isotropy chapter shows."""

    n: int
    d: int
    values: dict            # metric name -> point value
    metrics: dict           # metric name -> Metric (value, CI, verdict, reference)
    eigenvalues: np.ndarray  # covariance spectrum, descending
    mean_norm_share: float  # ‖mean‖² / (‖mean‖² + tr Σ): share of the raw second moment on the mean direction
    pair_cosines: np.ndarray  # a random sample of pairwise cosines (for the histogram)
    n_blocks: int
    n_boot: int
    info: dict = field(default_factory=dict)


def _block_count(n: int, d: int) -> int:
    """Blocks for the bootstrap: up to 64, bounded by the memory of 2 x B x d x d float64 matrices."""
    return int(min(64, n, BOOTSTRAP_BYTES // (2 * 8 * d * d)))


def bootstrap_blocks(n: int, d: int, n_boot: int) -> tuple[int, int]:
    """``(blocks, n_boot)`` for the block bootstrap; ``(1, 0)`` (no CI) when fewer than MIN_BLOCKS fit."""
    blocks = _block_count(n, d) if n_boot else 1
    return (1, 0) if blocks < MIN_BLOCKS else (blocks, n_boot)


def measure_isotropy(X, *, n_boot: int = 200, sample_size: int | None = None, level: float = 0.95,
             seed: int = 0, device="auto") -> IsotropyResult:
    r"""Isotropy metrics of an embedding set with bootstrap confidence intervals.

    Parameters
    ----------
    X : array (n, d) or torch tensor
    n_boot : bootstrap resamples for the CIs (0 disables them)
    sample_size : pairs sampled for the cosine histogram (default 100 000); the metrics are exact
    seed, device : determinism and ``"auto" | "cpu" | "cuda"``

    Metrics (direction; reference): ``condition_number`` λ1/λd of the 1/n covariance (lower;
    seed 000 §217.0.5.2.1), ``participation_ratio`` (Σλ)²/Σλ² and ``participation_ratio_fraction``
    PR/d (higher; §217.0.5.2.2), ``apcs`` mean cosine over all pairs i≠j and ``apcs_std``
    (lower / spread; §217.0.5.2.3), ``dims_for_90pct_variance`` (higher), ``effective_dim_entropy``
    exp of the entropy of λ/Σλ (higher; §217.0.11), ``top10_variance_ratio`` (lower; seed 001
    §21.1.1). Verdicts from Table 217.2 and seed 001's benchmarks box.

    Examples
    --------
    >>> import numpy as np
    >>> r = measure_isotropy(np.random.default_rng(0).standard_normal((2000, 16)), n_boot=0)
    >>> round(r.values["apcs"], 2), r.metrics["apcs"].verdict
    (0.0, 'healthy')
    """
    X = as_numpy(X)
    n, d = X.shape
    if n < 2:
        raise ValueError("isotropy needs at least 2 vectors")
    dev = resolve_device(device)
    blocks, n_boot = bootstrap_blocks(n, d, n_boot)
    mean = column_mean(X, device=dev)
    cov_m = block_moments(X, shift=mean, n_blocks=blocks, seed=seed, device=dev, desc="covariance")
    cos_m = block_moments(X, transform=unit_rows, n_blocks=blocks, seed=seed, device=dev, desc="cosine Gram")

    def compute(w=None):
        N, s, G = cov_m.total(w)
        eig = np.linalg.eigvalsh(covariance_from_moments(N, s, G))
        vals = spectral_metrics(eig, d)
        _, su, Gu = cos_m.total(w)
        same = float(cos_m.count @ (np.ones_like(cos_m.count) if w is None else w ** 2))
        vals["apcs"], vals["apcs_std"] = cosine_moments(su, Gu, N, same)
        return vals, eig

    values, eig = compute()
    eig = np.sort(eig)[::-1]
    cis = {}
    if n_boot:
        names = list(values)
        reps = weighted_bootstrap(lambda w: (lambda v: [v[k] for k in names])(compute(w)[0]), blocks,
                                  n_boot=n_boot, seed=seed)
        cis = {k: basic_interval(values[k], reps[:, i], level, _BOUNDS.get(k, (-1.0, np.inf)))
               for i, k in enumerate(names)}
    ci_method = (f"{level:.0%} basic bootstrap, {n_boot} resamples of {blocks} random row blocks"
                 if n_boot else "")
    metrics = {}
    for name, (label, direction, formula, ref, quantity) in METRICS.items():
        v = values[name]
        q = v / d if quantity == "dims_for_90pct_variance_fraction" else v
        table = THRESHOLDS[quantity].table if quantity else None
        lo, hi = cis.get(name, (None, None))
        metrics[name] = Metric(name=name, value=v, direction=direction, reference=ref,
                               ci_low=lo, ci_high=hi, verdict=verdict(quantity, q) if table else None,
                               label=label, formula=formula, ci_method=ci_method)
    i, j = random_pairs(n, sample_size or 100_000, seed=seed)
    mean_sq = float(mean @ mean)
    return IsotropyResult(
        n=n, d=d, values=values, metrics=metrics, eigenvalues=eig,
        mean_norm_share=mean_sq / (mean_sq + float(np.clip(eig, 0, None).sum())),
        pair_cosines=pair_cosines(X, i, j, device=dev), n_blocks=blocks, n_boot=n_boot,
        info=dict(rank=int((eig > 1e-12 * max(eig[0], 1e-300)).sum()), level=level,
                  pair_sample=len(i), device=str(dev)),
    )


#: metadata columns that name kinds of entity, tried in this order for the per-group breakdown
GROUP_COLUMNS = ("kind", "group", "type", "label")


def group_column(metadata: pd.DataFrame | None, max_groups: int = 12) -> str | None:
    """The metadata column to break isotropy down by: the first of :data:`GROUP_COLUMNS` with 2..max levels."""
    return category_column(metadata, GROUP_COLUMNS, max_groups)


def isotropy_by_group(X, groups, *, min_size: int = 20, n_boot: int = 100, seed: int = 0, device="auto"
                      ) -> pd.DataFrame:
    """Isotropy metrics within each group of rows (groups smaller than ``min_size`` are skipped).

    A set can look healthy overall while one kind of entity (for example users, pulled toward
    popular items) has collapsed; this table shows it.
    """
    X = as_numpy(X)
    rows = []
    for g, idx in iter_groups(groups):
        if len(idx) < min_size:
            continue
        r = measure_isotropy(X[idx], n_boot=n_boot, sample_size=1000, seed=seed, device=device)
        m = r.metrics
        rows.append({"group": g, "n": len(idx), "APCS": m["apcs"].value,
                     "APCS 95 % CI": "—" if m["apcs"].ci_low is None else
                     f"{m['apcs'].ci_low:.3f} – {m['apcs'].ci_high:.3f}",
                     "PR / d": m["participation_ratio_fraction"].value, "κ": m["condition_number"].value,
                     "dims for 90 %": m["dims_for_90pct_variance"].value,
                     "verdict": worst_verdict(x.verdict for x in m.values())})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# All-but-the-top (Mu, Bhat & Viswanath 2018): remove the mean and the top D principal directions
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PrincipalDirections:
    """Mean and covariance eigen-decomposition (descending) of an embedding set."""

    mean: np.ndarray
    eigenvalues: np.ndarray
    vectors: np.ndarray  # (d, d), column j = j-th principal direction

    @classmethod
    def fit(cls, X, *, device="auto") -> "PrincipalDirections":
        mean = column_mean(X, device=device)
        m = block_moments(X, shift=mean, device=device)
        N, s, G = m.total()
        lam, V = np.linalg.eigh(covariance_from_moments(N, s, G))
        order = np.argsort(lam)[::-1]
        return cls(mean, lam[order], V[:, order])

    def remover(self, n_remove: int, device) -> "callable":
        """Row transform ``x -> (x - mean) - (x - mean) V_D V_D^T`` as a torch function."""
        mu = torch.as_tensor(self.mean, device=device)
        V = torch.as_tensor(self.vectors[:, :n_remove], device=device)

        def transform(x: torch.Tensor) -> torch.Tensor:
            c = x - mu
            return c - (c @ V) @ V.T if n_remove else c
        return transform


def all_but_the_top(X, n_remove: int = 1, *, device="auto") -> np.ndarray:
    """Mean-centred ``X`` with its top ``n_remove`` principal components projected out.

    Mu, Bhat & Viswanath (2018), "All-but-the-Top"; seed 000 §217.0.12 ``remove_top_components``
    (the mean is not added back). Returns float32 of the input's shape.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    f = PrincipalDirections.fit(X, device=dev).remover(n_remove, dev)
    out = np.empty(X.shape, dtype=np.float32)
    for s, x in iter_chunks(X, device=dev):
        out[s:s + len(x)] = f(x).cpu().numpy()
    return out


def default_removals(d: int) -> list[int]:
    """Numbers of components to compare: 0 (centring only), 1, 2, 3, 5, 10 and Mu et al.'s ≈ d/100."""
    return sorted({k for k in (0, 1, 2, 3, 5, 10, max(1, round(d / 100))) if k < d - 1})


def all_but_the_top_effect(X, removals: list[int] | None = None, *, base: IsotropyResult | None = None,
                           sample_size: int = 20_000, seed: int = 0, device="auto"
                           ) -> tuple[pd.DataFrame, dict[int, np.ndarray]]:
    """Isotropy before and after all-but-the-top for several numbers of removed components.

    Returns a table with one row per setting (``original`` plus ``D`` = each entry of
    ``removals``) and the metrics ``apcs``, ``apcs_std``, ``participation_ratio_fraction``,
    ``condition_number`` (over the d − D remaining directions), ``dims_for_90pct_variance`` and
    ``top10_variance_ratio``, plus a sample of pairwise cosines for each setting (same pairs).
    Exact metrics; removing D components leaves the spectrum λ_{D+1..d}.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    n, d = X.shape
    removals = default_removals(d) if removals is None else removals
    pcs = PrincipalDirections.fit(X, device=dev)
    i, j = random_pairs(n, sample_size, seed=seed)
    rows, samples = [], {}
    base = base or measure_isotropy(X, n_boot=0, sample_size=sample_size, seed=seed, device=dev)
    rows.append(dict(setting="original", removed=None, **{k: base.values[k] for k in _ABTT_COLUMNS}))
    samples[-1] = base.pair_cosines
    for D in removals:
        f = pcs.remover(D, dev)
        m = block_moments(X, transform=lambda x: unit_rows(f(x)), device=dev, desc=f"all-but-the-top D={D}")
        N, s, G = m.total()
        vals = spectral_metrics(pcs.eigenvalues[D:], d - D)
        vals["apcs"], vals["apcs_std"] = cosine_moments(s, G, N)
        label = "mean removed" if D == 0 else f"mean + top {D} removed"
        rows.append(dict(setting=label, removed=D, **{k: vals[k] for k in _ABTT_COLUMNS}))
        samples[D] = pair_cosines(X, i, j, transform=f, device=dev)
    return pd.DataFrame(rows), samples


def best_removal(abtt: pd.DataFrame) -> int:
    """The number of removed components whose corrected set has the APCS closest to 0."""
    t = abtt[abtt.removed.notna()]
    return int(t.loc[t["apcs"].abs().idxmin(), "removed"])


def group_narrative(table: pd.DataFrame, column: str) -> str:
    """One paragraph comparing the groups of :func:`isotropy_by_group`."""
    if len(table) < 2:
        return ""
    hi, lo = table.loc[table["APCS"].idxmax()], table.loc[table["APCS"].idxmin()]
    text = (f"Broken down by {escape(column)}, APCS ranges from {lo['APCS']:.3f} ({escape(lo['group'])}, "
            f"PR/d {lo['PR / d']:.1%}) to {hi['APCS']:.3f} ({escape(hi['group'])}, PR/d {hi['PR / d']:.1%}).")
    if hi["APCS"] - lo["APCS"] > 0.2:
        text += (f" The anisotropy is concentrated in **{escape(hi['group'])}**: look there for the cause "
                 "(for example a popularity or frequency effect pulling those vectors toward one direction).")
    else:
        text += " The groups are similarly (an)isotropic, so the cause is shared rather than specific to one group."
    return text


_ABTT_COLUMNS = ("apcs", "apcs_std", "participation_ratio_fraction", "condition_number",
                 "dims_for_90pct_variance", "top10_variance_ratio")


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def narrative(r: IsotropyResult, abtt: pd.DataFrame | None = None) -> str:
    """Markdown paragraphs that say what this set's isotropy numbers mean."""
    v, m = r.values, r.metrics
    iso_sd = 1 / math.sqrt(r.d)
    worst = [k for k, x in m.items() if x.verdict == "problematic"]
    concerning = [k for k, x in m.items() if x.verdict == "concerning"]
    if worst:
        overall = ("**The space is strongly anisotropic.** " +
                   f"{len(worst)} of the Table 217.2 checks are in the problematic band "
                   f"({', '.join(m[k].label for k in worst)}).")
    elif concerning:
        overall = ("**The space is moderately anisotropic.** " +
                   f"Checks in the concerning band: {', '.join(m[k].label for k in concerning)}.")
    else:
        overall = "**The space is close to isotropic:** every Table 217.2 check is in the healthy band."
    parts = [overall + f" These are exact values over all {r.n:,} vectors of dimension {r.d}."]

    apcs = v["apcs"]
    reading = ("random pairs are nearly orthogonal, as in an isotropic space" if apcs < 0.1 else
               "pairs share a common direction, which compresses the useful range of cosine similarity"
               if apcs <= 0.3 else
               "vectors sit in a narrow cone: every pair looks similar and cosine similarity loses most of "
               "its discriminative power" if apcs <= 0.7 else
               "vectors are nearly collinear; the seed calls this severe, embeddings nearly useless for "
               "similarity")
    parts.append(
        f"The mean cosine over all {r.n * (r.n - 1):,} ordered pairs is APCS = {m['apcs'].text('.4f')}: "
        f"{reading}. Its spread is {v['apcs_std']:.4f}, against ≈ {iso_sd:.4f} (= 1/√d) for directions "
        f"drawn uniformly on the sphere. The mean vector carries {r.mean_norm_share:.1%} of the raw second "
        "moment; a large share is the 'common direction' that all-but-the-top removes.")
    kappa = v["condition_number"]
    kappa_txt = ("infinite: the covariance is singular (rank "
                 f"{r.info['rank']} < d = {r.d}), so some directions carry no variance at all"
                 if not math.isfinite(kappa) else
                 f"{m['condition_number'].text('.1f')}, which Table 217.1 reads as "
                 f"*{condition_number_reading(kappa)}*")
    parts.append(
        f"The variance is spread over PR = {v['participation_ratio']:.1f} effective dimensions "
        f"({v['participation_ratio_fraction']:.1%} of d; 95 % CI "
        f"{_ci_pct(m['participation_ratio_fraction'])}); 90 % of it lies in the top "
        f"{v['dims_for_90pct_variance']} of {r.d} principal components "
        f"({v['dims_for_90pct_variance'] / r.d:.0%}), and the top 10 components hold "
        f"{v['top10_variance_ratio']:.1%}. The entropy effective dimension is "
        f"{v['effective_dim_entropy']:.1f}. The condition number is {kappa_txt}.")
    if abtt is not None and len(abtt) > 1:
        best = abtt[abtt.removed == best_removal(abtt)].iloc[0]
        parts.append(
            f"Removing the mean and the top principal components (all-but-the-top) moves APCS from "
            f"{abtt.iloc[0]['apcs']:.3f} to {best['apcs']:.3f} ({best['setting']}) and PR/d from "
            f"{abtt.iloc[0]['participation_ratio_fraction']:.1%} to {best['participation_ratio_fraction']:.1%}. "
            + ("A large change means the anisotropy is a few dominant directions that post-processing can "
               "remove before similarity search; check downstream metrics before adopting it, since the "
               "removed directions may also carry signal (for example popularity)."
               if abs(abtt.iloc[0]['apcs']) - abs(best['apcs']) > 0.05 else
               "The change is small: there is no dominant common direction to remove."))
    return "\n\n".join(parts)


def _ci_pct(m: Metric) -> str:
    if m.ci_low is None:
        return "not computed"
    return f"{m.ci_low:.1%}–{m.ci_high:.1%}"
