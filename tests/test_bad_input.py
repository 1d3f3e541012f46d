"""Bad input through the command line: exit status 2, one line naming the file / field / row, no traceback,
nothing written — and every side-data file is checked before any chapter runs."""
import json
import struct

import numpy as np
import pandas as pd
import pytest

from embeval_report.cli import main

N, D = 40, 6


def base(tmp, **files):
    """A valid set (vectors.npy, ids.txt, metadata.csv) plus ``files``; returns the folder."""
    rng = np.random.default_rng(0)
    np.save(tmp / "vectors.npy", rng.standard_normal((N, D)).astype(np.float32))
    ids = [f"e{i}" for i in range(N)]
    (tmp / "ids.txt").write_text("\n".join(ids) + "\n")
    pd.DataFrame({"id": ids, "label": ["a", "b"] * (N // 2)}).to_csv(tmp / "metadata.csv", index=False)
    for name, content in files.items():
        path = tmp / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, np.ndarray):
            np.save(path, content)
        else:
            path.write_text(content)
    return tmp


def manifest(tmp, extra: str = "", core: str = "vectors: vectors.npy\nids: ids.txt\nmetadata: metadata.csv\n"):
    (tmp / "m.yaml").write_text(core + extra)
    return tmp / "m.yaml"


def edges_csv(rows):
    return "src,dst\n" + "".join(f"{a},{b}\n" for a, b in rows)


GOOD_EDGES = edges_csv([(f"e{i}", f"e{(i + 1) % N}") for i in range(N)])
RNG = np.random.default_rng(1)
VEC = RNG.standard_normal((N, D)).astype(np.float32)


def nan_vectors():
    x = VEC.copy()
    x[7, 2] = np.nan
    return x


def inf_vectors():
    x = VEC.copy()
    x[3, 0] = np.inf
    return x


def zero_row():
    x = VEC.copy()
    x[5] = 0
    return x


# name -> (files, manifest extra, manifest core or None, words the one-line message must contain)
CASES = {
    "nan": ({"vectors.npy": nan_vectors()}, "", None, ["vectors.npy", "row 8", "NaN"]),
    "inf": ({"vectors.npy": inf_vectors()}, "", None, ["vectors.npy", "row 4", "inf"]),
    "zero-vector": ({"vectors.npy": zero_row()}, "", None, ["vectors.npy", "row 6", "zero vector"]),
    "ragged-csv": ({"v.csv": "id,a,b\nx,1,2\ny,3\n"}, "", "vectors: v.csv\n", ["v.csv", "row 2", "expected 2"]),
    "string-dtype": ({"vectors.npy": np.array([["a", "b"], ["c", "d"]])}, "", "vectors: vectors.npy\n",
                     ["vectors.npy", "expected numbers"]),
    "one-dimensional": ({"vectors.npy": np.ones(5, np.float32)}, "", "vectors: vectors.npy\n", ["2-D"]),
    "empty-set": ({"vectors.npy": np.zeros((0, 4), np.float32)}, "", "vectors: vectors.npy\n", ["no vectors"]),
    "one-row": ({"vectors.npy": np.ones((1, 4), np.float32)}, "", "vectors: vectors.npy\n", ["only 1 vector"]),
    "empty-csv": ({"v.csv": ""}, "", "vectors: v.csv\n", ["v.csv"]),
    "header-only-csv": ({"v.csv": "id,a,b\n"}, "", "vectors: v.csv\n", ["v.csv"]),
    "corrupt-npy": ({"vectors.npy": b"\x93NUMPY garbage"}, "", None, ["vectors.npy", "could not read"]),
    "corrupt-parquet": ({"v.parquet": b"PAR1 not really"}, "", "vectors: v.parquet\n", ["v.parquet"]),
    "corrupt-safetensors": ({"v.safetensors": struct.pack("<Q", 10) + b"{bad json}"}, "",
                            "vectors: v.safetensors\n", ["v.safetensors"]),
    "corrupt-pt": ({"v.pt": b"not a zip file at all"}, "", "vectors: v.pt\n", ["v.pt"]),
    "malformed-yaml": ({}, "", "vectors: [unclosed\n", ["m.yaml", "YAML"]),
    "unknown-field": ({}, "colour: blue\n", None, ["m.yaml", "colour"]),
    "missing-vectors-field": ({}, "", "name: x\n", ["vectors"]),
    "missing-vectors-file": ({}, "", "vectors: nowhere.npy\n", ["nowhere.npy", "not found"]),
    "ids-count": ({"ids.txt": "a\nb\n"}, "", None, ["ids.txt", "2 ids"]),
    "duplicate-ids": ({"ids.txt": "".join(f"e{i}\n" for i in range(N - 1)) + "e0\n"}, "", None,
                      ["ids.txt", "duplicate id 'e0'"]),
    "ids-not-utf8": ({"ids.txt": b"\xff\xfe\xfa\n" * N}, "", None, ["ids.txt", "UTF-8"]),
    "metadata-unknown-ids": ({"metadata.csv": "id,label\nzz,a\n"}, "", None, ["metadata.csv", "match no vector id"]),
    "metadata-duplicate-ids": ({"metadata.csv": "id,label\ne1,a\ne1,b\n"}, "", None, ["metadata.csv", "duplicate"]),
    "metadata-format": ({"meta.json": "{}"}, "", "vectors: vectors.npy\nids: ids.txt\nmetadata: meta.json\n",
                        ["meta.json", "metadata format"]),
    "edges-unknown-id": ({"edges.csv": edges_csv([("e1", "e2"), ("e3", "ghost")])}, "edges: edges.csv\n", None,
                         ["edges.csv", "row 2", "dst", "ghost"]),
    "edges-missing-column": ({"edges.csv": "from,to\ne1,e2\n"}, "edges: edges.csv\n", None,
                             ["edges.csv", "missing column"]),
    "edges-empty": ({"edges.csv": "src,dst\n"}, "edges: edges.csv\n", None, ["edges.csv", "no rows"]),
    "edges-bad-timestamp": ({"edges.csv": "src,dst,timestamp\ne1,e2,2024-01-01\ne2,e3,soon\n"}, "edges: edges.csv\n",
                            None, ["edges.csv", "row 2", "timestamp"]),
    "test-edges-unknown-id": ({"edges.csv": GOOD_EDGES, "test.csv": edges_csv([("e1", "nobody")])},
                              "edges: edges.csv\ntest_edges: test.csv\n", None, ["test.csv", "nobody"]),
    "negatives-not-a-test-edge": ({"edges.csv": GOOD_EDGES, "test.csv": edges_csv([("e1", "e5")]),
                                   "neg.csv": "src,dst,negative\ne2,e5,e9\n"},
                                  "edges: edges.csv\ntest_edges: test.csv\nnegatives: neg.csv\n", None,
                                  ["neg.csv", "row 1", "not a test edge"]),
    "negatives-unknown-id": ({"edges.csv": GOOD_EDGES, "neg.csv": "src,dst,negative\ne1,e2,ghost\n"},
                             "edges: edges.csv\nnegatives: neg.csv\n", None, ["neg.csv", "negative", "ghost"]),
    "score": ({"edges.csv": GOOD_EDGES}, "edges: edges.csv\nscore: manhattan\n", None, ["score", "manhattan"]),
    "pairs-unknown-id": ({"pairs.csv": "a,b\ne1,who\n"}, "positive_pairs: pairs.csv\n", None,
                         ["pairs.csv", "row 1", "who"]),
    "pairs-headerless": ({"pairs.csv": "e1,e2\ne3,e4\n"}, "positive_pairs: pairs.csv\n", None,
                         ["pairs.csv", "header"]),
    "pairs-self": ({"pairs.csv": "a,b\ne1,e1\n"}, "positive_pairs: pairs.csv\n", None, ["pairs.csv", "itself"]),
    "word-pairs-score": ({"wp.tsv": "e1\te2\t3\ne3\te4\tvery\n"}, "word_pairs: wp.tsv\n", None, ["wp.tsv", "line 2"]),
    "analogies-fields": ({"an.txt": ": s\ne1 e2 e3\n"}, "analogies: an.txt\n", None, ["an.txt", "line 2"]),
    "runs-missing-file": ({}, "runs: [run1.npy]\n", None, ["run1.npy", "not found"]),
    "runs-wrong-rows": ({"run1.npy": VEC[:10]}, "runs: [run1.npy]\n", None, ["run1.npy", "10 rows"]),
    "runs-nan": ({"run1.npy": nan_vectors()}, "runs: [run1.npy]\n", None, ["run1.npy", "NaN"]),
    "runs-no-common-id": ({"run1.csv": "id,a,b\nq1,1,2\nq2,3,4\n"}, "runs: [run1.csv]\n", None,
                          ["run1.csv", "none of its 2 ids"]),
    "tranches-duplicate-name": ({"t1.npy": VEC, "t2.npy": VEC},
                                "tranches: [{name: a, vectors: t1.npy}, {name: a, vectors: t2.npy}]\n", None,
                                ["tranches", "duplicate"]),
    "tranches-mixed-order": ({"t1.npy": VEC, "t2.npy": VEC},
                             "tranches: [{name: a, vectors: t1.npy, order: 1}, {name: b, vectors: t2.npy, "
                             "order: later}]\n", None, ["tranches", "order"]),
    "vocabulary-unknown-ids": ({"voc.txt": "x\ny\n"}, "vocabularies: [{name: v, ids: voc.txt}]\n", None,
                               ["voc.txt", "none of its 2 ids"]),
    "vocabulary-duplicate-name": ({"voc.txt": "e1\n"}, "vocabularies: [{name: v, ids: voc.txt}, {name: v, ids: "
                                                       "voc.txt}]\n", None, ["vocabularies", "duplicate"]),
    "snapshots-same-suffix": ({"s1.npy": VEC, "s2.npy": VEC},
                              "snapshots: [{name: 'A b', vectors: s1.npy}, {name: 'a-B', vectors: s2.npy}]\n", None,
                              ["snapshots", "suffix"]),
    "snapshots-time-order": ({"s1.npy": VEC, "s2.npy": VEC},
                             "snapshots: [{name: a, vectors: s1.npy, timestamp: 2024-05-01}, "
                             "{name: b, vectors: s2.npy, timestamp: 2024-01-01}]\n", None, ["snapshots", "time order"]),
    "snapshots-too-few-matched": ({"s1.csv": "id,a,b,c,d,e,f\ne1,1,2,3,4,5,6\nzz,1,1,1,1,1,1\n"},
                                  "snapshots: [{name: a, vectors: s1.csv}]\n", None, ["s1.csv", "only 1"]),
    "field-wrong-type": ({}, "runs: run1.npy\n", None, ["runs", "list"]),
    "qrels-unknown-document": ({"q.txt": "e1 0 e2 1\ne1 0 nowhere 1\n"}, "qrels: q.txt\n", None,
                               ["q.txt", "nowhere"]),
    "qrels-bad-grade": ({"q.txt": "query_id,doc_id,relevance\ne1,e2,high\n"}, "qrels: q.txt\n", None,
                        ["q.txt", "row 1", "high"]),
    "queries-wrong-dimension": ({"qv.npy": VEC[:3, :4], "qid.txt": "a\nb\nc\n", "q.txt": "a 0 e1 1\n"},
                                "queries: {vectors: qv.npy, ids: qid.txt}\nqrels: q.txt\n", None,
                                ["qv.npy", "4 dimensions", "expected 6"]),
    "queries-without-ids": ({"qv.npy": VEC[:3], "q.txt": "a 0 e1 1\n"},
                            "queries: {vectors: qv.npy}\nqrels: q.txt\n", None, ["qv.npy", "ids"]),
    "qrels-unknown-query": ({"qv.npy": VEC[:3], "qid.txt": "a\nb\nc\n", "q.txt": "a 0 e1 1\nzz 0 e2 1\n"},
                            "queries: {vectors: qv.npy, ids: qid.txt}\nqrels: q.txt\n", None, ["q.txt", "zz"]),
    "exclude-self-not-bool": ({"q.txt": "e1 0 e2 1\n"}, "qrels: q.txt\nexclude_self: sometimes\n", None,
                              ["exclude_self", "true or false"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, case):
    files, extra, core, words = CASES[case]
    base(tmp_path, **files)
    m = manifest(tmp_path, extra, core) if core is not None else manifest(tmp_path, extra)
    out = tmp_path / "report"
    assert main(["run", str(m), "--out", str(out), "--formats", "html"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("embeval-report: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not out.exists() and not list(tmp_path.glob(".report.partial-*"))


def test_there_are_at_least_forty_distinct_bad_inputs():
    assert len(CASES) >= 40


@pytest.mark.parametrize("bad_id", ["ghost\nline two", "\x1b[2Jclear", "<script>x</script>"])
def test_hostile_ids_stay_on_one_line(tmp_path, capsys, bad_id):
    base(tmp_path)
    pd.DataFrame({"src": ["e1"], "dst": [bad_id]}).to_csv(tmp_path / "edges.csv", index=False)
    m = manifest(tmp_path, "edges: edges.csv\n")
    assert main(["run", str(m), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "\x1b" not in err


@pytest.mark.parametrize("argv, words", [
    (["--formats", "docx"], ["--formats"]),
    (["--set", "k=ten"], ["option k", "int"]),
    (["--set", "ties=sometimes"], ["option ties"]),
    (["--sample-size", "1"], ["sample_size"]),
    (["--chapters", "nope"], ["unknown chapter"]),
])
def test_bad_options_exit_2(tmp_path, capsys, argv, words):
    m = manifest(base(tmp_path))
    assert main(["run", str(m), "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and all(w in err for w in words), err


def test_unknown_option_name_is_a_usage_error(tmp_path, capsys):
    m = manifest(base(tmp_path))
    with pytest.raises(SystemExit) as exc:
        main(["run", str(m), "--out", str(tmp_path / "o"), "--set", "colour=red"])
    assert exc.value.code == 2 and "NAME=VALUE" in capsys.readouterr().err


def test_side_data_is_checked_before_any_chapter(tmp_path, capsys):
    """The issue's example: an edges file naming an unknown id used to fail one chapter and exit 0."""
    m = manifest(base(tmp_path, **{"edges.csv": edges_csv([("e1", "e2"), ("e2", "nobody")])}), "edges: edges.csv\n")
    assert main(["run", str(m), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "nobody" in err and "started" not in err and not (tmp_path / "o").exists()


def test_options_command_lists_every_option(capsys):
    from embeval_report.chapters.registry import options

    OPTIONS = options()

    assert main(["options"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in OPTIONS)


def test_help_documents_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert all(f"  {code}  " in out or f"  {code} " in out for code in (0, 1, 2, 3, 4, 130))
    json.dumps(out)  # plain text
