"""Tests for embeval_report.io: formats, validation messages, manifests, prepared cache."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embeval_report.errors import InputError
from embeval_report.io.manifest import _CHECKERS
from embeval_report.io import (
    FIELD_KINDS,
    MANIFEST_FIELDS,
    VECTOR_FORMATS,
    EmbeddingSet,
    ManifestField,

    load_prepared,
    load_source,
    load_vectors,
    read_manifest,
    save_prepared,
)

WORDS = ["cat", "dog", "null", "007", "New York"]  # "null" and "007" must survive as text


@pytest.fixture
def vecs() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((5, 4)).astype(np.float32)


def write_manifest(folder: Path, text: str, name: str = "set.yaml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def assert_loaded(path: Path, vecs: np.ndarray, ids: list[str] | None) -> None:
    vectors, got_ids = load_vectors(path)
    assert vectors.dtype == np.float32 and vectors.flags.c_contiguous and vectors.flags.writeable
    np.testing.assert_array_equal(vectors, vecs)
    if ids is None:
        assert got_ids is None
    else:
        assert got_ids.dtype == object and list(got_ids) == ids
        assert all(type(i) is str for i in got_ids)


# ------------------------------------------------------------------ round trips


def test_npy_float32(tmp_path, vecs):
    np.save(tmp_path / "v.npy", vecs)
    assert_loaded(tmp_path / "v.npy", vecs, None)


def test_npy_float64_is_cast(tmp_path, vecs):
    np.save(tmp_path / "v.npy", vecs.astype(np.float64))
    assert_loaded(tmp_path / "v.npy", vecs, None)


def test_npy_fortran_order_becomes_c_contiguous(tmp_path, vecs):
    np.save(tmp_path / "v.npy", np.asfortranarray(vecs))
    assert_loaded(tmp_path / "v.npy", vecs, None)


def test_npz_single_array(tmp_path, vecs):
    np.savez(tmp_path / "v.npz", whatever=vecs)
    assert_loaded(tmp_path / "v.npz", vecs, None)


def test_npz_named_with_ids(tmp_path, vecs):
    np.savez(tmp_path / "v.npz", embeddings=vecs, ids=np.array(WORDS), other=np.zeros(3))
    assert_loaded(tmp_path / "v.npz", vecs, WORDS)


def test_npz_ambiguous_arrays(tmp_path, vecs):
    np.savez(tmp_path / "v.npz", a=vecs, b=vecs)
    with pytest.raises(InputError, match=r"v\.npz: expected a single array or one named 'vectors'.*found 'a', 'b'"):
        load_vectors(tmp_path / "v.npz")


def test_parquet_id_column(tmp_path, vecs):
    frame = pd.DataFrame(vecs, columns=[f"d{i}" for i in range(4)])
    frame.insert(0, "id", WORDS)
    frame.to_parquet(tmp_path / "v.parquet")
    assert_loaded(tmp_path / "v.parquet", vecs, WORDS)


def test_parquet_numeric_id_column_named_id(tmp_path, vecs):
    frame = pd.DataFrame(vecs, columns=[f"d{i}" for i in range(4)])
    frame.insert(0, "id", [10, 11, 12, 13, 14])
    frame.to_parquet(tmp_path / "v.parquet")
    assert_loaded(tmp_path / "v.parquet", vecs, ["10", "11", "12", "13", "14"])


def test_parquet_index_and_list_column(tmp_path, vecs):
    frame = pd.DataFrame({"embedding": list(vecs)}, index=pd.Index(WORDS, name="word"))
    frame.to_parquet(tmp_path / "v.parquet")
    assert_loaded(tmp_path / "v.parquet", vecs, WORDS)


def test_parquet_single_float32_column(tmp_path, vecs):
    pd.DataFrame({"x": vecs[:, 0]}).to_parquet(tmp_path / "v.parquet")
    assert_loaded(tmp_path / "v.parquet", vecs[:, :1], None)


def test_parquet_no_ids(tmp_path, vecs):
    pd.DataFrame(vecs, columns=list("abcd")).to_parquet(tmp_path / "v.parquet")
    assert_loaded(tmp_path / "v.parquet", vecs, None)


def test_csv_with_id_header(tmp_path, vecs):
    frame = pd.DataFrame(vecs, columns=[f"d{i}" for i in range(4)])
    frame.insert(0, "id", WORDS)
    frame.to_csv(tmp_path / "v.csv", index=False)
    assert_loaded(tmp_path / "v.csv", vecs, WORDS)


def test_csv_headerless_numeric(tmp_path, vecs):
    pd.DataFrame(vecs).to_csv(tmp_path / "v.csv", index=False, header=False)
    assert_loaded(tmp_path / "v.csv", vecs, None)


def test_csv_pandas_default_header(tmp_path, vecs):
    pd.DataFrame(vecs).to_csv(tmp_path / "v.csv", index=False)  # header "0,1,2,3"
    assert_loaded(tmp_path / "v.csv", vecs, None)


def test_csv_pandas_index_column(tmp_path, vecs):
    pd.DataFrame(vecs, index=WORDS).to_csv(tmp_path / "v.csv")  # header ",0,1,2,3"
    assert_loaded(tmp_path / "v.csv", vecs, WORDS)


def test_csv_headerless_with_word_column(tmp_path, vecs):
    pd.DataFrame(vecs, index=WORDS).to_csv(tmp_path / "v.csv", header=False)
    assert_loaded(tmp_path / "v.csv", vecs, WORDS)


def test_tsv(tmp_path, vecs):
    frame = pd.DataFrame(vecs, columns=[f"d{i}" for i in range(4)])
    frame.insert(0, "id", WORDS)
    frame.to_csv(tmp_path / "v.tsv", sep="\t", index=False)
    assert_loaded(tmp_path / "v.tsv", vecs, WORDS)


def _keyed_vectors(vecs):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=vecs.shape[1])
    kv.add_vectors(["cat", "dog", "null", "007", "york"], vecs)
    return kv


@pytest.mark.parametrize("binary", [False, True])
def test_word2vec_formats(tmp_path, vecs, binary):
    path = tmp_path / ("v.bin" if binary else "v.txt")
    _keyed_vectors(vecs).save_word2vec_format(str(path), binary=binary)
    assert_loaded(path, vecs, ["cat", "dog", "null", "007", "york"])


def test_word2vec_text_without_header(tmp_path, vecs):
    path = tmp_path / "v.vec"
    _keyed_vectors(vecs).save_word2vec_format(str(path), binary=False, write_header=False)
    assert_loaded(path, vecs, ["cat", "dog", "null", "007", "york"])


@pytest.mark.parametrize("suffix", [".kv", ".model"])
def test_gensim_keyedvectors(tmp_path, vecs, suffix):
    from embeval_report.io.policy import input_policy

    _keyed_vectors(vecs).save(str(tmp_path / f"v{suffix}"))
    with pytest.raises(InputError, match=rf"^v{suffix}: refused to read a gensim pickle .*--trust-pickles"):
        load_vectors(tmp_path / f"v{suffix}")  # a pickle: read only when trusted
    with input_policy(trust_pickles=True):
        assert_loaded(tmp_path / f"v{suffix}", vecs, ["cat", "dog", "null", "007", "york"])


def test_safetensors(tmp_path, vecs):
    from safetensors.numpy import save_file

    save_file({"embeddings": vecs, "bias": np.zeros(4, np.float32)}, str(tmp_path / "v.safetensors"))
    assert_loaded(tmp_path / "v.safetensors", vecs, None)


def test_safetensors_bfloat16(tmp_path, vecs):
    import torch
    from safetensors.torch import save_file

    tensor = torch.from_numpy(vecs).to(torch.bfloat16)
    save_file({"w": tensor}, str(tmp_path / "v.safetensors"))
    assert_loaded(tmp_path / "v.safetensors", tensor.float().numpy(), None)


def test_torch_tensor(tmp_path, vecs):
    import torch

    torch.save(torch.from_numpy(vecs), tmp_path / "v.pt")
    assert_loaded(tmp_path / "v.pt", vecs, None)


def test_torch_dict_with_ids(tmp_path, vecs):
    import torch

    torch.save({"vectors": torch.from_numpy(vecs), "ids": WORDS}, tmp_path / "v.pth")
    assert_loaded(tmp_path / "v.pth", vecs, WORDS)


def test_torch_refuses_pickled_objects(tmp_path, vecs):
    import torch

    torch.save({"vectors": torch.from_numpy(vecs), "ids": np.array(WORDS)}, tmp_path / "v.pt")
    message = r"v\.pt: could not read as a PyTorch file \(torch\.load with weights_only=True\)"
    with pytest.raises(InputError, match=message):
        load_vectors(tmp_path / "v.pt")


def test_every_format_has_a_reader():
    assert set(VECTOR_FORMATS) == {
        ".npy", ".npz", ".parquet", ".csv", ".tsv", ".txt", ".vec", ".bin", ".kv", ".model",
        ".safetensors", ".pt", ".pth",
    }


# --------------------------------------------------------- bad vector values


def test_nan_names_row_id_and_column(tmp_path, vecs):
    vecs[1, 2] = np.nan
    np.savez(tmp_path / "v.npz", vectors=vecs, ids=np.array(WORDS))
    with pytest.raises(InputError, match=r"v\.npz, row 2 \(id 'dog'\), column 3: NaN; expected finite numbers"):
        load_vectors(tmp_path / "v.npz")


def test_inf_without_ids(tmp_path, vecs):
    vecs[3, 0] = -np.inf
    np.save(tmp_path / "v.npy", vecs)
    with pytest.raises(InputError, match=r"v\.npy, row 4, column 1: -inf"):
        load_vectors(tmp_path / "v.npy")


def test_nan_in_csv_text(tmp_path):
    (tmp_path / "v.csv").write_text("id,a,b\nx,1,2\ny,NaN,3\n")
    with pytest.raises(InputError, match=r"v\.csv, row 2 \(id 'y'\), column 1: NaN"):
        load_vectors(tmp_path / "v.csv")


def test_float32_overflow(tmp_path, vecs):
    big = vecs.astype(np.float64)
    big[2, 1] = 1e300
    np.save(tmp_path / "v.npy", big)
    with pytest.raises(InputError, match=r"v\.npy, row 3, column 2: 1e\+300 does not fit in float32"):
        load_vectors(tmp_path / "v.npy")


def test_zero_vector(tmp_path, vecs):
    vecs[1] = 0
    np.savez(tmp_path / "v.npz", vectors=vecs, ids=np.array(WORDS))
    with pytest.raises(InputError, match=r"v\.npz, row 2 \(id 'dog'\): zero vector"):
        load_vectors(tmp_path / "v.npz")


@pytest.mark.parametrize("shape", [(6,), (2, 3, 4)])
def test_not_2d(tmp_path, shape):
    np.save(tmp_path / "v.npy", np.ones(shape, np.float32))
    message = f"v.npy: expected a 2-D array (vectors x dimensions), found shape {shape}"
    with pytest.raises(InputError, match=re.escape(message)):
        load_vectors(tmp_path / "v.npy")


def test_empty_set(tmp_path):
    np.save(tmp_path / "v.npy", np.ones((0, 3), np.float32))
    with pytest.raises(InputError, match=r"v\.npy: no vectors \(0 rows\); expected at least 2"):
        load_vectors(tmp_path / "v.npy")


def test_empty_csv(tmp_path):
    (tmp_path / "v.csv").write_text("")
    with pytest.raises(InputError, match=r"v\.csv: no vectors \(0 rows\)"):
        load_vectors(tmp_path / "v.csv")


def test_header_only_csv(tmp_path):
    (tmp_path / "v.csv").write_text("id,a,b\n")
    with pytest.raises(InputError, match=r"v\.csv: no vectors \(0 rows\)"):
        load_vectors(tmp_path / "v.csv")


def test_one_row_set(tmp_path):
    np.save(tmp_path / "v.npy", np.ones((1, 3), np.float32))
    with pytest.raises(InputError, match=r"v\.npy: only 1 vector; expected at least 2"):
        load_vectors(tmp_path / "v.npy")


def test_non_numeric_dtype(tmp_path):
    np.save(tmp_path / "v.npy", np.ones((3, 2), dtype=complex))
    with pytest.raises(InputError, match=r"v\.npy: expected numbers, found values of type complex128"):
        load_vectors(tmp_path / "v.npy")


# ------------------------------------------------------------ ragged / text


def test_csv_short_row(tmp_path):
    (tmp_path / "v.csv").write_text("id,a,b,c\nx,1,2,3\ny,4,5,6\nz,7,8\n")
    with pytest.raises(InputError, match=r"v\.csv, row 3 \(line 4\): expected 3 values, found 2"):
        load_vectors(tmp_path / "v.csv")


def test_csv_long_row_headerless(tmp_path):
    (tmp_path / "v.csv").write_text("1,2,3\n4,5,6\n7,8,9,10\n")
    with pytest.raises(InputError, match=r"v\.csv, row 3 \(line 3\): expected 3 values, found 4"):
        load_vectors(tmp_path / "v.csv")


def test_csv_first_row_longer_than_header(tmp_path):
    (tmp_path / "v.csv").write_text("id,a,b\nx,1,2,3\ny,4,5,6\n")
    with pytest.raises(InputError, match=r"v\.csv, row 1 \(line 2\): expected 2 values, found 3"):
        load_vectors(tmp_path / "v.csv")


def test_tsv_non_numeric_value(tmp_path):
    (tmp_path / "v.tsv").write_text("id\ta\tb\nx\t1\t2\ny\t3\tabc\n")
    with pytest.raises(InputError, match=r"v\.tsv, row 2 \(line 3\), column 2 \('b'\): 'abc' is not a number"):
        load_vectors(tmp_path / "v.tsv")


def test_csv_empty_cell(tmp_path):
    (tmp_path / "v.csv").write_text("1,2,3\n4,,6\n")
    with pytest.raises(InputError, match=r"v\.csv, row 2 \(line 2\), column 2: empty value; expected a number"):
        load_vectors(tmp_path / "v.csv")


def test_parquet_non_numeric_column(tmp_path):
    frame = pd.DataFrame({"id": ["a", "b", "c"], "x": [1.0, 2.0, 3.0], "y": ["1", "two", "3"]})
    frame.to_parquet(tmp_path / "v.parquet")
    with pytest.raises(InputError, match=r"v\.parquet, row 2, column 'y': 'two' is not a number"):
        load_vectors(tmp_path / "v.parquet")


def test_parquet_ragged_list_column(tmp_path):
    pd.DataFrame({"e": [[1.0, 2.0], [3.0, 4.0], [5.0]]}).to_parquet(tmp_path / "v.parquet")
    with pytest.raises(InputError, match=r"v\.parquet, row 3, column 'e': expected 2 values, found 1 values"):
        load_vectors(tmp_path / "v.parquet")


def test_word2vec_ragged_row(tmp_path):
    (tmp_path / "v.txt").write_text("3 2\na 1 2\nb 3\nc 5 6\n")
    with pytest.raises(InputError, match=r"v\.txt, row 2 \(line 3\): expected 2 values, found 1"):
        load_vectors(tmp_path / "v.txt")


def test_word2vec_ragged_row_no_header(tmp_path):
    (tmp_path / "v.txt").write_text("a 1 2\nb 3 4\nc 5 6 7\n")
    with pytest.raises(InputError, match=r"v\.txt, row 3 \(line 3\): expected 2 values, found 3"):
        load_vectors(tmp_path / "v.txt")


def test_word2vec_header_count_mismatch(tmp_path):
    (tmp_path / "v.txt").write_text("4 2\na 1 2\nb 3 4\nc 5 6\n")
    with pytest.raises(InputError, match=r"v\.txt: the header announces 4 vectors but the file has 3"):
        load_vectors(tmp_path / "v.txt")


def test_word2vec_duplicate_word(tmp_path):
    (tmp_path / "v.txt").write_text("3 2\na 1 2\nb 3 4\na 5 6\n")
    with pytest.raises(InputError, match=r"v\.txt: duplicate id 'a' in rows 1 and 3"):
        load_vectors(tmp_path / "v.txt")


def test_word2vec_non_numeric(tmp_path):
    (tmp_path / "v.txt").write_text("a 1 2\nb 3 x\n")
    with pytest.raises(InputError, match=r"v\.txt, row 2 \(line 2\), column 2: 'x' is not a number"):
        load_vectors(tmp_path / "v.txt")


def test_word2vec_trailing_blank_line_and_fasttext_trailing_space(tmp_path):
    (tmp_path / "v.vec").write_text("2 2\na 1 2 \nb 3 4 \n\n")
    vectors, ids = load_vectors(tmp_path / "v.vec")
    np.testing.assert_array_equal(vectors, [[1, 2], [3, 4]])
    assert list(ids) == ["a", "b"]


def test_word2vec_binary_duplicate_word(tmp_path):
    rows = [(b"a", [1, 2]), (b"b", [3, 4]), (b"a", [5, 6])]
    data = b"3 2\n" + b"".join(w + b" " + np.array(v, np.float32).tobytes() + b"\n" for w, v in rows)
    (tmp_path / "v.bin").write_bytes(data)
    with pytest.raises(InputError, match=r"v\.bin: the header announces 3 vectors but 2 distinct words"):
        load_vectors(tmp_path / "v.bin")


# ------------------------------------------------------------ files and formats


def test_unknown_format(tmp_path):
    (tmp_path / "v.xyz").write_text("1 2")
    with pytest.raises(InputError, match=r"v\.xyz: unknown vectors format '\.xyz'; supported: \.bin, \.csv"):
        load_vectors(tmp_path / "v.xyz")
    with pytest.raises(InputError, match=r"v\.xyz: unknown format '\.xyz'; expected a manifest \(\.yaml, \.yml\)"):
        load_source(tmp_path / "v.xyz")


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match=f"file not found: {re.escape(str(tmp_path / 'nope.npy'))}"):
        load_vectors(tmp_path / "nope.npy")


def test_directory_instead_of_file(tmp_path):
    (tmp_path / "d.npy").mkdir()
    with pytest.raises(InputError, match=r"d\.npy is a directory; expected a file"):
        load_source(tmp_path / "d.npy")


def test_corrupt_file(tmp_path):
    (tmp_path / "v.npy").write_bytes(b"not numpy")
    with pytest.raises(InputError, match=r"v\.npy: could not read as a NumPy \.npy file"):
        load_vectors(tmp_path / "v.npy")


def test_name_for_errors(tmp_path):
    np.save(tmp_path / "v.npy", np.ones((1, 2)))
    with pytest.raises(InputError, match=r"^runs\[2\]: only 1 vector"):
        load_vectors(tmp_path / "v.npy", name_for_errors="runs[2]")


# ------------------------------------------------------------ bare source


def test_bare_source(tmp_path, vecs):
    np.save(tmp_path / "glove.6B.npy", vecs)
    es = load_source(tmp_path / "glove.6B.npy")
    assert es.name == "glove.6B" and es.source == str(tmp_path / "glove.6B.npy")
    assert (es.n, es.d) == (5, 4) and es.fields == {} and es.metadata is None
    assert list(es.ids) == ["0", "1", "2", "3", "4"] and es.ids.dtype == object
    assert es.has("vectors") and not es.has("ids") and not es.has("metadata")


# ------------------------------------------------------------ manifests


@pytest.fixture
def project(tmp_path, vecs) -> Path:
    """A manifest folder: data/vectors.npy, data/ids.txt, data/meta.csv, data/run2.npy."""
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "vectors.npy", vecs)
    np.save(data / "run2.npy", vecs * 2)
    (data / "ids.txt").write_text("\n".join(WORDS) + "\n\n")
    (data / "meta.csv").write_text("id,label,frequency\ncat,animal,10\nnull,NA,3\nNew York,place,\n")
    (data / "pairs.tsv").write_text("cat\tdog\n")
    return tmp_path


def test_manifest_relative_paths_and_fields(project, vecs):
    manifest = write_manifest(project, """
name: Demo
vectors: data/vectors.npy
ids: data/ids.txt
metadata: ./data/../data/meta.csv
runs: [data/run2.npy]
snapshots:
  - {name: early, vectors: data/run2.npy, timestamp: 2020-01-31}
  - {name: late, vectors: data/vectors.npy}
positive_pairs: data/pairs.tsv
""")
    es = load_source(manifest)
    assert es.name == "Demo" and es.source == str(manifest)
    np.testing.assert_array_equal(es.vectors, vecs)
    assert list(es.ids) == WORDS and es.has("ids")
    assert es.fields == {
        "runs": [str(project / "data" / "run2.npy")],
        "snapshots": [
            {"name": "early", "vectors": str(project / "data" / "run2.npy"), "timestamp": "2020-01-31"},
            {"name": "late", "vectors": str(project / "data" / "vectors.npy")},
        ],
        "positive_pairs": str(project / "data" / "pairs.tsv"),
    }
    meta = es.metadata
    assert list(meta.index) == WORDS and meta.index.name == "id"
    assert list(meta.columns) == ["label", "frequency"]
    assert meta.loc["cat", "label"] == "animal" and meta.loc["cat", "frequency"] == 10
    assert pd.isna(meta.loc["null", "label"])  # "NA" in a free column is missing ...
    assert meta.loc["null", "frequency"] == 3  # ... but the id "null" is an id
    assert meta.loc[["dog", "007"]].isna().all().all()  # ids absent from the table
    assert pd.isna(meta.loc["New York", "frequency"])


def test_manifest_name_defaults_to_stem(project):
    es = load_source(write_manifest(project, "vectors: data/vectors.npy\n", "my-set.yml"))
    assert es.name == "my-set" and es.fields == {}


def test_has(project):
    es = load_source(write_manifest(project, """
vectors: data/vectors.npy
ids: data/ids.txt
metadata: data/meta.csv
edges: data/pairs.tsv
"""))
    assert es.has("vectors") and es.has("ids") and es.has("metadata")
    assert es.has("metadata.label") and es.has("metadata.frequency")
    assert not es.has("metadata.group")
    assert es.has("edges") and not es.has("runs") and not es.has("analogies")
    with pytest.raises(ValueError, match="unknown requirement 'edgse'"):
        es.has("edgse")


def test_has_metadata_column_all_missing(project):
    (project / "data" / "meta.csv").write_text("id,group\ncat,\n")
    es = load_source(write_manifest(project, "vectors: data/vectors.npy\nids: data/ids.txt\nmetadata: data/meta.csv\n"))
    assert es.has("metadata") and not es.has("metadata.group")


def test_ids_column_of_vectors_table(project, vecs):
    frame = pd.DataFrame(vecs, columns=list("abcd"))
    frame.insert(2, "word_id", [5, 6, 7, 8, 9])  # numeric, not first: only found when named
    frame.to_csv(project / "data" / "v.csv", index=False)
    es = load_source(write_manifest(project, "vectors: data/v.csv\nids: word_id\n"))
    assert list(es.ids) == ["5", "6", "7", "8", "9"]
    np.testing.assert_array_equal(es.vectors, vecs)


def test_ids_column_of_metadata_table(project, vecs):
    (project / "data" / "m.csv").write_text("word,pos\n" + "".join(f"{w},n\n" for w in WORDS))
    es = load_source(write_manifest(project, "vectors: data/vectors.npy\nids: word\nmetadata: data/m.csv\n"))
    assert list(es.ids) == WORDS
    assert list(es.metadata.index) == WORDS and list(es.metadata.columns) == ["pos"]


def test_ids_neither_file_nor_column(project):
    manifest = write_manifest(project, "vectors: data/vectors.npy\nids: data/idz.txt\n")
    message = (r"set\.yaml, field 'ids': 'data/idz\.txt' is neither an existing file "
               r"\(.*data/idz\.txt: file not found\) nor a column of vectors\.npy")
    with pytest.raises(InputError, match=message):
        load_source(manifest)


def test_ids_count_mismatch_names_both_files(project):
    (project / "data" / "ids.txt").write_text("a\nb\nc\n")
    manifest = write_manifest(project, "vectors: data/vectors.npy\nids: data/ids.txt\n")
    with pytest.raises(InputError, match=r"ids\.txt has 3 ids but vectors\.npy has 5 vectors"):
        load_source(manifest)


def test_ids_file_blank_line_inside(project):
    (project / "data" / "ids.txt").write_text("a\n\nb\n")
    with pytest.raises(InputError, match=r"ids\.txt, line 2: empty id"):
        load_source(write_manifest(project, "vectors: data/vectors.npy\nids: data/ids.txt\n"))


def test_duplicate_ids(project):
    (project / "data" / "ids.txt").write_text("a\nb\nc\nb\ne\n")
    with pytest.raises(InputError, match=r"ids\.txt: duplicate id 'b' in rows 2 and 4"):
        load_source(write_manifest(project, "vectors: data/vectors.npy\nids: data/ids.txt\n"))


def test_duplicate_ids_in_csv(tmp_path):
    (tmp_path / "v.csv").write_text("x,1,2\ny,3,4\nx,5,6\n")
    with pytest.raises(InputError, match=r"v\.csv: duplicate id 'x' in rows 1 and 3"):
        load_vectors(tmp_path / "v.csv")


def test_nan_error_uses_ids_from_ids_file(project, vecs):
    vecs[4, 1] = np.nan
    np.save(project / "data" / "vectors.npy", vecs)
    with pytest.raises(InputError, match=r"vectors\.npy, row 5 \(id 'New York'\), column 2: NaN"):
        load_source(write_manifest(project, "vectors: data/vectors.npy\nids: data/ids.txt\n"))


def test_metadata_without_id_column(project):
    (project / "data" / "meta.csv").write_text("word,label\ncat,a\n")
    with pytest.raises(InputError, match=r"meta\.csv: no 'id' column \(columns: word, label\)"):
        load_source(write_manifest(project, "vectors: data/vectors.npy\nids: data/ids.txt\nmetadata: data/meta.csv\n"))


def test_metadata_unknown_ids(project):
    (project / "data" / "meta.csv").write_text("id,label\ncat,a\nbird,b\nfish,c\n")
    with pytest.raises(InputError, match=r"meta\.csv: 2 of 3 ids match no vector id \(e\.g\. 'bird', 'fish'\)"):
        load_source(write_manifest(project, "vectors: data/vectors.npy\nids: data/ids.txt\nmetadata: data/meta.csv\n"))


def test_metadata_duplicate_ids(project):
    (project / "data" / "meta.csv").write_text("id,label\ncat,a\ncat,b\n")
    with pytest.raises(InputError, match=r"meta\.csv: duplicate id 'cat' in rows 1 and 2"):
        load_source(write_manifest(project, "vectors: data/vectors.npy\nids: data/ids.txt\nmetadata: data/meta.csv\n"))


def test_metadata_parquet_with_default_ids(project):
    pd.DataFrame({"id": ["0", "3"], "label": ["x", "y"]}).to_parquet(project / "data" / "m.parquet")
    es = load_source(write_manifest(project, "vectors: data/vectors.npy\nmetadata: data/m.parquet\n"))
    assert not es.has("ids") and list(es.metadata["label"].isna()) == [False, True, True, False, True]


def test_unknown_field(project):
    message = r"set\.yaml: unknown field 'vectorz'; known fields: name, vectors, ids, metadata, runs"
    with pytest.raises(InputError, match=message):
        load_source(write_manifest(project, "vectorz: data/vectors.npy\n"))


def test_missing_required_field(project):
    with pytest.raises(InputError, match=r"set\.yaml: missing required field 'vectors'"):
        load_source(write_manifest(project, "name: x\n"))


SNAP = "vectors: data/vectors.npy\nsnapshots: "


@pytest.mark.parametrize("text, message", [
    ("vectors: data/vectors.npy\nname: [a, b]\n", r"field 'name': expected a non-empty string, found a list"),
    ("vectors: 42\n", r"field 'vectors': expected a file path \(string\), found the number 42"),
    ("vectors: data/vectors.npy\nruns: data/run2.npy\n",
     r"field 'runs': expected a non-empty list of file paths, found the string"),
    (SNAP + "[data/run2.npy]\n",
     r"field 'snapshots', item 1: expected a mapping of keys \(name, vectors, timestamp\)"),
    (SNAP + "[{name: a, vectors: data/run2.npy, when: 3}]\n",
     r"field 'snapshots', item 1: unknown key 'when'; known keys: name, vectors, timestamp"),
    (SNAP + "[{vectors: data/run2.npy}]\n", r"field 'snapshots', item 1: missing required key 'name'"),
    (SNAP + "[{name: a, vectors: data/run2.npy, timestamp: [1]}]\n",
     r"field 'snapshots', item 1, key 'timestamp': expected a timestamp \(date, number or string\), found a list"),
])
def test_wrong_types(project, text, message):
    with pytest.raises(InputError, match=r"set\.yaml, " + message):
        load_source(write_manifest(project, text))


def test_manifest_missing_file_in_field(project):
    manifest = write_manifest(project, "vectors: data/vectors.npy\nruns: [data/run2.npy, data/run3.npy]\n")
    expected = f"set.yaml, field 'runs', item 2: file not found: {project / 'data' / 'run3.npy'}"
    with pytest.raises(InputError, match=re.escape(expected)):
        load_source(manifest)


def test_manifest_directory_in_field(project):
    with pytest.raises(InputError, match=r"set\.yaml, field 'vectors': .*data is a directory; expected a file"):
        load_source(write_manifest(project, "vectors: data\n"))


def test_malformed_yaml(project):
    with pytest.raises(InputError, match=r"set\.yaml, line 3: invalid YAML"):
        load_source(write_manifest(project, "name: x\nvectors: data/vectors.npy\n  bad: indent\n"))


@pytest.mark.parametrize("text, found", [("- a\n- b\n", "a list"), ("", "nothing"), ("just text\n", "the string")])
def test_manifest_not_a_mapping(project, text, found):
    message = rf"set\.yaml: expected a mapping of fields \(name, vectors, .*\), found {found}"
    with pytest.raises(InputError, match=message):
        load_source(write_manifest(project, text))


def test_null_optional_field_is_absent(project):
    spec = read_manifest(write_manifest(project, "vectors: data/vectors.npy\nmetadata:\n"))
    assert "metadata" not in spec


def test_registry_is_data():
    assert set(_CHECKERS) == set(FIELD_KINDS)
    for spec in MANIFEST_FIELDS.values():
        assert isinstance(spec, ManifestField) and spec.description
    assert [k for k, s in MANIFEST_FIELDS.items() if s.required] == []  # vectors, or model + texts: _check_sources
    with pytest.raises(ValueError, match="unknown manifest field kind"):
        ManifestField("pathz", "typo")


# ------------------------------------------------------------ prepared cache


def assert_same_set(a: EmbeddingSet, b: EmbeddingSet) -> None:
    assert (a.name, a.source, a.fields, a.ids_given) == (b.name, b.source, b.fields, b.ids_given)
    np.testing.assert_array_equal(a.vectors, b.vectors)
    assert b.vectors.dtype == np.float32 and b.vectors.flags.c_contiguous
    assert list(a.ids) == list(b.ids) and b.ids.dtype == object
    assert all(type(i) is str for i in b.ids)
    if a.metadata is None:
        assert b.metadata is None
    else:
        pd.testing.assert_frame_equal(a.metadata, b.metadata)


@pytest.mark.parametrize("mmap", [True, False])
def test_prepared_round_trip(project, tmp_path, mmap):
    es = load_source(write_manifest(project, """
vectors: data/vectors.npy
ids: data/ids.txt
metadata: data/meta.csv
snapshots: [{name: s, vectors: data/run2.npy, timestamp: 3.5}]
"""))
    save_prepared(es, tmp_path / "cache")
    assert (tmp_path / "cache" / "ids.txt").is_file()
    back = load_prepared(tmp_path / "cache", mmap=mmap)
    assert isinstance(back.vectors, np.memmap) == mmap
    assert_same_set(es, back)


def test_prepared_odd_ids_and_overwrite(tmp_path, vecs):
    ids = np.array([" lead", "trail ", "two\nlines", "cr\r", "plain"], dtype=object)
    es = EmbeddingSet("odd", vecs, ids, None, "/x/v.npy", {}, True)
    save_prepared(es, tmp_path / "cache")
    assert (tmp_path / "cache" / "ids.npy").is_file() and not (tmp_path / "cache" / "ids.txt").exists()
    back = load_prepared(tmp_path / "cache")
    assert_same_set(es, back)
    save_prepared(back, tmp_path / "cache")  # re-save over the memory-mapped source
    assert_same_set(es, load_prepared(tmp_path / "cache", mmap=False))
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["ids.npy", "info.json", "vectors.npy"]
    assert json.loads((tmp_path / "cache" / "info.json").read_text())["name"] == "odd"


def test_load_prepared_missing_folder(tmp_path):
    with pytest.raises(InputError, match="not a prepared embedding set: file not found"):
        load_prepared(tmp_path / "nothing")


def test_load_matched_by_ids_reports_missing_and_extra(tmp_path):
    import pandas as pd

    from embeval_report.io import load_matched, load_source

    np.save(tmp_path / "ref.npy", np.arange(1, 13, dtype=np.float32).reshape(4, 3))
    (tmp_path / "ids.txt").write_text("a\nb\nc\nd\n")
    (tmp_path / "m.yaml").write_text("vectors: ref.npy\nids: ids.txt\n")
    ref = load_source(tmp_path / "m.yaml")
    pd.DataFrame({"id": ["d", "x", "b"], "v1": [1.0, 2, 3], "v2": [4.0, 5, 6]}).to_csv(tmp_path / "run.csv", index=False)
    m = load_matched(tmp_path / "run.csv", ref)
    assert m.index.tolist() == [1, 3] and m.vectors[:, 0].tolist() == [3.0, 1.0]
    assert m.missing.tolist() == ["a", "c"] and m.extra.tolist() == ["x"]
    np.save(tmp_path / "short.npy", np.ones((3, 3), dtype=np.float32))
    with pytest.raises(InputError, match="short.npy: 3 rows but the reference set has 4"):
        load_matched(tmp_path / "short.npy", ref)
    same = load_matched(tmp_path / "ref.npy", ref)
    assert same.index.tolist() == [0, 1, 2, 3] and len(same.missing) == 0
