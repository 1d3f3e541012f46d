r"""Recommendation metrics (seed 001 §21.4.2): exact full-catalogue top-k lists from user·item scores,
their accuracy on held-out interactions, and what they do to the catalogue beyond accuracy.

**Split** (:func:`split_interactions`). Repeated (user, item) interactions are kept once (the
earliest). With ``test_interactions`` given, the training set is every interaction and the test set
the given one (test pairs the user already has in training are dropped and counted: they can never
be recommended). Otherwise each user with more than ``holdout`` distinct items holds out
``holdout`` of them — the latest when timestamps exist (ties in time: the later file row), else a
seeded random draw (leave-n-out). Users with a test item are *evaluated*; users whose held-out items
were all rated below ``min_rating`` are not.

**Ranking** (:func:`rank_catalogue`). Every evaluated user ranks the whole item catalogue by
:math:`s(u, i) = u \cdot i` (``dot``) or the cosine, **excluding the user's training items**. User
blocks are multiplied with the catalogue in float32 (IEEE, TF32 off; GPU when present), training
items masked to :math:`-\infty`, and the best ``k + 16`` kept and re-scored exactly (float64, a
fixed summation tree: :func:`~embeval_report.kernels.ranking.pair_scores`); a user whose 16 spare
candidates cannot prove the list (its last float32 candidate is within the rounding bound
:math:`t_u = 2(d+4)\,2^{-24}\lVert u\rVert\max_i\lVert i\rVert` of the k-th exact score) gets an exact
scan. Equal exact scores: the lower catalogue position first. The rank of the user's best test
item (for MRR) is :math:`1 + \#\{i : s(u,i) > s^*\}` + earlier ties, counted from the float32 block
with every item within :math:`t_u` of :math:`s^*` re-scored exactly. Nothing of size users × items is
ever held: one block of ``chunk_budget`` bytes.

**Accuracy** (per user :math:`u` with test set :math:`T_u`, list :math:`L_u` of length k = 10, hits
:math:`h_r = [L_{u,r} \in T_u]`): ``hit_rate_at_10`` :math:`[\sum_r h_r > 0]`; ``recall_at_10``
:math:`\sum_r h_r / |T_u|`; ``precision_at_10`` :math:`\sum_r h_r / k`; ``ndcg_at_10``
:math:`\sum_r h_r/\log_2(r+1)` over the ideal :math:`\sum_{r \le \min(|T_u|,k)} 1/\log_2(r+1)` (binary
gain); ``map_at_10`` :math:`\frac{1}{\min(|T_u|,k)}\sum_r h_r P@r` (RecBole and Microsoft
Recommenders ``map_at_k``); ``mrr`` :math:`1/\rho_u`, :math:`\rho_u` the full-catalogue rank of the
first test item (uncut). Means over evaluated users with bootstrap intervals over users.

**Beyond accuracy** (exposure :math:`c_i` = lists holding item i, catalogue of n items,
training popularity :math:`\phi_i` = training interactions of i, :math:`N = \sum_i\phi_i`):
``catalog_coverage`` :math:`|\{i : c_i > 0\}| / n`; ``gini_index`` over the whole catalogue
(never-recommended items count as zeros), :math:`G = \frac{\sum_j (2j - n - 1)\,c_{(j)}}{n\sum_j c_j}`
with :math:`c_{(1)} \le \dots \le c_{(n)}`; ``gini_recommended_only`` the same over the recommended
items only (seed 001's ``gini_coefficient``, which ignores the never-recommended tail and so reads
lower); ``novelty`` the mean over list slots of :math:`-\log_2(\phi_i / N)` (Castells et al. 2011;
Recommenders ``novelty``; an item without training interactions counts as one, a finite cap);
``intra_list_diversity`` :math:`1 - ` the mean pairwise cosine of the item vectors within a list
(Ziegler et al. 2005), mean over users; ``serendipity`` as Microsoft Recommenders with item-vector
cosine similarity: per recommended item :math:`(1 - \frac1{|H_u|}\sum_{j \in H_u}\cos(i,j))\cdot[i \in T_u]`,
averaged over the list, then over users with a history (Zhang et al. 2012); ``popularity_bias``
the average recommendation popularity (ARP, Abdollahpouri et al. 2019) over the users' own history
popularity, :math:`\frac{\mathrm{mean}_u\,\mathrm{mean}_{i \in L_u}\phi_i}{\mathrm{mean}_u\,\mathrm{mean}_{j \in H_u}\phi_j}`
(> 1: the lists are more popular than what the users consume); ``personalization``
:math:`1 - ` the mean over user pairs of the cosine of their binary list vectors
(:math:`|L_u \cap L_v| / \sqrt{|L_u||L_v|}`; recmetrics), computed without a users × users matrix.
Catalogue-level numbers get basic bootstrap intervals over users (with the bias-corrected value
beside them: resampling users lowers coverage); per-user means get :func:`~embeval_report.stats.mean_ci`.

**Baselines**: the most-popular recommender (items by training popularity, ties by catalogue
position) and a uniform random one (a seeded hash of (user, item), so lists do not depend on
blocking), ranked by the same code with the same exclusions. **Sampled-negative evaluation**
(only on request) ranks each test item among ``n`` sampled items the user never interacted with;
its numbers are labelled as sampled, since they disagree with full ranking (Krichene & Rendle 2020).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..errors import InputError
from ..kernels import chunk_rows, resolve_device
from ..stats import DEFAULT_LEVEL, basic_interval, bias_corrected, mean_ci, weighted_bootstrap
from ..kernels.catalogue import K, SCORES, Ranked, _csr_rows, rank_by, rank_catalogue, random_scores
from ..kernels.ranking import Space, pair_scores
from .spec import MetricSpec, specs

UNIT = "users"
#: resamples of the catalogue-level (basic) bootstrap intervals
N_BOOT = 200
RECOMMENDERS = ("embeddings", "most popular", "random")
ACCURACY = ("hit_rate_at_10", "recall_at_10", "precision_at_10", "ndcg_at_10", "map_at_10", "mrr")
PER_USER_BEYOND = ("novelty", "intra_list_diversity", "serendipity")
CATALOGUE = ("catalog_coverage", "gini_index", "gini_recommended_only", "popularity_bias", "personalization")

_U = r"\frac{1}{|U|}\sum_{u \in U}"
_HITS = r"\sum_{r \le 10} h_{u,r}"

SPECS = specs(
    MetricSpec("hit_rate_at_10", "Hit rate@10", "higher", rf"{_U} [{_HITS} > 0]",
               "seed 001 §21.4.2 hit_rate; RecBole Hit@10", range=(0, 1)),
    MetricSpec("recall_at_10", "Recall@10", "higher", rf"{_U} \frac{{{_HITS}}}{{|T_u|}}",
               "Microsoft Recommenders recall_at_k; RecBole Recall@10", range=(0, 1)),
    MetricSpec("precision_at_10", "Precision@10", "higher", rf"{_U} \frac{{{_HITS}}}{{10}}",
               "Microsoft Recommenders precision_at_k; RecBole Precision@10", range=(0, 1)),
    MetricSpec("ndcg_at_10", "nDCG@10", "higher",
               rf"{_U} \frac{{\sum_{{r \le 10}} h_{{u,r}} / \log_2(r+1)}}{{\sum_{{r \le \min(|T_u|, 10)}} 1/\log_2(r+1)}}",
               "Järvelin & Kekäläinen 2002, binary gain; Microsoft Recommenders ndcg_at_k; RecBole NDCG@10",
               range=(0, 1)),
    MetricSpec("map_at_10", "MAP@10", "higher",
               rf"{_U} \frac{{1}}{{\min(|T_u|, 10)}} \sum_{{r \le 10}} h_{{u,r}} P_u@r",
               "Microsoft Recommenders map_at_k (≥ 1.2); RecBole MAP@10", range=(0, 1)),
    MetricSpec("mrr", "MRR", "higher", rf"{_U} \frac{{1}}{{\rho_u}},\ \rho_u = \min_{{i \in T_u}} \mathrm{{rank}}_u(i)",
               "Voorhees 1999 (full-catalogue rank, uncut)", range=(0, 1)),
    MetricSpec("catalog_coverage", "Catalogue coverage", "higher", r"\frac{|\{i : c_i > 0\}|}{n}",
               "Shani & Gunawardana 2010; seed 001 §21.4.2 catalog_coverage", range=(0, 1)),
    MetricSpec("gini_index", "Gini index of exposure", "lower",
               r"\frac{\sum_{j=1}^{n} (2j - n - 1)\, c_{(j)}}{n \sum_j c_j}\ \text{(whole catalogue, zeros included)}",
               "Fleder & Hosanagar 2009; Kowald & Lacic 2022", range=(0, 1)),
    MetricSpec("gini_recommended_only", "Gini index, recommended items only", "lower",
               r"\frac{2\sum_{j=1}^{n'} j\, c_{(j)} - (n'+1)\sum_j c_j}{n' \sum_j c_j},\ n' = |\{i : c_i > 0\}|",
               "seed 001 §21.4.2 gini_coefficient (ignores never-recommended items)", range=(0, 1)),
    MetricSpec("novelty", "Novelty (bits)", "higher", rf"{_U} \frac{{1}}{{|L_u|}}\sum_{{i \in L_u}} -\log_2 \frac{{\phi_i}}{{N}}",
               "Castells, Vargas & Wang 2011; Microsoft Recommenders novelty", range=(0, math.inf)),
    MetricSpec("intra_list_diversity", "Intra-list diversity", "higher",
               rf"{_U} \Big(1 - \frac{{2}}{{|L_u|(|L_u|-1)}}\sum_{{i < j \in L_u}} \cos(v_i, v_j)\Big)",
               "Ziegler et al. 2005; Microsoft Recommenders diversity (item vectors)", range=(0, 2)),
    MetricSpec("serendipity", "Serendipity", "higher",
               rf"{_U} \frac{{1}}{{|L_u|}}\sum_{{i \in L_u}} \Big(1 - \frac{{1}}{{|H_u|}}\sum_{{j \in H_u}}"
               r" \cos(v_i, v_j)\Big) [i \in T_u]",
               "Zhang et al. 2012; Microsoft Recommenders serendipity (item vectors, relevance = held out)",
               range=(0, 2)),
    MetricSpec("popularity_bias", "Popularity bias (ARP ratio)", "lower",
               r"\frac{\mathrm{mean}_u \mathrm{mean}_{i \in L_u} \phi_i}{\mathrm{mean}_u \mathrm{mean}_{j \in H_u} \phi_j}",
               "Abdollahpouri et al. 2019 (ARP), relative to the users' own history", range=(0, math.inf)),
    MetricSpec("personalization", "Personalization", "higher",
               r"1 - \frac{2}{|U|(|U|-1)} \sum_{u < v} \frac{|L_u \cap L_v|}{\sqrt{|L_u||L_v|}}",
               "recmetrics personalization (Longo 2018)", range=(0, 1)),
)
METRICS = tuple(SPECS)
SAMPLED_SPECS = specs(
    MetricSpec("sampled_hit_rate_at_10", "Hit rate@10, sampled negatives", "higher",
               r"\frac{1}{|U|}\sum_u \frac{1}{|T_u|}\sum_{i \in T_u} [\mathrm{rank}_{u}(i \mid \text{sample}) \le 10]",
               "sampled-negative protocol; Krichene & Rendle 2020 (disagrees with full ranking)", range=(0, 1)),
    MetricSpec("sampled_ndcg_at_10", "nDCG@10, sampled negatives", "higher",
               r"\frac{1}{|U|}\sum_u \frac{1}{|T_u|}\sum_{i \in T_u} \frac{[\rho \le 10]}{\log_2(\rho + 1)}",
               "sampled-negative protocol; Krichene & Rendle 2020 (disagrees with full ranking)", range=(0, 1)),
)


# ---------------------------------------------------------------------------------------------
# Split
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Split:
    """Training and test interactions in local indices: users ``0..len(user_rows)-1`` (embedding rows
    ``user_rows``), items ``0..len(item_rows)-1`` (the catalogue, embedding rows ``item_rows``).

    ``train`` / ``test`` CSR matrices (users x items) of 0/1; ``mode`` ``"given"``, ``"time"`` or
    ``"random"``; ``counts`` what was dropped and why.
    """

    user_rows: np.ndarray
    item_rows: np.ndarray
    train: sp.csr_matrix
    test: sp.csr_matrix
    mode: str
    holdout: int
    counts: dict

    @property
    def evaluated(self) -> np.ndarray:
        """Local indices of the users with at least one test item."""
        return np.flatnonzero(np.diff(self.test.indptr) > 0)


def _first_pairs(u, i, time, row) -> np.ndarray:
    """Positions of the first occurrence of each (user, item) pair (earliest time, then file row)."""
    order = np.lexsort((row, time)) if time is not None else np.argsort(row, kind="stable")
    key = pd.MultiIndex.from_arrays([u[order], i[order]])
    return order[~key.duplicated()]


def _csr(u, i, shape) -> sp.csr_matrix:
    m = sp.csr_matrix((np.ones(len(u)), (u, i)), shape=shape)
    m.sum_duplicates()
    m.data[:] = 1.0
    m.sort_indices()
    return m


def split_interactions(user_rows, item_rows, train_user, train_item, *, time=None, rating=None,
                       test_user=None, test_item=None, test_rating=None, holdout: int = 2, seed: int = 0,
                       min_rating: float = -math.inf) -> Split:
    """Training and test sets (see the module docstring).

    ``user_rows`` / ``item_rows``: the embedding rows of the users and of the catalogue;
    ``train_user`` / ``train_item``: embedding rows of each interaction (``time``, ``rating``
    optional, aligned); ``test_user`` / ``test_item`` (``test_rating``): explicit test interactions.
    """
    user_rows, item_rows = np.asarray(user_rows, np.int64), np.asarray(item_rows, np.int64)
    upos = pd.Index(user_rows).get_indexer(np.asarray(train_user, np.int64))
    ipos = pd.Index(item_rows).get_indexer(np.asarray(train_item, np.int64))
    if (upos < 0).any() or (ipos < 0).any():
        raise ValueError("every interaction must name a known user and a catalogue item")
    shape = (len(user_rows), len(item_rows))
    row = np.arange(len(upos))
    t = None if time is None else np.asarray(time, float)
    first = _first_pairs(upos, ipos, t, row)
    counts = dict(interactions=len(upos), repeated_dropped=len(upos) - len(first))
    u, i = upos[first], ipos[first]
    r = None if rating is None else np.asarray(rating, float)[first]
    if test_user is not None:
        tu = pd.Index(user_rows).get_indexer(np.asarray(test_user, np.int64))
        ti = pd.Index(item_rows).get_indexer(np.asarray(test_item, np.int64))
        train = _csr(u, i, shape)
        keep = np.ones(len(tu), bool)
        if test_rating is not None:
            keep &= np.asarray(test_rating, float) >= min_rating
        counts["test_below_min_rating"] = int((~keep).sum())
        in_train = np.asarray(train[tu, ti]).ravel() > 0
        counts["test_in_train_dropped"] = int((in_train & keep).sum())
        keep &= ~in_train
        test = _csr(tu[keep], ti[keep], shape)
        counts["test_interactions"] = int(test.nnz)
        return Split(user_rows, item_rows, train, test, "given", 0, counts)
    mode = "time" if t is not None else "random"
    if mode == "time":
        order = np.lexsort((first, t[first], u))  # per user: by time, then file row
    else:
        rng = np.random.default_rng([seed, 87])
        order = np.lexsort((rng.random(len(u)), u))
    su = u[order]
    start = np.searchsorted(su, su, side="left")
    n_user = np.bincount(su, minlength=shape[0])
    pos = np.arange(len(su)) - start  # position within the user's ordered interactions
    eligible = n_user[su] > holdout
    held = eligible & (pos >= n_user[su] - holdout)
    counts["users_too_few"] = int(((n_user > 0) & (n_user <= holdout)).sum())
    test_mask = held.copy()
    if r is not None:
        low = held & (r[order] < min_rating)
        counts["test_below_min_rating"] = int(low.sum())
        test_mask &= ~low
    else:
        counts["test_below_min_rating"] = 0
    train = _csr(su[~held], i[order][~held], shape)
    test = _csr(su[test_mask], i[order][test_mask], shape)
    counts["test_interactions"] = int(test.nnz)
    return Split(user_rows, item_rows, train, test, mode, holdout, counts)


# ---------------------------------------------------------------------------------------------
# Metrics of lists
# ---------------------------------------------------------------------------------------------

def hits_matrix(top: np.ndarray, test: sp.csr_matrix, users: np.ndarray) -> np.ndarray:
    """``hits[u, r]``: whether the r-th recommendation of user ``users[u]`` is one of its test items."""
    n = test.shape[1]
    r, c = _csr_rows(test, users)
    keys = np.sort(r * n + c)
    t = top[users]
    q = np.arange(len(users))[:, None] * n + np.maximum(t, 0)
    if not len(keys):
        return np.zeros(t.shape, bool)
    found = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    return (t >= 0) & (keys[found] == q)


def accuracy_per_user(top: np.ndarray, first_rank: np.ndarray, test: sp.csr_matrix, users: np.ndarray,
                      k: int = K) -> pd.DataFrame:
    """Per evaluated user: number of test items, hits in the top k, and every accuracy metric."""
    h = hits_matrix(top[:, :k], test, users)
    n_test = np.diff(test.indptr)[users].astype(float)
    found = h.sum(1)
    r = np.arange(1, k + 1)
    disc = 1.0 / np.log2(r + 1.0)
    ideal_len = np.minimum(n_test, k).astype(int)
    idcg = np.concatenate([[0.0], np.cumsum(disc)])[ideal_len]
    prec_at = np.cumsum(h, 1) / r
    out = pd.DataFrame({
        "n_test": n_test.astype(int), "hits": found.astype(int),
        "hit_rate_at_10": (found > 0).astype(float),
        "recall_at_10": found / n_test,
        "precision_at_10": found / k,
        "ndcg_at_10": (h * disc).sum(1) / np.where(idcg > 0, idcg, 1.0),
        "map_at_10": (h * prec_at).sum(1) / np.maximum(ideal_len, 1),
        "mrr": 1.0 / first_rank[users],
        "first_rank": first_rank[users],
    })
    return out


def gini(counts, *, zeros: bool = True) -> float:
    r"""Gini index of non-negative ``counts``, :math:`\frac{\sum_j (2j-n-1) c_{(j)}}{n \sum_j c_j}` over the sorted
    counts; ``zeros=False`` drops zero counts first (seed 001's ``gini_coefficient``). NaN for no mass."""
    c = np.sort(np.asarray(counts, float))
    if not zeros:
        c = c[c > 0]
    n, total = len(c), c.sum()
    if n == 0 or total <= 0:
        return float("nan")
    j = np.arange(1, n + 1)
    return float(((2 * j - n - 1) * c).sum() / (n * total))


def _lists_matrix(top: np.ndarray, users: np.ndarray, n_items: int) -> sp.csr_matrix:
    t = top[users]
    r, c = np.nonzero(t >= 0)
    return sp.csr_matrix((np.ones(len(r)), (r, t[r, c])), shape=(len(users), n_items))


def _personalization(R: sp.csr_matrix, w: np.ndarray | None = None) -> float:
    """1 - mean cosine of the binary list vectors over pairs of (weighted) users."""
    lens = np.asarray(R.sum(1)).ravel()
    ok = lens > 0
    w = np.ones(R.shape[0]) if w is None else np.asarray(w, float)
    w = np.where(ok, w, 0.0)
    Xn = sp.diags(np.where(ok, 1.0 / np.sqrt(np.maximum(lens, 1)), 0.0)) @ R
    n = w.sum()
    if n < 2:
        return float("nan")
    e = Xn.T @ w
    pair_sum = (float(e @ e) - float(w @ np.asarray(Xn.multiply(Xn).sum(1)).ravel())) / 2
    return 1.0 - pair_sum / (n * (n - 1) / 2)


@dataclass(frozen=True)
class BeyondInputs:
    """What the beyond-accuracy metrics need besides the lists: training popularity ``phi`` (n,),
    unit item vectors ``unit_items`` (n, d), the users' mean unit history vector ``history_mean``
    (u, d), and each user's history size and mean history popularity."""

    phi: np.ndarray
    unit_items: np.ndarray
    history_mean: np.ndarray
    history_size: np.ndarray
    history_popularity: np.ndarray

    @classmethod
    def of(cls, train: sp.csr_matrix, item_vectors) -> "BeyondInputs":
        V = np.asarray(item_vectors, np.float64)
        nrm = np.linalg.norm(V, axis=1, keepdims=True)
        V = V / np.where(nrm > 0, nrm, 1.0)
        size = np.diff(train.indptr).astype(float)
        inv = sp.diags(np.where(size > 0, 1.0 / np.maximum(size, 1), 0.0))
        phi = np.asarray(train.sum(0)).ravel()
        return cls(phi, V, np.asarray(inv @ (train @ V)), size, inv @ (train @ phi))


def beyond_per_user(top: np.ndarray, hits: np.ndarray, users: np.ndarray, b: BeyondInputs) -> pd.DataFrame:
    """Per evaluated user: list length, novelty, intra-list diversity, serendipity (NaN without a
    history), mean recommended popularity and mean history popularity."""
    t = top[users]
    ok = t >= 0
    L = ok.sum(1)
    N = b.phi.sum()
    tc = np.maximum(t, 0)
    nov = np.where(ok, -np.log2(np.maximum(b.phi[tc], 1.0) / max(N, 1.0)), 0.0).sum(1) / np.maximum(L, 1)
    ild = np.empty(len(users))
    ser = np.empty(len(users))
    step = chunk_rows(len(users), t.shape[1] * b.unit_items.shape[1] * 8 * 2)
    for s in range(0, len(users), step):
        sl = slice(s, s + step)
        V = b.unit_items[tc[sl]] * ok[sl][:, :, None]
        tot = V.sum(1)
        sq = (V * V).sum((1, 2))
        ll = L[sl].astype(float)
        pair_mean = ((tot * tot).sum(1) - sq) / np.maximum(ll * (ll - 1), 1)
        ild[sl] = np.where(ll >= 2, 1.0 - pair_mean, np.nan)
        unexp = 1.0 - np.einsum("urd,ud->ur", V, b.history_mean[users[sl]])
        ser[sl] = (unexp * hits[sl] * ok[sl]).sum(1) / np.maximum(L[sl], 1)
    has_history = b.history_size[users] > 0
    ser = np.where(has_history, ser, np.nan)
    rec_pop = np.where(ok, b.phi[tc], 0.0).sum(1) / np.maximum(L, 1)
    return pd.DataFrame({"list_length": L, "novelty": np.where(L > 0, nov, np.nan), "intra_list_diversity": ild,
                         "serendipity": ser, "recommended_popularity": np.where(L > 0, rec_pop, np.nan),
                         "history_popularity": np.where(has_history, b.history_popularity[users], np.nan)})


def catalogue_stats(R: sp.csr_matrix, beyond: pd.DataFrame, w: np.ndarray | None = None) -> dict:
    """Catalogue-level metrics of the lists ``R`` (users x items, 0/1), users weighted by ``w``."""
    w = np.ones(R.shape[0]) if w is None else np.asarray(w, float)
    c = R.T @ w
    rp, hp = beyond["recommended_popularity"].to_numpy(), beyond["history_popularity"].to_numpy()
    both = np.isfinite(rp) & np.isfinite(hp) & (w > 0)
    hist = float((w[both] * hp[both]).sum())
    return {"catalog_coverage": float((c > 0).mean()), "gini_index": gini(c), "gini_recommended_only": gini(c, zeros=False),
            "popularity_bias": float((w[both] * rp[both]).sum() / hist) if hist > 0 else float("nan"),
            "personalization": _personalization(R, w)}


def user_mean(per_user: pd.DataFrame, column: str) -> float:
    """The mean of a per-user column over the users where it is defined (NaN where none is): the chapter's value
    of each per-user metric (a unit table read back from its CSV may hold its missing values as text)."""
    x = pd.to_numeric(per_user[column], errors="coerce")
    return float(np.nanmean(x)) if x.notna().any() else float("nan")


@dataclass(frozen=True)
class RecommenderResult:
    """One recommender's per-user table (accuracy and beyond), exposure counts and catalogue numbers."""

    name: str
    per_user: pd.DataFrame
    exposure: np.ndarray
    values: dict
    top: np.ndarray


def evaluate_lists(name: str, ranked: Ranked, split: Split, b: BeyondInputs, users: np.ndarray) -> RecommenderResult:
    acc = accuracy_per_user(ranked.top, ranked.first_rank, split.test, users)
    hits = hits_matrix(ranked.top, split.test, users)
    beyond = beyond_per_user(ranked.top, hits, users, b)
    per_user = pd.concat([acc, beyond], axis=1)
    R = _lists_matrix(ranked.top, users, len(split.item_rows))
    values = {m: user_mean(per_user, m) for m in (*ACCURACY, *PER_USER_BEYOND)}
    values |= catalogue_stats(R, beyond)
    return RecommenderResult(name, per_user, np.asarray(R.sum(0)).ravel(), values, ranked.top)


def catalogue_intervals(result: RecommenderResult, split: Split, users: np.ndarray, level: float, seed: int,
                        n_boot: int = N_BOOT) -> dict:
    """``name -> (low, high, method, bias-corrected)`` of the catalogue-level metrics: basic bootstrap over users."""
    R = _lists_matrix(result.top, users, len(split.item_rows))
    beyond = result.per_user
    reps = weighted_bootstrap(lambda w: np.array(list(catalogue_stats(R, beyond, w).values())), len(users),
                              n_boot=n_boot, seed=seed)
    out = {}
    how = (f"{level:.0%} basic bootstrap over the {len(users):,} {UNIT} ({n_boot} resamples; resampling users "
           "lowers coverage, so the bias-corrected value is shown)")
    for j, name in enumerate(CATALOGUE):
        est = result.values[name]
        bounds = SPECS[name].range
        lo, hi = basic_interval(est, reps[:, j], level, bounds)
        out[name] = (lo, hi, how, bias_corrected(est, reps[:, j], bounds))
    return out


# ---------------------------------------------------------------------------------------------
# Sampled negatives (on request)
# ---------------------------------------------------------------------------------------------

def sampled_per_user(score_pairs, split: Split, users: np.ndarray, n_negatives: int, seed: int = 0) -> pd.DataFrame:
    """Per evaluated user: mean hit@10 and nDCG@10 of its test items, each ranked among ``n_negatives``
    items drawn uniformly (with replacement) from those the user never interacted with.
    ``score_pairs(local_users, items) -> scores``. Ties: the test item after equal negatives."""
    n = len(split.item_rows)
    seen = (split.train + split.test).tocsr()
    rng = np.random.default_rng([seed, 87, 1])
    tr, tc = _csr_rows(split.test, users)
    u = users[tr]
    neg = rng.integers(0, n, (len(u), n_negatives))
    # redraw negatives the user interacted with (a few rounds, then drop them)
    for _ in range(20):
        bad = np.asarray(seen[np.repeat(u, n_negatives), neg.ravel()]).ravel().reshape(neg.shape) > 0
        if not bad.any():
            break
        neg[bad] = rng.integers(0, n, int(bad.sum()))
    valid = np.asarray(seen[np.repeat(u, n_negatives), neg.ravel()]).ravel().reshape(neg.shape) == 0
    pos_s = score_pairs(u, tc)
    neg_s = score_pairs(np.repeat(u, n_negatives), neg.ravel()).reshape(neg.shape)
    rank = 1 + ((neg_s >= pos_s[:, None]) & valid).sum(1)
    hit = (rank <= K).astype(float)
    ndcg = np.where(rank <= K, 1.0 / np.log2(rank + 1.0), 0.0)
    frame = pd.DataFrame({"user": tr, "sampled_hit_rate_at_10": hit, "sampled_ndcg_at_10": ndcg})
    return frame.groupby("user").mean().reindex(np.arange(len(users)))


# ---------------------------------------------------------------------------------------------
# The chapter's evaluation
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RecommendationResult:
    """Everything the chapter shows: ``metrics`` (name -> Metric, the embeddings' recommender),
    ``recommenders`` name -> :class:`RecommenderResult` (embeddings and baselines), ``sampled``
    per-recommender sampled-negative means (empty unless requested), ``split``, ``users`` (the
    evaluated users' local indices), ``protocol`` settings and counts."""

    metrics: dict
    recommenders: dict
    split: Split
    users: np.ndarray
    protocol: dict
    sampled: dict = field(default_factory=dict)
    sampled_metrics: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RecommendationPlan:
    """The protocol, fixed before any vector is read: the split (training and test interactions), the evaluated
    users (local indices, and their ids: the units), the score and the sampled-negative count."""

    split: Split
    users: np.ndarray
    user_ids: np.ndarray
    score: str = "dot"
    sampled_negatives: int = 0


def recommendation_plan(split: Split, ids, *, score: str = "dot", sampled_negatives: int = 0) -> RecommendationPlan:
    """The plan of ``split`` (``ids``: the set's ids, indexed by the split's embedding rows)."""
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, not {score!r}")
    users = split.evaluated
    return RecommendationPlan(split, users, np.asarray(ids, dtype=object)[split.user_rows[users]].astype(str), score,
                              int(sampled_negatives))


@dataclass(frozen=True)
class RecommendationRun:
    """One set of vectors recommending on a plan: ``per_user`` the unit table (``user``, then accuracy and beyond
    per evaluated user), ``embeddings`` its recommender's result, ``lists`` its lists (every user of the split)
    and ``beyond`` what the beyond-accuracy metrics read."""

    per_user: pd.DataFrame
    embeddings: RecommenderResult
    lists: Ranked
    beyond: BeyondInputs


def run_recommendation(vectors, plan: RecommendationPlan, *, device="auto") -> RecommendationRun:
    """Every evaluated user's exact top 10 by ``plan.score`` from ``vectors`` (the whole set: the split's rows are
    read from it) and its metrics."""
    split = plan.split
    return _recommend(vectors[split.user_rows], vectors[split.item_rows], split, plan.score, device, plan.user_ids)


def _recommend(user_vectors, item_vectors, split: Split, score: str, device, user_ids) -> RecommendationRun:
    users = split.evaluated
    U, V = np.asarray(user_vectors), np.asarray(item_vectors)
    ranked = rank_catalogue(U[users], V, split.train[users], split.test[users], score=score, device=device)
    full = Ranked(np.full((len(split.user_rows), K), -1, np.int64), np.zeros(len(split.user_rows), np.int64),
                  ranked.n_scans, ranked.n_rescored)
    full.top[users], full.first_rank[users] = ranked.top, ranked.first_rank
    b = BeyondInputs.of(split.train, V)
    emb = evaluate_lists("embeddings", full, split, b, users)
    per_user = emb.per_user.assign(user=user_ids)
    return RecommendationRun(per_user[["user", *emb.per_user.columns]], emb, full, b)


def evaluate_recommendation(user_vectors, item_vectors, split: Split, *, score: str = "dot",
                            level: float = DEFAULT_LEVEL, seed: int = 0, device="auto", baselines: bool = True,
                            sampled_negatives: int = 0, run: RecommendationRun | None = None) -> RecommendationResult:
    """Recommend, for every evaluated user of ``split``, the top 10 of the whole catalogue by ``score``
    (training items excluded), and compute every metric for the embeddings and the baselines.

    ``user_vectors`` (len(split.user_rows), d) and ``item_vectors`` (len(split.item_rows), d) aligned
    with the split's local indices. Raises :class:`~embeval_report.errors.InputError` when no user
    has a test item. ``run``: the embeddings' lists when already made (:func:`run_recommendation` on the same
    split and score).
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, not {score!r}")
    users = split.evaluated
    if len(users) == 0:
        raise InputError("interactions: no user has a held-out (test) interaction"
                         + (" once test items the user already has in training are dropped"
                            if split.counts.get("test_in_train_dropped") else "")
                         + "; expected at least one user with a test item")
    n = len(split.item_rows)
    U, V = np.asarray(user_vectors), np.asarray(item_vectors)
    tr_u, te_u = split.train[users], split.test[users]
    if run is None:
        run = _recommend(U, V, split, score, device, np.arange(len(users)).astype(str))
    full, b, results = run.lists, run.beyond, {"embeddings": run.embeddings}
    if baselines:
        phi = b.phi
        pop_score = phi - np.arange(n) / (n + 1.0)  # ties: lower catalogue position first (exact in float64)
        pop = rank_by(lambda idx: np.broadcast_to(pop_score, (len(idx), n)), n, tr_u, te_u)
        rnd = rank_by(lambda idx: random_scores(users[idx][:, None], np.arange(n)[None, :], seed), n, tr_u, te_u)
        for name, r in (("most popular", pop), ("random", rnd)):
            f = Ranked(np.full_like(full.top, -1), np.zeros_like(full.first_rank))
            f.top[users], f.first_rank[users] = r.top, r.first_rank
            results[name] = evaluate_lists(name, f, split, b, users)
    emb = results["embeddings"]
    cis = {m: mean_ci(emb.per_user[m].dropna().to_numpy(), level, seed=seed, units=UNIT) + (None,)
           for m in (*ACCURACY, *PER_USER_BEYOND)}
    cis |= catalogue_intervals(emb, split, users, level, seed)
    tag = score
    metrics = {}
    for spec in SPECS.values():
        lo, hi, how, bc = cis[spec.name]
        metrics[spec.name] = spec.record(emb.values[spec.name], (lo, hi), ci_method=how, bias_corrected=bc,
                                         label=f"{spec.label} [{tag}]")
    sampled, sampled_metrics = {}, {}
    if sampled_negatives > 0:
        Us, Is = Space.of(U, score), Space.of(V, score)
        scorers = {"embeddings": lambda u, i: pair_scores(Us, Is, u, i)}
        if baselines:
            scorers["most popular"] = lambda u, i: b.phi[i] - i / (n + 1.0)
            scorers["random"] = lambda u, i: random_scores(u, i, seed)
        for name, f in scorers.items():
            sampled[name] = sampled_per_user(f, split, users, sampled_negatives, seed)
        tag_s = f"sampled: {sampled_negatives} negatives per test item"
        for spec in SAMPLED_SPECS.values():
            x = sampled["embeddings"][spec.name].to_numpy()
            lo, hi, how = mean_ci(x, level, seed=seed, units=UNIT)
            metrics_s = spec.record(float(x.mean()), (lo, hi), ci_method=how, label=f"{spec.label} [{tag_s}]")
            sampled_metrics[spec.name] = metrics_s
    c = split.counts
    protocol = dict(score=score, k=K, split=split.mode, holdout=split.holdout, level=level, seed=seed,
                    n_users=len(split.user_rows), n_items=n, n_evaluated=len(users),
                    n_train=int(split.train.nnz), n_test=int(split.test.nnz),
                    users_without_training=int((np.diff(split.train.indptr)[users] == 0).sum()),
                    sampled_negatives=sampled_negatives, **c)
    info = dict(device=str(resolve_device(device)), top_list_scans=full.n_scans,
                rescored_items=full.n_rescored)
    return RecommendationResult(metrics, results, split, users, protocol, sampled, sampled_metrics, info)


#: shares of the catalogue (most popular first) in the head and the mid; the rest is the tail
HEAD_SHARE, MID_SHARE = 0.2, 0.3


def popularity_groups(phi: np.ndarray) -> np.ndarray:
    """Head (0), mid (1) and tail (2) of the catalogue by training popularity: the 20 % most popular
    items, the next 30 %, and the least popular half (ties in popularity: lower catalogue position first)."""
    n = len(phi)
    order = np.lexsort((np.arange(n), -np.asarray(phi, float)))
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    return np.where(pos < round(HEAD_SHARE * n), 0, np.where(pos < round((HEAD_SHARE + MID_SHARE) * n), 1, 2))


def lorenz(counts) -> tuple[np.ndarray, np.ndarray]:
    """Lorenz curve of ``counts``: cumulative share of items (ascending exposure) vs share of exposure."""
    c = np.sort(np.asarray(counts, float))
    x = np.concatenate([[0.0], np.arange(1, len(c) + 1) / max(len(c), 1)])
    y = np.concatenate([[0.0], np.cumsum(c) / c.sum()]) if c.sum() > 0 else x
    return x, y
