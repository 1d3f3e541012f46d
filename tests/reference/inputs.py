"""The seeded inputs of the five peer reference checks, built once for both sides.

``make_fixtures.py`` (in the peer venv, NumPy 1.26) and the CI twins (in the project venv) build their inputs
here, so the two cannot drift apart; :func:`digest` fingerprints each case, the script records it beside the
peer's values and the twins refuse a fixture whose inputs are no longer the ones built here. NumPy only, no
project code: the k-NN lists and the top-10 recommendation lists are brute-force NumPy oracles.
"""
from __future__ import annotations

import hashlib

import numpy as np

# ---------------------------------------------------------------------------------------------
# WEFE: WEAT on 30 random words in 12 dimensions, X leaning towards attribute word 12
# ---------------------------------------------------------------------------------------------

WEAT_SETS = {"X": (0, 6), "Y": (6, 12), "A": (12, 18), "B": (18, 24)}  # [start, stop) rows of each word set


def weat_case():
    """``(words, V)``: V float32 (30, 12); the word sets are the row ranges of :data:`WEAT_SETS`."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(30)]
    V = rng.standard_normal((30, 12)).astype(np.float32)
    V[:6] += 0.8 * V[12]
    return words, V


# ---------------------------------------------------------------------------------------------
# irrCAC: Gwet's AC1 and Krippendorff's alpha on the published example and a random matrix
# ---------------------------------------------------------------------------------------------

#: Krippendorff (2011), "Computing Krippendorff's alpha-reliability", §C: 4 observers x 12 units, missing values
KRIPP = [[1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
         [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
         [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
         [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None]]


def random_matrix(seed, n=60, R=5, K=4, missing=0.25):
    """Items x raters labels 0..K-1 (NaN = missing): raters agree with a hidden truth 70 % of the time."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(K, size=n)
    M = np.where(rng.random((n, R)) < 0.7, truth[:, None], rng.integers(K, size=(n, R))).astype(float)
    M[rng.random((n, R)) < missing] = np.nan
    M[np.isnan(M).sum(1) >= R - 1, :2] = truth[np.isnan(M).sum(1) >= R - 1, None]  # every item rated twice
    return M


def agreement_cases():
    """``{name: items x raters matrix}`` of the irrCAC check."""
    return {"krippendorff_2011": np.array(KRIPP, dtype=float).T, "random_seed_5": random_matrix(5)}


# ---------------------------------------------------------------------------------------------
# Microsoft Recommenders: accuracy and beyond-accuracy conventions on a random catalogue
# ---------------------------------------------------------------------------------------------

def random_case(seed, n_users=40, n_items=300, d=8):
    """``(U, V, train, test)``: float32 user / item vectors (three identical items) and per-user item lists."""
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((n_users, d)).astype(np.float32)
    V = rng.standard_normal((n_items, d)).astype(np.float32)
    V[5] = V[7]  # duplicate items tie exactly
    V[n_items - 1] = V[7]
    train = [sorted(rng.choice(n_items, rng.integers(0, 30), replace=False).tolist()) for _ in range(n_users)]
    test = []
    for t in train:
        rest = np.setdiff1d(np.arange(n_items), t)
        test.append(sorted(rng.choice(rest, rng.integers(1, 6), replace=False).tolist()))
    return U, V, train, test


def brute_lists(U, V, train, test, score, k=10):
    """Full float64 score matrix, training items masked, sorted by (score desc, item asc): the top-``k`` lists
    (padded with -1) and each user's rank of the first test item."""
    U, V = np.asarray(U, np.float64), np.asarray(V, np.float64)
    if score == "cosine":
        U = U / np.linalg.norm(U, axis=1, keepdims=True)
        V = V / np.linalg.norm(V, axis=1, keepdims=True)
    S = (U[:, None, :] * V[None, :, :]).sum(-1)  # elementwise: identical items score identically
    tops, firsts = [], []
    for u in range(len(U)):
        seen = set(train[u])
        items = [i for i in range(len(V)) if i not in seen]
        order = sorted(items, key=lambda i: (-S[u, i], i))
        tops.append(order[:k] + [-1] * (k - len(order[:k])))
        firsts.append(min(order.index(i) for i in test[u]) + 1)
    return np.array(tops), np.array(firsts)


def recommendation_case():
    """``(U, V, train, test, top)``: 15 users, 60 items; every user has a training item and user 0 has seen
    every item but its test items (every item is in some history; user 0's list is short); ``top`` the
    brute-force dot-product top-10 lists."""
    U, V, train, test = random_case(6, n_users=15, n_items=60)
    train = [t if t else [0] for t in train]
    train[0] = sorted(set(train[0]) | set(range(60)) - set(test[0]))
    top, _ = brute_lists(U, V, train, test, "dot")
    return U, V, train, test, top


# ---------------------------------------------------------------------------------------------
# kiez: hubness measures of a cosine 10-NN graph
# ---------------------------------------------------------------------------------------------

def shifted_cloud(n, d, shift=0.5, seed=0):
    """A Gaussian cloud off the origin: a cone of directions, the textbook hubby set for cosine."""
    return (np.random.default_rng(seed).standard_normal((n, d)) + shift).astype(np.float32)


def dense_cosine(X):
    U = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    return U @ U.T


def brute_knn(S, k):
    """Top-k columns of each row of a dense score matrix, the diagonal excluded."""
    S = S.copy()
    np.fill_diagonal(S, -np.inf)
    return np.argsort(-S, axis=1, kind="stable")[:, :k]


HUBNESS_K = 10


def hubness_case():
    """``(X, neighbors)``: 600 x 40 shifted cloud and its brute-force cosine 10-NN lists."""
    X = shifted_cloud(600, 40, seed=5)
    return X, brute_knn(dense_cosine(X), HUBNESS_K)


# ---------------------------------------------------------------------------------------------
# Lightning: EarlyStopping's stop step over a grid of settings
# ---------------------------------------------------------------------------------------------

#: (mode, min_delta, patience); a "max" series is the negated loss
EARLY_STOPPING_GRID = [(mode, min_delta, patience) for mode in ("min", "max") for min_delta in (0.0, 0.01, 0.05)
                       for patience in (1, 3, 7)]


def early_stopping_series():
    """``{name: loss curve}``: a noisy exponential decay, and the same with a NaN at step 30."""
    x = np.exp(-np.arange(60) / 10) + np.random.default_rng(1).normal(0, 0.02, 60)
    nan = x.copy()
    nan[30] = np.nan
    return {"decay": x, "decay_nan_at_30": nan}


# ---------------------------------------------------------------------------------------------
# Fingerprints
# ---------------------------------------------------------------------------------------------

CASES = {"wefe": weat_case, "irrcac": agreement_cases, "recommenders": recommendation_case,
         "kiez": hubness_case, "lightning": early_stopping_series}


def _feed(h, obj):
    if isinstance(obj, dict):
        for key in sorted(obj):
            h.update(str(key).encode())
            _feed(h, obj[key])
    elif isinstance(obj, (list, tuple)) and not (obj and all(isinstance(v, (int, float)) for v in obj)):
        h.update(f"[{len(obj)}".encode())
        for v in obj:
            _feed(h, v)
    elif isinstance(obj, str):
        h.update(obj.encode())
    else:
        a = np.asarray(obj)
        h.update(f"{a.shape}".encode())
        if a.dtype.kind == "f":  # 10 significant digits: NumPy versions may differ in the last bit of exp()
            h.update(" ".join(f"{v:.9e}" for v in a.astype(np.float64).ravel()).encode())
        else:
            h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())


def digest(peer: str) -> str:
    """SHA-256 (first 16 hex digits) of the inputs of ``peer``'s check as built here (floats to 10 digits)."""
    h = hashlib.sha256()
    _feed(h, CASES[peer]())
    return h.hexdigest()[:16]
