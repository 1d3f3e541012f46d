r"""Consensus labels from several raters: majority vote and Dawid & Skene's (1979) EM estimate
(re-exported by :mod:`embeval_report.metrics.agreement`, whose docstring describes the chapter's use)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Dawid–Skene: Dirichlet pseudo-count added to every confusion cell and class count (keeps log 0 away)
DS_SMOOTHING = 0.01
DS_MAX_ITER = 500
DS_TOL = 1e-9
#: largest number of categories Dawid–Skene is run on (beyond: the labels are a continuous scale)
DS_MAX_CATEGORIES = 20


def majority_labels(data) -> tuple[np.ndarray, np.ndarray]:
    """Majority category of each item (ties: the lower category, seed 001 §21.3.1's "choose the lower
    one") and the share of the item's ratings that chose it."""
    top = data.counts.argmax(1)  # argmax takes the first, i.e. the lower, of tied categories
    return top, data.counts[np.arange(len(top)), top] / data.m


@dataclass(frozen=True)
class DawidSkene:
    """Dawid–Skene estimates: ``posterior`` (items × K) of the true category, ``labels`` its argmax,
    ``prior`` (K), ``confusion`` (raters × K true × K given), ``accuracy`` per rater
    (:math:`\\sum_k p_k \\pi^r_{kk}`), ``log_likelihood``, ``iterations``, ``converged``."""

    posterior: np.ndarray
    labels: np.ndarray
    prior: np.ndarray
    confusion: np.ndarray
    accuracy: np.ndarray
    log_likelihood: float
    iterations: int
    converged: bool


def dawid_skene(item, rater, cat, n_items: int, n_raters: int, K: int, *, max_iter: int = DS_MAX_ITER,
                tol: float = DS_TOL, smoothing: float = DS_SMOOTHING) -> DawidSkene:
    r"""Dawid & Skene (1979) maximum-likelihood estimation by EM of the true class of each item and the
    confusion matrix :math:`\pi^r_{kl} = P(\text{rater } r \text{ says } l \mid \text{true } k)` of each rater.

    E-step: :math:`T_{uk} \propto p_k \prod_{(u,r,l)} \pi^r_{kl}`; M-step: :math:`p_k \propto \sum_u T_{uk}`,
    :math:`\pi^r_{kl} \propto \sum_{(u,r,l)} T_{uk}` (plus ``smoothing`` pseudo-counts, so an unseen cell
    keeps a finite log). Started from the majority vote's label shares (which fixes the labelling of
    the classes); stops when the log-likelihood changes by less than ``tol`` (relative).
    ``item``, ``rater``, ``cat`` index each rating.
    """
    item, rater, cat = (np.asarray(a, np.int64) for a in (item, rater, cat))
    counts = np.zeros((n_items, K))
    np.add.at(counts, (item, cat), 1.0)
    T = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    cell = rater * K + cat
    ll_old, converged, it = -np.inf, False, 0
    for it in range(1, max_iter + 1):
        # M-step
        prior = (T.sum(0) + smoothing) / (n_items + K * smoothing)
        conf = np.stack([np.bincount(cell, weights=T[item, k], minlength=n_raters * K).reshape(n_raters, K)
                         for k in range(K)], axis=1) + smoothing
        conf /= conf.sum(2, keepdims=True)
        # E-step
        L = np.log(conf)[rater, :, cat]  # (ratings, K): log pi^r_{k, l} for every true k
        logT = np.log(prior)[None, :] + np.stack([np.bincount(item, weights=L[:, k], minlength=n_items)
                                                  for k in range(K)], axis=1)
        mx = logT.max(1, keepdims=True)
        norm = mx[:, 0] + np.log(np.exp(logT - mx).sum(1))
        T = np.exp(logT - norm[:, None])
        ll = float(norm.sum())
        if abs(ll - ll_old) <= tol * max(1.0, abs(ll)):
            converged = True
            break
        ll_old = ll
    accuracy = np.einsum("k,rkk->r", prior, conf)
    return DawidSkene(T, T.argmax(1), prior, conf, accuracy, ll, it, converged)
