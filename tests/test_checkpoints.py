"""Tests for embeval_report.io.checkpoints: PyTorch-BigGraph folders and gensim model files."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import h5py  # a dependency of the package: imported plainly, never skipped
import numpy as np
import pytest

from embeval_report.errors import InputError
from embeval_report.io.checkpoints import (
    is_gensim_model,
    is_pbg_checkpoint,
    read_gensim_model,
    read_pbg_checkpoint,
)


# ------------------------------------------------------------------ PyTorch-BigGraph

DIM = 4
# entity -> rows per partition; "item_type" has an underscore, like many real entity names
ROWS = {"user": [3, 2], "item_type": [2, 4]}


def _vectors(entity: str, part: int, version: int, rows: int, dim: int = DIM) -> np.ndarray:
    seed = [version, part, len(entity)]
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


def _names(entity: str, part: int, rows: int) -> list[str]:
    return [f"{entity}-{part}-{i}" for i in range(rows)]


def write_h5(path: Path, array: np.ndarray) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("embeddings", data=array)
        f.attrs["format_version"] = 1


def write_names(path: Path, names: list) -> None:
    path.write_text(json.dumps(names), encoding="utf-8")


@pytest.fixture
def pbg(tmp_path: Path) -> Path:
    """A checkpoint folder: 2 entity types x 2 partitions, versions 5 and 10, names alongside."""
    folder = tmp_path / "model"
    folder.mkdir()
    for entity, rows in ROWS.items():
        for part, n in enumerate(rows):
            for version in (5, 10):
                write_h5(folder / f"embeddings_{entity}_{part}.v{version}.h5", _vectors(entity, part, version, n))
            write_names(folder / f"entity_names_{entity}_{part}.json", _names(entity, part, n))
            (folder / f"entity_count_{entity}_{part}.txt").write_text(str(n))
    (folder / "checkpoint_version.txt").write_text("10\n")
    write_h5(folder / "model.v10.h5", np.zeros((1, 1), dtype=np.float32))  # relation parameters: ignored
    (folder / "config.json").write_text(json.dumps({"entity_path": "data/example"}))
    return folder


def expected(entity: str, version: int = 10) -> tuple[np.ndarray, list[str]]:
    rows = ROWS[entity]
    vectors = np.concatenate([_vectors(entity, p, version, n) for p, n in enumerate(rows)])
    return vectors, [name for p, n in enumerate(rows) for name in _names(entity, p, n)]


@pytest.mark.parametrize("entity", sorted(ROWS))
def test_pbg_concatenates_partitions_in_order(pbg: Path, entity: str) -> None:
    vectors, ids = read_pbg_checkpoint(pbg, entity=entity)
    want, names = expected(entity)
    assert vectors.dtype == np.float32 and vectors.flags.c_contiguous
    np.testing.assert_array_equal(vectors, want)
    assert ids.dtype == object and list(ids) == names


def test_pbg_version_file_and_latest(pbg: Path) -> None:
    (pbg / "checkpoint_version.txt").write_text("5")
    np.testing.assert_array_equal(read_pbg_checkpoint(pbg, entity="user")[0], expected("user", 5)[0])
    (pbg / "checkpoint_version.txt").unlink()  # no version file: the latest version present
    np.testing.assert_array_equal(read_pbg_checkpoint(pbg, entity="user")[0], expected("user", 10)[0])
    (pbg / "checkpoint_version.txt").write_text("7")
    with pytest.raises(InputError, match=r"checkpoint_version.txt: names version 7.*version 5, 10 only"):
        read_pbg_checkpoint(pbg, entity="user")
    (pbg / "checkpoint_version.txt").write_text("latest")
    with pytest.raises(InputError, match="expected a checkpoint version number, found 'latest'"):
        read_pbg_checkpoint(pbg, entity="user")


def test_pbg_entity_selection(pbg: Path) -> None:
    with pytest.raises(InputError, match=r"^model: the checkpoint holds 2 entity types \(item_type, user\); choose one"):
        read_pbg_checkpoint(pbg)
    with pytest.raises(InputError, match=r"no embeddings for entity 'page' at version 10; entity types: item_type, user"):
        read_pbg_checkpoint(pbg, entity="page")
    for path in pbg.glob("*item_type*"):
        path.unlink()
    vectors, ids = read_pbg_checkpoint(pbg)  # a single entity type needs no choice
    assert list(ids) == expected("user")[1]


def test_pbg_numeric_partition_order(tmp_path: Path) -> None:
    for part in range(12):  # 10 and 11 sort after 9, not after 1
        write_h5(tmp_path / f"embeddings_node_{part}.v1.h5", np.full((1, 3), part + 1, dtype=np.float32))
        write_names(tmp_path / f"entity_names_node_{part}.json", [f"n{part}"])
    vectors, ids = read_pbg_checkpoint(tmp_path, label="ckpt")
    assert list(ids) == [f"n{p}" for p in range(12)]
    np.testing.assert_array_equal(vectors[:, 0], np.arange(1, 13))


def test_pbg_separate_names_folder(pbg: Path, tmp_path: Path) -> None:
    names = tmp_path / "entities"
    names.mkdir()
    for path in pbg.glob("entity_*"):
        shutil.move(path, names / path.name)
    with pytest.raises(InputError, match=r"entity_names_user_0.json: names file not found.*entity_path 'data/example'"):
        read_pbg_checkpoint(pbg, entity="user")
    vectors, ids = read_pbg_checkpoint(pbg, entity="user", names_folder=names)
    assert list(ids) == expected("user")[1]
    with pytest.raises(InputError, match="names_folder: folder not found"):
        read_pbg_checkpoint(pbg, entity="user", names_folder=tmp_path / "nowhere")


def test_pbg_no_embeddings(tmp_path: Path) -> None:
    (tmp_path / "checkpoint_version.txt").write_text("3")
    assert not is_pbg_checkpoint(tmp_path)
    with pytest.raises(InputError, match=r"no PyTorch-BigGraph embeddings \(embeddings_<entity>_<part>.v<N>.h5\)"):
        read_pbg_checkpoint(tmp_path)
    with pytest.raises(InputError, match="folder not found"):
        read_pbg_checkpoint(tmp_path / "missing")
    with pytest.raises(InputError, match="is not a folder"):
        read_pbg_checkpoint(tmp_path / "checkpoint_version.txt")


def test_is_pbg_checkpoint(pbg: Path) -> None:
    assert is_pbg_checkpoint(pbg)
    assert is_pbg_checkpoint(str(pbg))
    assert not is_pbg_checkpoint(pbg / "config.json")
    assert not is_pbg_checkpoint(pbg / "missing")


def test_pbg_names_count_mismatch(pbg: Path) -> None:
    write_names(pbg / "entity_names_user_1.json", ["a"])
    with pytest.raises(InputError, match=r"entity_names_user_1.json has 1 names but model/embeddings_user_1.v10.h5 "
                                         r"has 2 rows; expected one name per row"):
        read_pbg_checkpoint(pbg, entity="user")


def test_pbg_bad_names_file(pbg: Path) -> None:
    (pbg / "entity_names_user_0.json").write_text("{not json")
    with pytest.raises(InputError, match="entity_names_user_0.json: could not read as JSON"):
        read_pbg_checkpoint(pbg, entity="user")
    write_names(pbg / "entity_names_user_0.json", {"a": 1})
    with pytest.raises(InputError, match="expected a JSON list of names, found dict"):
        read_pbg_checkpoint(pbg, entity="user")
    write_names(pbg / "entity_names_user_0.json", ["a", ["b"], "c"])
    with pytest.raises(InputError, match=r"entity_names_user_0.json, row 2: expected a name"):
        read_pbg_checkpoint(pbg, entity="user")


def test_pbg_missing_names_file(pbg: Path) -> None:
    (pbg / "entity_names_item_type_1.json").unlink()
    with pytest.raises(InputError, match=r"^model/entity_names_item_type_1.json: names file not found"):
        read_pbg_checkpoint(pbg, entity="item_type")


def test_pbg_dimension_mismatch(pbg: Path) -> None:
    write_h5(pbg / "embeddings_user_1.v10.h5", _vectors("user", 1, 10, 2, dim=DIM + 1))
    with pytest.raises(InputError, match=r"embeddings_user_1.v10.h5: 5 dimensions, but embeddings_user_0.v10.h5 "
                                         r"has 4; expected the same in every partition"):
        read_pbg_checkpoint(pbg, entity="user")


def test_pbg_duplicate_names(pbg: Path) -> None:
    write_names(pbg / "entity_names_user_1.json", ["x", "user-0-2"])
    with pytest.raises(InputError, match=r"duplicate name 'user-0-2' in entity_names_user_0.json row 3 and "
                                         r"entity_names_user_1.json row 2"):
        read_pbg_checkpoint(pbg, entity="user")


def test_pbg_missing_partition(pbg: Path) -> None:
    (pbg / "embeddings_user_1.v10.h5").unlink()  # names for partition 1, embeddings only for 0
    with pytest.raises(InputError, match=r"entity_names_user_1.json exists but model has no "
                                         r"embeddings_user_1.v10.h5"):
        read_pbg_checkpoint(pbg, entity="user")
    write_h5(pbg / "embeddings_user_2.v10.h5", _vectors("user", 2, 10, 2))
    with pytest.raises(InputError, match=r"missing embeddings_user_1.v10.h5; found partitions 0, 2"):
        read_pbg_checkpoint(pbg, entity="user")


def test_pbg_bad_h5(pbg: Path) -> None:
    (pbg / "embeddings_user_0.v10.h5").write_bytes(b"not hdf5")
    with pytest.raises(InputError, match="model/embeddings_user_0.v10.h5: could not read as an HDF5 file"):
        read_pbg_checkpoint(pbg, entity="user")
    with h5py.File(pbg / "embeddings_user_0.v10.h5", "w") as f:
        f.create_dataset("weights", data=np.ones((3, DIM)))
    with pytest.raises(InputError, match="expected an HDF5 dataset 'embeddings', found 'weights'"):
        read_pbg_checkpoint(pbg, entity="user")
    write_h5(pbg / "embeddings_user_0.v10.h5", np.ones(3))
    with pytest.raises(InputError, match=r"should be 2-D \(count x dimensions\), found shape \(3,\)"):
        read_pbg_checkpoint(pbg, entity="user")


# ------------------------------------------------------------------ gensim

SENTENCES = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["a", "dog", "ran", "in", "the", "park"],
    ["the", "dog", "sat", "near", "a", "cat"],
    ["cats", "and", "dogs", "are", "friends"],
]
TRAIN = dict(vector_size=8, min_count=1, epochs=2, workers=1, seed=0)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict:
    gensim_models = pytest.importorskip("gensim.models")
    from gensim.models.doc2vec import TaggedDocument

    folder = tmp_path_factory.mktemp("gensim")
    trained = {
        "word2vec": gensim_models.Word2Vec(SENTENCES, **TRAIN),
        "fasttext": gensim_models.FastText(SENTENCES, bucket=100, **TRAIN),  # small n-gram table
        "doc2vec": gensim_models.Doc2Vec([TaggedDocument(s, [f"doc{i}"]) for i, s in enumerate(SENTENCES)], **TRAIN),
        "doc2vec_int": gensim_models.Doc2Vec([TaggedDocument(s, [i]) for i, s in enumerate(SENTENCES)], **TRAIN),
    }
    paths = {}
    for name, model in trained.items():
        paths[name] = folder / f"{name}.model"
        model.save(str(paths[name]))
    paths["kv"] = folder / "words.kv"
    trained["word2vec"].wv.save(str(paths["kv"]))
    return {"folder": folder, "paths": paths, "trained": trained}


@pytest.mark.parametrize("name, attribute", [("word2vec", "wv"), ("fasttext", "wv"), ("doc2vec", "dv"),
                                             ("doc2vec_int", "dv")])
def test_gensim_full_models(models: dict, name: str, attribute: str) -> None:
    path = models["paths"][name]
    kv = getattr(models["trained"][name], attribute)
    assert is_gensim_model(path)
    vectors, ids = read_gensim_model(path, trust=True)
    assert vectors.dtype == np.float32 and vectors.flags.c_contiguous and vectors.flags.writeable
    np.testing.assert_array_equal(vectors, kv.vectors)
    assert ids.dtype == object and list(ids) == [str(k) for k in kv.index_to_key]
    assert all(type(i) is str for i in ids)


def test_gensim_doc2vec_words(models: dict) -> None:
    vectors, ids = read_gensim_model(models["paths"]["doc2vec"], attribute="wv", trust=True)
    wv = models["trained"]["doc2vec"].wv
    np.testing.assert_array_equal(vectors, wv.vectors)
    assert list(ids) == wv.index_to_key
    with pytest.raises(InputError, match="the Word2Vec model has no keyed vectors 'dv'"):
        read_gensim_model(models["paths"]["word2vec"], attribute="dv", trust=True)
    with pytest.raises(InputError, match="unknown gensim attribute 'vectors'; expected 'wv' or 'dv'"):
        read_gensim_model(models["paths"]["word2vec"], attribute="vectors", trust=True)


def test_gensim_keyed_vectors(models: dict) -> None:
    assert is_gensim_model(models["paths"]["kv"])
    vectors, ids = read_gensim_model(models["paths"]["kv"], trust=True)
    wv = models["trained"]["word2vec"].wv
    np.testing.assert_array_equal(vectors, wv.vectors)
    assert list(ids) == wv.index_to_key


def test_gensim_companion_files(models: dict, tmp_path: Path) -> None:
    model = models["trained"]["word2vec"]
    path = tmp_path / "big.model"
    model.save(str(path), sep_limit=0)  # every array in a companion .npy, as for large models
    companions = sorted(p.name for p in tmp_path.glob("big.model.*.npy"))
    assert companions
    vectors, ids = read_gensim_model(path, label="big", trust=True)
    np.testing.assert_array_equal(vectors, model.wv.vectors)
    for name in companions:
        (tmp_path / name).unlink()
    with pytest.raises(InputError, match=r"^big: companion file big.model.\S+.npy not found; .*copy them along"):
        read_gensim_model(path, label="big", trust=True)


def test_gensim_compressed(models: dict, tmp_path: Path) -> None:
    model = models["trained"]["fasttext"]
    path = tmp_path / "ft.model.gz"
    model.save(str(path))
    assert is_gensim_model(path)
    vectors, ids = read_gensim_model(path, trust=True)
    np.testing.assert_array_equal(vectors, model.wv.vectors)


class _Payload:
    """Unpickling this creates a folder: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def test_gensim_not_a_model(tmp_path: Path) -> None:
    text = tmp_path / "notes.model"
    text.write_text("import this\nnot a pickle\n")
    empty = tmp_path / "empty.model"
    empty.write_bytes(b"")
    plain = tmp_path / "plain.model"
    plain.write_bytes(pickle.dumps({"vectors": [1, 2]}))
    other = tmp_path / "other.model"
    other.write_bytes(pickle.dumps(np.random.default_rng(0)))
    for path in (text, empty):
        assert not is_gensim_model(path)
        with pytest.raises(InputError, match=rf"^{path.name}: not a gensim model file \(not a Python pickle"):
            read_gensim_model(path, trust=True)
    with pytest.raises(InputError, match=r"^plain.model: not a gensim model; .*found a pickle of a plain value"):
        read_gensim_model(plain, trust=True)
    with pytest.raises(InputError, match=r"^other.model: not a gensim model; .*found a pickle of numpy"):
        read_gensim_model(other, trust=True)
    assert not is_gensim_model(plain) and not is_gensim_model(other)
    with pytest.raises(InputError, match="file not found"):
        read_gensim_model(tmp_path / "missing.model", trust=True)


def test_gensim_pickle_code_is_not_run(models: dict, tmp_path: Path) -> None:
    top = tmp_path / "evil.model"
    top.write_bytes(pickle.dumps(_Payload(tmp_path / "ran-top"), protocol=4))
    assert not is_gensim_model(top)
    with pytest.raises(InputError, match=r"found a pickle of (posix|nt)\.mkdir"):
        read_gensim_model(top, trust=True)
    model = models["trained"]["word2vec"]
    nested = tmp_path / "nested.model"
    model.payload = _Payload(tmp_path / "ran-nested")  # a model whose pickle hides a call
    try:
        model.save(str(nested))
    finally:
        del model.payload
    assert is_gensim_model(nested)  # the header looks fine ...
    with pytest.raises(InputError, match=r"^nested.model: refused to load: the pickle references (posix|nt)\.mkdir"):
        read_gensim_model(nested, trust=True)  # ... but the unpickler refuses the call
    assert not (tmp_path / "ran-top").exists() and not (tmp_path / "ran-nested").exists()


def test_a_checkpoint_folder_is_a_vectors_source_for_the_report(pbg: Path, tmp_path: Path) -> None:
    """`vectors:` may name a PBG checkpoint folder (with `entity:`); several entity types without one is a
    one-line input error through the CLI (exit 2)."""
    from embeval_report.cli import main
    from embeval_report.io import load_source

    entity = sorted(ROWS)[0]
    (tmp_path / "m.yaml").write_text(f"vectors: {pbg}\nentity: {entity}\n")
    es = load_source(tmp_path / "m.yaml")
    want, names = expected(entity)
    np.testing.assert_array_equal(es.vectors, want)
    assert list(es.ids) == names and "entity" not in es.fields
    assert main(["run", str(pbg), "--out", str(tmp_path / "r"), "--formats", "html", "--chapters", "isotropy"]) == 2
