"""Issue 40's cases as docs/security.md states them: every regression test its table names exists, and the norm
bound of case 12 is enough for the chapters that broke (isotropy, collapse) just below it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SECURITY = ROOT / "docs" / "security.md"


def _table_rows() -> dict[int, str]:
    """The rows of the issue-40 table: {case number: row}."""
    text = SECURITY.read_text(encoding="utf-8").split("## The cases of issue 40", 1)[1]
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^\| (\d+) \|.*$", text, re.M)}


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_case_has_a_row_naming_tests_that_exist():
    rows = _table_rows()
    assert sorted(rows) == list(range(1, 16)), sorted(rows)
    for case, row in rows.items():
        named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row)
        assert named, f"case {case}: no regression test named"
        for file, test in named:
            assert (ROOT / file).is_file(), f"case {case}: {file} does not exist"
            assert test in _tests_in(ROOT / file), f"case {case}: no {test} in {file}"


def test_vectors_just_under_the_norm_bound_measure_as_at_unit_scale(tmp_path):
    """Case 12: a set whose every row is near the largest accepted length (the longest 0.98 of the bound) is read,
    and isotropy and collapse, which failed or flipped on 1e38 values, give the numbers of the same set at unit
    scale (their moments and distances do not overflow below the bound)."""
    from embeval_report import load_vectors, measure_isotropy
    from embeval_report.io.matrix import MAX_ROW_NORM
    from embeval_report.metrics.collapse import measure_collapse

    rng = np.random.default_rng(0)
    unit = rng.standard_normal((300, 8))
    unit[:150] += 2.0
    unit /= np.linalg.norm(unit, axis=1).max()
    np.save(tmp_path / "big.npy", (unit * (0.98 * MAX_ROW_NORM)).astype(np.float32))
    big = load_vectors(tmp_path / "big.npy")[0]
    small = (big / (0.98 * MAX_ROW_NORM)).astype(np.float32)
    for measure in (measure_isotropy, measure_collapse):
        at_bound, at_unit = measure(big).metrics, measure(small).metrics
        assert at_bound.keys() == at_unit.keys()
        for name, metric in at_unit.items():
            if metric.value is None:
                assert at_bound[name].value is None, name
                continue
            assert np.isfinite(at_bound[name].value), (measure.__name__, name)
            assert at_bound[name].value == pytest.approx(metric.value, rel=1e-5, abs=1e-9), (measure.__name__, name)
            assert at_bound[name].verdict == metric.verdict, (measure.__name__, name)


# ------------------------------------------------------------------ the open cases closed after the table


def _vectors_manifest(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "v.npy", np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32))
    (folder / "m.yaml").write_text("vectors: v.npy\n" + extra)
    return folder / "m.yaml"


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("embeval-report: error: "), err
    return lines[0]


@pytest.fixture
def no_mlflow_credentials(tmp_path, monkeypatch):
    """An environment without MLflow credentials or tracking URI (HOME too: no ~/.mlflow/credentials)."""
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN",
                 "MLFLOW_TRACKING_AUTH", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("uri", ["../mlruns", "file:../mlruns", "sqlite:///../mlflow.db", "../mlflow.db",
                                 "{outside}/mlruns", "file://{outside}/mlruns", "sqlite:///{outside}/mlflow.db",
                                 "~/mlruns"])
def test_a_manifests_tracking_store_stays_in_its_folder(uri, tmp_path, capsys, no_mlflow_credentials):
    """A folder, file: or SQLite path in a manifest's mlflow: tracking_uri goes through the manifest's paths: one
    line naming the field, exit 2, before MLflow makes anything (it made a store outside both folders before)."""
    from embeval_report.cli import main

    outside = tmp_path / "elsewhere"
    manifest = _vectors_manifest(tmp_path / "in", f"mlflow: {{tracking_uri: '{uri.format(outside=outside)}'}}\n")
    assert main(["compare", str(manifest), str(manifest), "--out", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "m.yaml, field 'mlflow', key 'tracking_uri'" in line and "leads outside the manifest's folder" in line
    assert sorted(p.name for p in manifest.parent.iterdir()) == ["m.yaml", "v.npy"]
    assert not outside.exists() and not (tmp_path / "out").exists() and not (tmp_path / "home" / "mlruns").exists()
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_manifests_tracking_store_inside_its_folder_or_an_allowed_one(tmp_path, no_mlflow_credentials):
    """Inside the folder a store is the manifest's relative path (an SQLite path too, which was relative to the
    working directory); --allow-outside and data_root widen the folder as for every other path."""
    from embeval_report.io.policy import input_policy
    from embeval_report.report.tracking import Tracking

    folder = tmp_path / "in"
    for written, expected in (("mlruns", (folder / "mlruns").as_uri()), ("file:sub/mlruns", (folder / "sub" /
                              "mlruns").as_uri()), ("sqlite:///mlflow.db", f"sqlite:///{folder / 'mlflow.db'}"),
                              ("mlflow.db", f"sqlite:///{folder / 'mlflow.db'}"), ("sqlite://", "sqlite://")):
        manifest = _vectors_manifest(folder, f"mlflow: {{tracking_uri: '{written}'}}\n")
        assert Tracking.resolve(None, manifest).tracking_uri == expected, written
    shared = tmp_path / "shared"
    shared.mkdir()
    manifest = _vectors_manifest(folder, f"mlflow: {{tracking_uri: 'sqlite:///{shared}/mlflow.db'}}\n")
    with input_policy(allow_outside=[shared]):
        assert Tracking.resolve(None, manifest).tracking_uri == f"sqlite:///{shared / 'mlflow.db'}"
    # --mlflow is the user's own choice: not confined, and it replaces the manifest's
    manifest = _vectors_manifest(folder, "mlflow: {tracking_uri: mlruns}\n")
    assert Tracking.resolve(str(shared / "mlruns"), manifest).tracking_uri == (shared / "mlruns").as_uri()


def test_environment_credentials_go_only_to_a_server_the_user_chose(tmp_path, capsys, monkeypatch,
                                                                     no_mlflow_credentials):
    """MLFLOW_TRACKING_USERNAME/PASSWORD go to a server a manifest names only when it is MLFLOW_TRACKING_URI's
    (same scheme, host and port); else one line naming the field and --mlflow, exit 2, and the server is sent
    nothing (it was sent them as Basic auth by the reachability check). --mlflow and a manifest's own
    user:password@ are the user's and the sender's choice, as before."""
    import base64

    from embeval_report.cli import main
    from embeval_report.errors import InputError
    from embeval_report.report.tracking import Tracking

    from test_first_hour import _auth_server

    pytest.importorskip("mlflow")
    server, seen = _auth_server("someone-else", "other")  # records (path, Authorization) and refuses ours: 401
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    manifest = _vectors_manifest(tmp_path / "in", f"mlflow: {{tracking_uri: '{uri}'}}\n")
    token = "Basic " + base64.b64encode(b"ci-bot:ci-secret").decode()
    try:
        assert Tracking.resolve(None, manifest).manifest_field  # no credentials in the environment: followed
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ci-bot")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "ci-secret")
        for trusted in (None, "http://mlflow.internal:5000", uri.replace("http:", "https:"), uri + "1"):
            if trusted:
                monkeypatch.setenv("MLFLOW_TRACKING_URI", trusted)
            assert main(["compare", str(manifest), str(manifest), "--out", str(tmp_path / "out")]) == 2
            line = _one_error_line(capsys.readouterr().err)
            assert "m.yaml, field 'mlflow', key 'tracking_uri'" in line and "--mlflow" in line, line
            assert "MLFLOW_TRACKING_PASSWORD" in line and "ci-secret" not in line
        assert seen == [] and not (tmp_path / "out").exists()
        # the server of MLFLOW_TRACKING_URI (the set-up docs/tracking.md recommends), or --mlflow: credentials sent
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri + "/")
        with pytest.raises(InputError, match="refused the credentials given"):
            Tracking.resolve(None, manifest).check()
        monkeypatch.delenv("MLFLOW_TRACKING_URI")
        with pytest.raises(InputError, match="refused the credentials given"):
            Tracking.resolve(uri, manifest).check()
        assert seen == [("/health", token)] * 2
        # ~/.mlflow/credentials counts as the environment's
        monkeypatch.delenv("MLFLOW_TRACKING_USERNAME")
        monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
        (tmp_path / "home" / ".mlflow").mkdir(parents=True)
        (tmp_path / "home" / ".mlflow" / "credentials").write_text("[mlflow]\nmlflow_tracking_password = pw\n")
        with pytest.raises(InputError, match=r"~/\.mlflow/credentials"):
            Tracking.resolve(None, manifest)
        assert len(seen) == 2
    finally:
        server.shutdown()


@pytest.mark.parametrize("codec", ["pickle", "unknown"])
def test_a_zarr_store_zarr_cannot_parse_is_one_line(codec, tmp_path, capsys):
    """A Zarr group whose array metadata zarr cannot parse (an object array with a pickle codec, a codec it does not
    know) is one line naming the store and what was expected, exit 2 (it was a traceback and exit 1)."""
    import json

    from embeval_report.cli import main

    pytest.importorskip("zarr")
    folder = tmp_path / "in"
    array = {"zarr_format": 2, "shape": [30, 4], "chunks": [30, 4], "dtype": "<f4", "compressor": None,
             "fill_value": 0.0, "order": "C", "filters": None}
    array.update({"dtype": "|O", "filters": [{"id": "pickle"}]} if codec == "pickle" else
                 {"compressor": {"id": "no-such-codec"}})
    (folder / "bad.zarr" / "emb").mkdir(parents=True)
    (folder / "bad.zarr" / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    (folder / "bad.zarr" / "emb" / ".zarray").write_text(json.dumps(array))
    (folder / "m.yaml").write_text("vectors: bad.zarr\n")
    assert main(["run", str(folder / "m.yaml"), "--out", str(tmp_path / "out"), "--chapters", "isotropy",
                 "--formats", "html"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith("embeval-report: error: bad.zarr: could not read as a Zarr store of numeric arrays"), line
    assert not (tmp_path / "out").exists()


def test_torch_floor_excludes_the_weights_only_bypass():
    """.pt files are read with torch.load(weights_only=True), which runs code before torch 2.6 (CVE-2025-32434):
    the package requires 2.6 or later, and the Makefile's pin satisfies it."""
    import tomllib

    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [Requirement(d) for d in deps if Requirement(d).name == "torch"]
    assert not torch.specifier.contains("2.5.1") and torch.specifier.contains("2.6.0")
    pin = re.search(r"^TORCH_SPEC \?= torch==(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert torch.specifier.contains(pin)


def test_error_lines_show_control_characters(tmp_path, capsys):
    """A file name's escape sequences, carriage returns, C1 controls and bidi overrides reach the one-line error as
    <U+001B> etc. (they reached the CI log raw); tab and newline are spacing."""
    from embeval_report.cli import main

    name = "evil\x1b]0;pwned\x07\x1b[2J\r\u202egnp.npy"
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "m.yaml").write_text(f"vectors: {json_string(name)}\n")
    assert main(["compare", str(folder / "m.yaml"), str(folder / "m.yaml"), "--out", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "evil<U+001B>]0;pwned<U+0007><U+001B>[2J<U+000D><U+202E>gnp.npy" in line, line
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", line)

    from embeval_report.errors import terminal_line

    assert terminal_line("a\x1b[31mb\rc\x9bd\x7fe\u202ef\tg\nh") == \
        "a<U+001B>[31mb<U+000D>c<U+009B>d<U+007F>e<U+202E>f g h"


def json_string(text: str) -> str:
    """``text`` as a YAML double-quoted scalar (JSON's escapes)."""
    import json

    return json.dumps(text)
