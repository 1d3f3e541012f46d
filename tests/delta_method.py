"""Closed-form standard errors for the interval-width tests (delta method), so that a factor sqrt(2) in a width
fails: a resampling interval's width is compared with 2 z se."""
import math

import numpy as np


def eigen_functional_se(f, lam, n: int, rel_step: float = 1e-6) -> float:
    r"""Large-n standard error of ``f`` (a function of the covariance eigenvalues) on ``n`` rows drawn from
    N(mu, diag(lam)), the ``lam`` distinct.

    The sample eigenvalues are asymptotically independent, :math:`\sqrt n (l_i - \lambda_i) \to N(0, 2\lambda_i^2)`
    (Anderson 2003, *An Introduction to Multivariate Statistical Analysis*, Thm 13.5.1; the same for the
    uncentred second moments when mu = 0), so by the delta method
    :math:`\mathrm{se}^2 = \frac{2}{n} \sum_i (\lambda_i\, \partial f / \partial \lambda_i)^2`. The partial
    derivatives by central differences with step ``rel_step * lam_i``.
    """
    lam = np.asarray(lam, float)
    g = [(f(lam + rel_step * lam[i] * e) - f(lam - rel_step * lam[i] * e)) / (2 * rel_step)  # = lam_i df/dlam_i
         for i, e in enumerate(np.eye(len(lam)))]
    return math.sqrt(2.0 / n * float(np.sum(np.square(g))))


def apcs_se(X) -> float:
    r"""Standard error of the mean pairwise cosine (a U-statistic with kernel :math:`u_a^\top u_b`) from its
    Hoeffding projection :math:`h_1(u) = u^\top \bar u`: :math:`\mathrm{se} = 2\,\mathrm{sd}(h_1)/\sqrt n`
    (Hoeffding 1948), evaluated on the rows of ``X``."""
    U = np.asarray(X, float)
    U = U / np.linalg.norm(U, axis=1, keepdims=True)
    return 2 * float((U @ U.mean(0)).std()) / math.sqrt(len(U))


def entropy_rank(p) -> float:
    """exp of the Shannon entropy of the weights ``p`` (0 ln 0 = 0)."""
    p = np.asarray(p, float)
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


#: the spectral metrics as functions of the covariance eigenvalues (singular values are sqrt(n lam))
SPECTRAL = {
    "effective_rank": lambda lam: entropy_rank(np.sqrt(lam) / np.sqrt(lam).sum()),       # Roy & Vetterli 2007
    "stable_rank": lambda lam: lam.sum() / lam.max(),                                     # Rudelson & Vershynin 2007
    "rankme": lambda lam: entropy_rank(np.sqrt(lam) / np.sqrt(lam).sum() + 1e-7),         # Garrido et al. 2023
    "participation_ratio": lambda lam: lam.sum() ** 2 / (lam ** 2).sum(),
    "top10_variance_ratio": lambda lam: np.sort(lam)[::-1][:10].sum() / lam.sum(),
}
