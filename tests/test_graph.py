"""Graph side data: readers and their errors, splits, negative sampling, heuristics (against networkx), demo,
and the degenerate inputs of the link-prediction chapters."""
import networkx as nx
import numpy as np
import pandas as pd
import pytest

from embeval_report.demo import graph as demo_graph
from embeval_report.errors import InputError
from embeval_report.io import graph as io_graph
from embeval_report.metrics import graph as g

IDS = np.array([f"n{i}" for i in range(10)], dtype=object)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------

def test_read_edges_with_all_columns(tmp_path):
    p = write(tmp_path, "e.csv", "src,dst,relation,timestamp,weight\n"
                                 "n0,n1,a,2024-01-02,1.5\nn2,n3,b,2024-01-01T12:00,2\nn1,n4,a,2024-02-01,0\n")
    e = io_graph.read_edges(p, IDS)
    assert list(e.src) == [0, 2, 1] and list(e.dst) == [1, 3, 4]
    assert list(e.relation) == ["a", "b", "a"] and e.time_is_date and list(e.weight) == [1.5, 2, 0]
    assert e.time[1] - e.time[0] == -12 * 3600  # 2024-01-01 12:00 is 12 h before 2024-01-02
    assert e.time[0] == pd.Timestamp("2024-01-02").timestamp()


def test_numeric_timestamps_tsv_and_parquet(tmp_path):
    p = write(tmp_path, "e.tsv", "src\tdst\ttimestamp\nn0\tn1\t5\nn1\tn2\t3.5\n")
    e = io_graph.read_edges(p, IDS)
    assert not e.time_is_date and list(e.time) == [5.0, 3.5]
    pd.DataFrame({"src": ["n0", "n5"], "dst": ["n1", "n6"]}).to_parquet(tmp_path / "e.parquet")
    e = io_graph.read_edges(tmp_path / "e.parquet", IDS)
    assert list(e.src) == [0, 5] and e.time is None and e.relation is None


@pytest.mark.parametrize("text, expected", [
    ("src,target\nn0,n1\n", r"e\.csv: missing column\(s\) 'dst'; expected columns src, dst .*found 'src', 'target'"),
    ("src,dst\nn0,n1\nn2,zzz\n", r"e\.csv, row 2, column 'dst': unknown id 'zzz'"),
    ("src,dst\nn0,n1\n,n2\n", r"e\.csv, row 2, column 'src': empty value"),
    ("src,dst,timestamp\nn0,n1,2024-01-01\nn1,n2,yesterday\n", r"row 2, column 'timestamp': 'yesterday' is neither"),
    ("src,dst,timestamp\nn0,n1,3\nn1,n2,2024-01-01\n", r"row 2, column 'timestamp': expected a number like the other"),
    ("src,dst,timestamp\nn0,n1,3\nn1,n2,\n", r"row 2, column 'timestamp': empty value"),
    ("src,dst,weight\nn0,n1,1\nn1,n2,heavy\n", r"row 2, column 'weight': expected a finite number, found 'heavy'"),
    ("src,dst,weight\nn0,n1,inf\n", r"row 1, column 'weight': expected a finite number"),
    ("src,dst\n", r"e\.csv: no rows"),
    ("src,dst\nn1,n1\n", r"no edges left after dropping 1 self-loop"),
])
def test_bad_edge_files_name_file_row_and_column(tmp_path, text, expected):
    with pytest.raises(InputError, match=expected):
        io_graph.read_edges(write(tmp_path, "e.csv", text), IDS)


def test_unsupported_format_and_missing_file(tmp_path):
    with pytest.raises(InputError, match=r"unsupported format '\.json'"):
        io_graph.read_edges(write(tmp_path, "e.json", "{}"), IDS)
    with pytest.raises(InputError, match="file not found"):
        io_graph.read_edges(tmp_path / "nope.csv", IDS)


def test_self_loops_and_duplicates_are_dropped_keeping_the_earliest(tmp_path):
    p = write(tmp_path, "e.csv", "src,dst,timestamp\nn0,n1,5\nn2,n2,1\nn0,n1,2\nn1,n0,9\n")
    e = io_graph.read_edges(p, IDS)
    assert e.notes == {"self_loops_dropped": 1, "duplicates_dropped": 1}
    assert sorted(zip(e.src, e.dst, e.time)) == [(0, 1, 2.0), (1, 0, 9.0)]  # (n1, n0) is another direction


def test_read_negatives_groups_and_pads(tmp_path):
    test = io_graph.read_edges(write(tmp_path, "t.csv", "src,dst\nn0,n1\nn2,n3\n"), IDS)
    p = write(tmp_path, "neg.csv", "src,dst,negative\nn2,n3,n5\nn0,n1,n7\nn0,n1,n8\nn2,n3,n6\nn0,n1,n9\n")
    t2, neg = io_graph.read_negatives(p, IDS, test)
    assert len(t2) == 2
    np.testing.assert_array_equal(neg, [[7, 8, 9], [5, 6, -1]])
    # without test edges: the test edges are the distinct (src, dst) of the file, in order of appearance
    t3, neg3 = io_graph.read_negatives(p, IDS)
    assert list(zip(t3.src, t3.dst)) == [(2, 3), (0, 1)]
    np.testing.assert_array_equal(neg3, [[5, 6, -1], [7, 8, 9]])


def test_negatives_errors(tmp_path):
    test = io_graph.read_edges(write(tmp_path, "t.csv", "src,dst\nn0,n1\nn2,n3\n"), IDS)
    with pytest.raises(InputError, match=r"neg\.csv, row 2, columns 'src', 'dst': \('n4', 'n1'\) is not a test edge"):
        io_graph.read_negatives(write(tmp_path, "neg.csv", "src,dst,negative\nn0,n1,n5\nn4,n1,n5\n"), IDS, test)
    with pytest.raises(InputError, match=r"test edge \('n2', 'n3'\) \(row 2 of t\.csv\) has no negatives"):
        io_graph.read_negatives(write(tmp_path, "neg.csv", "src,dst,negative\nn0,n1,n5\n"), IDS, test)
    with pytest.raises(InputError, match=r"missing column\(s\) 'negative'"):
        io_graph.read_negatives(write(tmp_path, "neg.csv", "src,dst,neg\nn0,n1,n5\n"), IDS, test)
    with pytest.raises(InputError, match=r"row 1, column 'negative': unknown id 'x'"):
        io_graph.read_negatives(write(tmp_path, "neg.csv", "src,dst,negative\nn0,n1,x\n"), IDS, test)


def test_read_score():
    assert io_graph.read_score(None) == "dot" and io_graph.read_score(" Cosine ") == "cosine" and io_graph.read_score("neg_l2") == "neg_l2"
    with pytest.raises(InputError, match=r"manifest field 'score': expected one of dot, cosine, neg_l2, found 'l1'"):
        io_graph.read_score("l1")


def test_manifest_accepts_the_score_field(tmp_path):
    from embeval_report.io import load_source
    np.save(tmp_path / "v.npy", np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(IDS))
    write(tmp_path, "e.csv", "src,dst\nn0,n1\n")
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nedges: e.csv\nscore: cosine\n")
    es = load_source(tmp_path / "m.yaml")
    assert es.has("edges") and io_graph.read_score(es.fields["score"]) == "cosine"


# ---------------------------------------------------------------------------------------------
# Known edges, splits, negatives
# ---------------------------------------------------------------------------------------------

def test_known_edges_are_undirected_and_per_relation():
    k = g.KnownEdges.from_edges(10, (np.array([0, 2]), np.array([1, 3]), np.array([0, 1])))
    np.testing.assert_array_equal(k.contains([0, 1, 2, 3, 0], [1, 0, 3, 2, 2], [0, 0, 1, 1, 0]),
                                  [True, True, True, True, False])
    assert not k.contains([2], [3], [0])[0]  # same pair, other relation


def _timed_edges(n_edges=200, n=30, seed=0, ties=False):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, n_edges), rng.integers(0, n, n_edges)
    key = np.minimum(src, dst) * n + np.maximum(src, dst)
    keep = (src != dst) & ~pd.Series(key).duplicated().to_numpy()  # a simple undirected graph
    t = rng.integers(0, 20, n_edges).astype(float) if ties else rng.random(n_edges)
    return g.EdgeList(src[keep], dst[keep], time=t[keep], file="e.csv")


@pytest.mark.parametrize("ties", [False, True])
def test_temporal_split_never_leaks(ties):
    e = _timed_edges(ties=ties)
    train, test, cut = g.temporal_split(e, 0.8)
    assert train.time.max() < test.time.min() and test.time.min() == cut  # every train time < every test time
    assert len(train) + len(test) == len(e)
    assert abs(len(train) / len(e) - 0.8) < (0.1 if ties else 0.01)


def test_temporal_split_needs_two_distinct_times():
    e = g.EdgeList(np.array([0, 1]), np.array([1, 2]), time=np.array([3.0, 3.0]), file="e.csv")
    with pytest.raises(InputError, match="all edges fall on one side of the cut"):
        g.temporal_split(e, 0.8)


def test_random_split_is_seeded_and_partitions():
    e = _timed_edges()
    a_tr, a_te = g.random_split(e, 0.2, seed=3)
    b_tr, b_te = g.random_split(e, 0.2, seed=3)
    np.testing.assert_array_equal(a_te.src, b_te.src)
    assert len(a_te) == round(0.2 * len(e)) and len(a_tr) + len(a_te) == len(e)
    pairs = lambda x: set(zip(x.src, x.dst, x.time))
    assert pairs(a_tr).isdisjoint(pairs(a_te)) and len(pairs(a_tr) | pairs(a_te)) == len(e)


def test_build_link_data_auto_split_uses_time_and_removes_given_test_edges():
    e = _timed_edges()
    d = g.build_link_data(e, 30, n_negatives=5)
    assert d.train.time.max() < d.test.time.min() and d.split.startswith("time split")
    assert d.candidates.shape == (len(d.test), 6) and (d.candidates[:, 0] == d.test.dst).all()
    given = e.take(np.arange(5))
    d2 = g.build_link_data(e, 30, test=given, n_negatives=5)
    assert len(d2.train) == len(e) - 5 and d2.notes["test_edges_also_in_edges"] == 5
    assert d2.known.contains(given.src, given.dst, np.zeros(5, int)).all()


def test_uniform_negatives_avoid_own_ends_and_are_seeded():
    src, dst = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0])
    a = g.sample_negatives(src, dst, 6, 50, seed=1)
    assert a.shape == (4, 50) and not ((a == src[:, None]) | (a == dst[:, None])).any()
    np.testing.assert_array_equal(a, g.sample_negatives(src, dst, 6, 50, seed=1))
    counts = np.bincount(a.ravel(), minlength=6)
    assert (counts > 0).sum() == 6  # every other entity is used
    pool = g.sample_negatives(src, dst, 6, 20, pool=[4, 5, 0], seed=2)
    assert set(np.unique(pool)) <= {0, 4, 5}


def test_same_batch_negatives_are_the_other_destinations_of_the_batch():
    rng = np.random.default_rng(0)
    B, m = 40, 9
    src, dst = rng.integers(0, 1000, B), 1000 + rng.permutation(1000)[:B]  # distinct, disjoint from src
    neg = g.sample_negatives(src, dst, 2000, m, strategy="batch", seed=0)
    full = B // (m + 1) * (m + 1)
    assert np.isin(neg, dst).all() and not (neg == dst[:, None]).any()
    # each batch of m + 1 edges: every edge's negatives are exactly the other m destinations
    order = np.random.default_rng([0, 90, 2]).permutation(B)
    for s in range(0, full, m + 1):
        batch = order[s:s + m + 1]
        for i in batch:
            assert sorted(neg[i]) == sorted(dst[batch[batch != i]])


def test_destination_pool_is_per_relation():
    rel = np.array(["u-i"] * 50 + ["u-u"] * 50, dtype=object)
    src = np.r_[np.arange(50) % 20, np.arange(50) % 20]
    dst = np.r_[20 + np.arange(50) % 10, (np.arange(50) + 1) % 20]
    e = g.EdgeList(src, dst, relation=rel, file="e.csv")
    d = g.build_link_data(e, 30, split="random", n_negatives=30, pool="destinations")
    items = d.test_rel == d.relations.index("u-i")
    assert (d.candidates[items, 1:] >= 20).all() and (d.candidates[~items, 1:] < 20).all()


# ---------------------------------------------------------------------------------------------
# Heuristics against networkx
# ---------------------------------------------------------------------------------------------

def test_heuristics_match_networkx():
    G = nx.gnm_random_graph(40, 120, seed=3)
    G.add_node(40)  # an isolated node: all neighbourhoods empty
    e = g.EdgeList(np.array([u for u, _ in G.edges()]), np.array([v for _, v in G.edges()]))
    A = g.adjacency(e, 41)
    assert (A != A.T).nnz == 0 and A.diagonal().sum() == 0
    pairs = [(u, v) for u in range(41) for v in range(u + 1, 41)][::7] + [(40, 3), (40, 39)]
    u, v = np.array(pairs).T
    ref = {"common_neighbours": [len(list(nx.common_neighbors(G, a, b))) for a, b in pairs],
           "jaccard": [p for *_, p in nx.jaccard_coefficient(G, pairs)],
           "adamic_adar": [p for *_, p in nx.adamic_adar_index(G, pairs)],
           "resource_allocation": [p for *_, p in nx.resource_allocation_index(G, pairs)],
           "preferential_attachment": [p for *_, p in nx.preferential_attachment(G, pairs)]}
    for name, want in ref.items():
        np.testing.assert_allclose(g.heuristic_scores(A, u, v, name, chunk=13), want, err_msg=name)


# ---------------------------------------------------------------------------------------------
# Demo
# ---------------------------------------------------------------------------------------------

def test_demo_side_data_over_the_demo_ids(tmp_path):
    from embeval_report.demo import streaming_embeddings
    streaming_embeddings(n_users=300, n_items=100, dim=16)[1].to_csv(tmp_path / "metadata.csv", index=False)
    entries = demo_graph.demo_side_data(tmp_path)
    assert entries == {"edges": "edges.csv"}
    meta = pd.read_csv(tmp_path / "metadata.csv")
    e = io_graph.read_edges(tmp_path / entries["edges"], meta["id"].to_numpy(dtype=object))
    assert e.time_is_date and len(e) > 2000 and e.notes["duplicates_dropped"] == 0
    assert set(e.relation) == {"user-user", "user-item", "item-item"}
    span = (e.time.max() - e.time.min()) / 86400
    assert 330 < span <= 366
    genre = meta["label"].to_numpy()
    same = (genre[e.src] == genre[e.dst])
    early, late = e.time < np.quantile(e.time, 0.2), e.time > np.quantile(e.time, 0.8)
    assert same[early].mean() > 0.7 and same[late].mean() < same[early].mean() - 0.15  # block affinity drifts
    # deterministic
    first = (tmp_path / "edges.csv").read_text()
    demo_graph.demo_side_data(tmp_path)
    assert (tmp_path / "edges.csv").read_text() == first
