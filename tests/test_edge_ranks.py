"""The link-prediction filter on the CPU (issue 44 item 1): the known negatives found by one numpy search per block
of rows are the ones a brute-force set lookup finds (padding excluded), and the filtered ranks drop exactly those."""
import numpy as np
import torch

from embeval_report.kernels import edge_ranks


def test_known_candidates_match_a_set_lookup_and_the_filtered_ranks_drop_them(monkeypatch):
    rng = np.random.default_rng(5)
    n, B, m = 40, 300, 7
    edges = {(int(r), *sorted(map(int, rng.choice(n, 2, replace=False)))) for r in rng.integers(0, 2, 200)}
    keys = np.sort([r * n * n + a * n + b for r, a, b in edges])
    src, rel = rng.integers(0, n, B), rng.integers(0, 2, B)
    cand = rng.integers(0, n, (B, 1 + m))
    cand[rng.random((B, 1 + m)) < 0.1] = -1
    cand[:, 0] = rng.integers(0, n, B)
    expected = np.array([[c >= 0 and (int(r), *sorted((int(u), int(c)))) in edges for c in row[1:]]
                         for u, r, row in zip(src, rel, cand)])
    monkeypatch.setattr(edge_ranks, "FILTER_BLOCK", 50)  # several blocks
    got = edge_ranks.known_candidates(keys, src, cand, rel, n)
    assert got.any() and np.array_equal(got, expected)
    X = rng.standard_normal((n, 4)).astype(np.float32)
    ranks, S, removed = edge_ranks.rank_candidates(X, src, cand, score="dot", keys=keys, rel=rel, keep_scores=True,
                                                   dev=torch.device("cpu"), engine="numpy")
    assert np.array_equal(removed, expected)
    scores = np.nan_to_num(S, nan=0.0)
    o, p, c = edge_ranks.ranks_of_scores(scores, (cand[:, 1:] >= 0) & ~expected)
    assert np.array_equal(ranks["fo"], o) and np.array_equal(ranks["fp"], p) and np.array_equal(ranks["fn"], c)
