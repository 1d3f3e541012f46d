"""Hostile input (issue 40, the input side): no code runs from a file, no path of a manifest leads outside its
folder unasked, and nothing a file declares makes the run take unbounded memory or time. Each case is one line on
stderr and exit status 2 through the real command, and leaves nothing behind (the marker files stay absent)."""
import pickle
import re
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from embeval_report.cli import main
from embeval_report.context import ComputeContext
from embeval_report.errors import InputError
from embeval_report.io import load_source, load_vectors
from embeval_report.io.policy import input_policy

N, D = 30, 4


def vectors_set(folder: Path, extra: str = "") -> Path:
    """vectors.npy and ids.txt in ``folder`` and a manifest naming them, plus ``extra`` manifest lines."""
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "vectors.npy", np.random.default_rng(0).standard_normal((N, D)).astype(np.float32))
    (folder / "ids.txt").write_text("".join(f"e{i}\n" for i in range(N)))
    (folder / "m.yaml").write_text("vectors: vectors.npy\nids: ids.txt\n" + extra)
    return folder / "m.yaml"


def one_line_exit_2(capsys, argv: list[str]) -> str:
    """Run the command: exit status 2 and exactly one line on stderr, which is returned."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("embeval-report: error: "), err
    return err[0]


# ------------------------------------------------------------------ pickles (case 1)


def _unicode(text: str) -> bytes:
    data = text.encode()
    return b"\x8c" + bytes([len(data)]) + data  # SHORT_BINUNICODE


def _payload(marker: Path, module: str, name: str, *args: str) -> bytes:
    """A protocol-4 pickle that starts like a gensim KeyedVectors (so that its header passes) and then calls
    ``module``/``name`` (a dotted name) with ``(str(marker), *args)``: the issue's 199-byte file, made to create a
    marker file instead of running a shell."""
    call = _unicode(module) + _unicode(name) + b"\x93"  # STACK_GLOBAL
    values = b"".join(_unicode(a) for a in (str(marker), *args))
    tuple_op = {1: b"\x85", 2: b"\x86", 3: b"\x87"}[1 + len(args)]
    return (b"\x80\x04"  # PROTO 4
            + _unicode("gensim.models.keyedvectors") + _unicode("KeyedVectors") + b"\x93" + b")\x81"  # NEWOBJ
            + b"}" + _unicode("x") + call + values + tuple_op + b"R"  # {"x": module.name(marker, ...)}
            + b"sb.")  # SETITEM, BUILD, STOP


PAYLOADS = {
    # gensim.models.word2vec imports logging: a dotted name reaches logging.FileHandler, which creates its file
    "gensim-dotted": ("gensim.models.word2vec", "logging.FileHandler"),
    # any type under numpy.random was allowed: a dotted name reaches io.FileIO through numpy's own imports
    "numpy-random": ("numpy.random", "_bounded_integers.np.f2py.subprocess.io.FileIO", "w"),
}


@pytest.mark.parametrize("case", sorted(PAYLOADS))
def test_a_pickle_that_calls_code_is_refused_before_it_runs(tmp_path, capsys, case):
    module, name, *args = PAYLOADS[case]
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.kv"
    evil.write_bytes(_payload(marker, module, name, *args))
    assert len(evil.read_bytes()) < 400
    live = pickle.loads(_payload(tmp_path / "proof", module, name, *args))  # the standard unpickler runs it
    live.x.close()
    assert (tmp_path / "proof").exists()
    # without the opt-in: never read, and the line says how to opt in and that word2vec files need none
    line = one_line_exit_2(capsys, ["chapters", str(evil)])
    assert "evil.kv: refused to read a gensim pickle" in line and "--trust-pickles" in line
    assert "word2vec text (.txt/.vec) and binary (.bin) files need no opt-in" in line
    # with it: the allow-list refuses the global, under chapters and under run, before anything is called
    refused = f"evil.kv: refused to load: the pickle references {module}.{name}, which is not part of a gensim model"
    assert refused in one_line_exit_2(capsys, ["chapters", str(evil), "--trust-pickles"])
    out = tmp_path / "report"
    assert refused in one_line_exit_2(capsys, ["run", str(evil), "--trust-pickles", "--out", str(out),
                                               "--chapters", "isotropy", "--formats", "html"])
    assert not marker.exists() and not out.exists()


def test_the_allow_list_is_exact(tmp_path):
    from embeval_report.io.safe_pickle import AllowListUnpickler

    def find(module, name):
        return AllowListUnpickler(_bytes_io(b""), "x.kv").find_class(module, name)

    from gensim.models import KeyedVectors

    assert find("gensim.models.keyedvectors", "KeyedVectors") is KeyedVectors
    assert find("gensim.models.keyedvectors", "Word2VecKeyedVectors") is KeyedVectors  # gensim 3's name for it
    assert find("numpy.core.multiarray", "_reconstruct") is find("numpy._core.multiarray", "_reconstruct")
    for module, name in [("gensim.models", "keyedvectors.KeyedVectors"),  # a dotted name, even to a gensim class
                         ("gensim.models.word2vec", "KeyedVectors"),      # a re-export not on the list
                         ("gensim.models.word2vec", "np"), ("numpy.random", "RandomState"),
                         ("numpy.random._pickle", "__generator_ctor"), ("numpy", "memmap"), ("os", "system"),
                         ("builtins", "eval"), ("builtins", "getattr"), ("numpy", "float32.__new__")]:
        with pytest.raises(InputError, match=rf"^x\.kv: refused to load: the pickle references "):
            find(module, name)
    # a model's random state is read, a Generator (other constructors, another bit generator) is not
    state = np.random.RandomState(3)
    loaded = AllowListUnpickler(_bytes_io(pickle.dumps(state, protocol=4)), "x.kv").load()
    assert loaded.randint(1000) == np.random.RandomState(3).randint(1000)
    with pytest.raises(InputError, match="__generator_ctor"):
        AllowListUnpickler(_bytes_io(pickle.dumps(np.random.default_rng(0))), "x.kv").load()


def _bytes_io(data: bytes):
    import io

    return io.BytesIO(data)


def test_real_gensim_files_of_every_protocol_still_load(tmp_path):
    """What gensim writes (the models, the keyed vectors, their random state; protocols 2 to 5) is exactly what the
    allow-list resolves."""
    from gensim.models import Doc2Vec, FastText, Word2Vec
    from gensim.models.doc2vec import TaggedDocument

    from embeval_report.io.checkpoints import read_gensim_model

    sentences = [["the", "cat", "sat"], ["a", "dog", "ran"], ["the", "dog", "sat", "down"]]
    train = dict(vector_size=4, min_count=1, epochs=1, workers=1, seed=0)
    models = {"w2v": Word2Vec(sentences, **train), "ft": FastText(sentences, bucket=20, **train),
              "d2v": Doc2Vec([TaggedDocument(s, [i]) for i, s in enumerate(sentences)], **train)}
    models["kv"] = models["w2v"].wv
    for name, model in models.items():
        for protocol in (2, 3, 4, 5):
            path = tmp_path / f"{name}-{protocol}.model"
            model.save(str(path), pickle_protocol=protocol)
            vectors, ids = read_gensim_model(path, trust=True)
            kv = model.dv if name == "d2v" else getattr(model, "wv", model)
            np.testing.assert_array_equal(vectors, kv.vectors)


def test_companion_file_names_cannot_build_a_path(tmp_path):
    from gensim.models import KeyedVectors

    from embeval_report.io.checkpoints import read_gensim_model

    kv = KeyedVectors(4)
    kv.add_vectors(["a", "b"], np.ones((2, 4), np.float32))
    path = tmp_path / "kv.kv"
    kv.save(str(path), sep_limit=0)  # vectors in a companion kv.kv.vectors.npy
    read_gensim_model(path, trust=True)
    data = path.read_bytes().replace(b"\x8c\x07vectors", b"\x8c\x07../etc/")  # same length: the pickle stays valid
    assert data != path.read_bytes()
    path.write_bytes(data)
    with pytest.raises(InputError, match="refused to load: the model names companion files by something other"):
        read_gensim_model(path, trust=True)


def test_the_model_loader_never_trusts_a_folders_code(tmp_path, monkeypatch):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from importlib.metadata import version

    from embeval_report.io.model import ModelSpec, load_model

    assert int(version("sentence-transformers").split(".")[0]) >= 6  # older versions imported a folder's code
    folder = tmp_path / "model"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "", "type": "evil_module.Evil"}]')
    (folder / "evil_module.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Evil:\n    pass\n")
    monkeypatch.syspath_prepend(str(folder))  # even importable, it is not imported
    with pytest.raises(InputError, match=r"^model 'm': could not load .* as a sentence-transformers model"):
        load_model(ModelSpec(name="m", path=folder), device="cpu")
    assert not marker.exists()
    seen = {}

    class Recording:
        def __init__(self, *args, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", Recording)
    load_model(ModelSpec(name="m", path=folder), device="cpu")
    assert seen["trust_remote_code"] is False and seen["local_files_only"] is True


# ------------------------------------------------------------------ manifest paths (case 7)


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file outside the manifest's folder: three secret lines."""
    path = tmp_path / "secret.txt"
    path.write_text("".join(f"token-{i}\n" for i in range(3)))
    return path


OUTSIDE = {  # how a manifest names a file outside its folder
    "parent": lambda secret, home: "../secret.txt",
    "absolute": lambda secret, home: str(secret),
    "home": lambda secret, home: "~/secret.txt",
}


@pytest.mark.parametrize("how", sorted(OUTSIDE))
def test_a_path_outside_the_manifests_folder_is_refused(tmp_path, secret, capsys, monkeypatch, how):
    monkeypatch.setenv("HOME", str(tmp_path))
    value = OUTSIDE[how](secret, tmp_path)
    manifest = vectors_set(tmp_path / "set").read_text()
    (tmp_path / "set" / "m.yaml").write_text(manifest.replace("ids: ids.txt\n", f"ids: {value}\n"))
    line = one_line_exit_2(capsys, ["chapters", str(tmp_path / "set" / "m.yaml")])
    assert line == (f"embeval-report: error: m.yaml, field 'ids': the path {value!r} leads outside the manifest's "
                    "folder; a manifest's files must lie inside it: allow it with --allow-outside DIR (Python: "
                    "allow_outside=[DIR]) or name a folder inside the working directory as the manifest's data_root")
    secret.unlink()  # the line is the same whether the file exists or not: it says nothing about it
    assert one_line_exit_2(capsys, ["chapters", str(tmp_path / "set" / "m.yaml")]) == line


def test_a_symbolic_link_out_of_the_folder_is_refused(tmp_path, secret, capsys):
    manifest = vectors_set(tmp_path / "set", "vocabularies: [{name: v, ids: link.txt}]\n")
    (tmp_path / "set" / "link.txt").symlink_to(secret)
    line = one_line_exit_2(capsys, ["chapters", str(manifest)])
    assert ("m.yaml, field 'vocabularies', item 1, key 'ids': the path 'link.txt' leads outside the manifest's "
            "folder through a symbolic link") in line
    assert main(["chapters", str(manifest), "--allow-outside", str(secret)]) == 0  # a single file may be allowed
    capsys.readouterr()


def test_allow_outside_and_data_root_widen_the_folder(tmp_path, monkeypatch, capsys):
    data = tmp_path / "project" / "data"
    vectors_set(data)
    configs = tmp_path / "project" / "configs"
    configs.mkdir()
    (configs / "m.yaml").write_text("vectors: ../data/vectors.npy\nids: ../data/ids.txt\n")
    assert "leads outside" in one_line_exit_2(capsys, ["chapters", str(configs / "m.yaml")])
    assert main(["chapters", str(configs / "m.yaml"), "--allow-outside", str(data)]) == 0
    with input_policy(allow_outside=[data]):  # the Python API's allow_outside= is this policy
        assert load_source(configs / "m.yaml").n == N
    (configs / "m.yaml").write_text("data_root: ..\nvectors: ../data/vectors.npy\nids: ../data/ids.txt\n")
    monkeypatch.chdir(tmp_path / "project")  # data_root may name a folder inside the working directory
    assert main(["chapters", str(configs / "m.yaml")]) == 0
    monkeypatch.chdir(configs)  # ... and no other, unless allowed
    line = one_line_exit_2(capsys, ["chapters", str(configs / "m.yaml")])
    assert "m.yaml, field 'data_root': '..' lies outside the working directory and the manifest's folder" in line
    assert main(["chapters", str(configs / "m.yaml"), "--allow-outside", str(tmp_path / "project")]) == 0
    (configs / "m.yaml").write_text("data_root: /\nvectors: /etc/passwd\n")
    assert "field 'data_root': '/' lies outside" in one_line_exit_2(capsys, ["chapters", str(configs / "m.yaml")])
    capsys.readouterr()


def test_a_vectors_file_on_the_command_line_is_not_confined(tmp_path, monkeypatch):
    vectors_set(tmp_path / "elsewhere")
    monkeypatch.chdir(tmp_path / "elsewhere")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert load_source(tmp_path / "elsewhere" / "vectors.npy").n == N


# ------------------------------------------------------------------ limits (cases 9, 11, 12)


def _alias_bomb(levels: int = 9) -> str:
    """The issue's 394-byte file: nine levels of nine aliases, 9**9 words once expanded."""
    names = "abcdefghi"[:levels]
    lines = [f"a: &a [{','.join(['lol'] * 9)}]"]
    lines += [f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]" for p, c in zip(names, names[1:])]
    lines += ["tests:", "- name: t", f"  targets: {{x: *{names[-1]}, y: [u, v]}}", "  attributes: {a: [p], b: [r]}"]
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_one_short_line_in_bounded_time_and_memory(tmp_path, capsys):
    manifest = vectors_set(tmp_path, "association_tests: tests.yaml\n")
    (tmp_path / "tests.yaml").write_text(_alias_bomb())
    assert len((tmp_path / "tests.yaml").read_bytes()) < 410  # the was 394 bytes
    from embeval_report.io.association_tests import read_association_tests

    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(InputError) as caught:
        read_association_tests(tmp_path / "tests.yaml")
    seconds, (_, peak) = time.perf_counter() - start, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    message = str(caught.value)
    assert message.startswith("tests.yaml, line ") and "aliases (&anchor / *anchor) expand this document" in message
    assert len(message) < 300 and seconds < 5 and peak < 20 * 2**20, (len(message), seconds, peak)
    # the manifest itself is read by the same loader; through the command: one line, exit 2
    (tmp_path / "bomb.yaml").write_text(_alias_bomb().replace("tests:", "vectors: vectors.npy\nruns:")
                                        .split("\n- name")[0] + " [*i]\n")
    assert "bomb.yaml, line " in one_line_exit_2(capsys, ["chapters", str(tmp_path / "bomb.yaml")])
    line = one_line_exit_2(capsys, ["run", str(manifest), "--out", str(tmp_path / "r"), "--chapters", "isotropy"])
    assert "tests.yaml (association_tests), line 6: aliases" in line and len(line) < 300
    # aliases within reason are still YAML
    (tmp_path / "ok.yaml").write_text("vectors: &v vectors.npy\nids: ids.txt\nruns: [*v, *v]\n")
    assert load_source(tmp_path / "ok.yaml").fields["runs"] == [str(tmp_path / "vectors.npy")] * 2


def _parquet_bomb(path: Path, rows: int) -> None:
    """A Parquet file of ``rows`` float32 zeros: dictionary-encoded and compressed, a few kB that declare almost
    nothing as their "uncompressed size" and expand to 4 bytes a row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": pa.array(["a", "b"] * (rows // 2)), "x": pa.array(np.zeros(rows, np.float32))}),
                   path, compression="zstd")


def test_a_parquet_bomb_is_checked_against_the_memory_budget(tmp_path, capsys):
    from embeval_report.io.files import read_table
    from embeval_report.io.limits import parquet_declared_bytes

    _parquet_bomb(tmp_path / "bomb.parquet", 6_000_000)
    size = (tmp_path / "bomb.parquet").stat().st_size
    declared = parquet_declared_bytes(tmp_path / "bomb.parquet")
    assert size < 200_000 and declared >= 6_000_000 * (4 + 8), (size, declared)
    with ComputeContext(memory_budget="16MiB"):
        for read in (load_vectors, lambda p: read_table(p, p.name)):
            with pytest.raises(InputError, match=r"^bomb\.parquet: the Parquet file declares [\d.]+ MiB once "
                                                 r"decompressed, more than the memory budget of 16 MiB"):
                read(tmp_path / "bomb.parquet")
    manifest = vectors_set(tmp_path, "metadata: bomb.parquet\n")
    line = one_line_exit_2(capsys, ["run", str(manifest), "--out", str(tmp_path / "r"), "--chapters", "isotropy",
                                    "--memory-budget", "16MiB"])
    assert "bomb.parquet: the Parquet file declares" in line and "--memory-budget" in line
    assert not (tmp_path / "r").exists()
    _parquet_bomb(tmp_path / "small.parquet", 1000)  # an ordinary file is read
    with ComputeContext(memory_budget="16MiB"):
        assert len(read_table(tmp_path / "small.parquet", "small.parquet")) == 1000


def test_a_compressed_npz_member_is_checked_against_the_memory_budget(tmp_path):
    np.savez_compressed(tmp_path / "v.npz", vectors=np.zeros((5_000_000, 1), np.float32))
    with ComputeContext(memory_budget="16MiB"), pytest.raises(
            InputError, match=r"^v\.npz: array 'vectors' declares 19.1 MiB once decompressed, more than the memory "
                              r"budget of 16 MiB"):
        load_vectors(tmp_path / "v.npz")


@pytest.mark.parametrize("value, row", [(1e38, 3), (1e19, 3), (5e18, None)])
def test_values_whose_squares_overflow_float32_are_refused(tmp_path, value, row):
    from embeval_report.io.matrix import MAX_ROW_NORM

    assert MAX_ROW_NORM == pytest.approx(np.sqrt(np.finfo(np.float32).max) / 2)  # 9.2e18
    X = np.random.default_rng(0).standard_normal((40, D)).astype(np.float32)
    X[2] = value / 2  # d = 4 values of value / 2: a norm of value
    np.save(tmp_path / "v.npy", X)
    if row is None:
        assert load_vectors(tmp_path / "v.npy")[0].shape == X.shape
        return
    with pytest.raises(InputError, match=rf"^v\.npy, row {row}: its length \(L2 norm\) {re.escape(f'{value:.3g}')} "
                                         r"is beyond "
                                         r"9\.22e\+18, where the float32 products and distances of rows overflow"):
        load_vectors(tmp_path / "v.npy")
    big = np.random.default_rng(1).standard_normal((20_000, D)).astype(np.float32)
    big[15_000] = value / 2
    np.save(tmp_path / "big.npy", big)  # read in blocks (out of core) under a small budget: the same line
    with ComputeContext(memory_budget="16MiB"), pytest.raises(InputError, match=r"^big\.npy, row 15001: its length"):
        load_vectors(tmp_path / "big.npy")


def test_deep_nesting_is_one_line(tmp_path):
    """JSON Lines and YAML nested past the parsers' depth: one line naming the file and the line, no traceback."""
    from embeval_report.io.limits import load_yaml
    from embeval_report.io.monitor_history import read_history
    from embeval_report.io.texts import read_texts
    from embeval_report.io.training_log import read_training_log

    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "log.jsonl").write_text('{"step": 1, "loss": ' + deep + "}\n")
    (tmp_path / "texts.jsonl").write_text('{"id": "a", "text": ' + deep + "}\n")
    (tmp_path / "history.jsonl").write_text(deep + "\n")
    for read, name in ((read_training_log, "log.jsonl"), (read_texts, "texts.jsonl"), (read_history, "history.jsonl")):
        with pytest.raises(InputError, match=rf"{re.escape(name)}, line 1: (invalid|not valid) JSON"):
            read(tmp_path / name)
    with pytest.raises(InputError, match=r"^m\.yaml, line 1: invalid YAML: exceeded maximum nesting depth"):
        load_yaml(deep, "m.yaml")
