"""Monitoring: profile, batch scoring, alert levels, the CLI's exit statuses, the history and the chapter."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from embeval_report.cli import main
from embeval_report.errors import InputError
from embeval_report.monitoring import build_profile, load_profile, read_history, save_profile, score_batch
from embeval_report.monitoring.profile import JSON_FILE

D = 16
MIX = np.random.default_rng(99).standard_normal((D, D)) * np.r_[np.full(3, 2.5), np.ones(D - 3)]


def draw(n, seed, shift=0.0):
    return (np.random.default_rng(seed).standard_normal((n, D)) @ MIX + 1.0 + shift).astype(np.float32)


@pytest.fixture(scope="module")
def profile():
    return build_profile(draw(3000, 0), name="ref", sample_size=1000, calibration=300, device="cpu")


def fast(p, Y, seed=0):
    return score_batch(p, Y, seed=seed, n_perm=100, mmd_sample=300, ks_sample=600, classifier_sample=300,
                       anomaly_sample=600, device="cpu")


def test_profile_statistics_match_numpy(profile, tmp_path):
    X = draw(3000, 0)
    np.testing.assert_allclose(profile.mean, X.astype(np.float64).mean(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(profile.covariance, np.cov(X.astype(np.float64), rowvar=False, bias=True), atol=1e-6)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    C = U @ U.T
    assert profile.apcs == pytest.approx((C.sum() - len(X)) / (len(X) * (len(X) - 1)), abs=1e-9)
    back = load_profile(save_profile(profile, tmp_path / "p"))
    assert back.n == 3000 and np.array_equal(back.sample, profile.sample)


def test_no_shift_false_alarm_rate_and_planted_shift(profile):
    alarms = sum(fast(profile, draw(400, 100 + s), seed=s).level != "ok" for s in range(12))
    assert alarms <= 2  # Holm over the batch's tests at 0.05: about 0.6 expected in 12
    big = fast(profile, draw(400, 7, shift=1.0))
    assert big.level == "critical" and big.signals["mean_shift"].level == "critical"
    small = fast(profile, draw(400, 8, shift=0.6))
    assert small.signals["mean_shift"].level in ("warning", "critical")
    assert small.signals["mean_shift"].ratio > 1.5


def test_mean_shift_test_is_calibrated(profile):
    from scipy import stats
    p = [fast(profile, draw(300, 500 + s), seed=s).signals["mean_shift"].p_value for s in range(8)]
    assert stats.kstest(p, "uniform").pvalue > 0.001


def test_bad_batches(profile):
    with pytest.raises(InputError, match="dimension 8"):
        score_batch(profile, np.ones((10, 8), np.float32))
    bad = draw(10, 1)
    bad[3, 2] = np.nan
    with pytest.raises(InputError, match="row 4, column 3: nan"):
        score_batch(profile, bad)
    with pytest.raises(InputError, match="empty batch"):
        score_batch(profile, np.zeros((0, D), np.float32))


def test_cli_exit_statuses_and_history(profile, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    np.save("ref.npy", draw(2000, 0))
    np.save("same.npy", draw(300, 1))
    np.save("moved.npy", draw(300, 2, shift=1.0))
    np.save("d8.npy", np.ones((5, 8), np.float32))
    np.save("empty.npy", np.zeros((0, D), np.float32))
    x = draw(5, 3)
    x[1, 1] = np.inf
    np.save("inf.npy", x)
    assert main(["profile", "ref.npy", "--out", "prof", "--device", "cpu"]) == 0
    assert main(["monitor", "prof", "same.npy", "--history", "h.jsonl", "--fail-on", "warning", "--device",
                 "cpu"]) == 0
    assert main(["monitor", "prof", "moved.npy", "--history", "h.jsonl", "--fail-on", "critical",
                 "--timestamp", "2024-05-01", "--device", "cpu"]) == 3
    out = capsys.readouterr().out
    assert "Mean shift" in out and "CRITICAL" in out
    rec = json.loads((tmp_path / "monitor-moved.json").read_text())
    assert rec["level"] == "critical" and set(rec["signals"]) >= {"mean_shift", "mmd", "anomalous_fraction"}
    h = read_history("h.jsonl")
    assert [r["level"] for r in h.records] == ["ok", "critical"] and h.records[1]["timestamp"] == "2024-05-01"
    for f in ("d8", "empty", "inf"):
        assert main(["monitor", "prof", f"{f}.npy", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "dimension 8" in err and "empty batch" in err and "Traceback" not in err
    meta = json.loads((tmp_path / "prof" / JSON_FILE).read_text())
    meta["format_version"] = 0
    (tmp_path / "prof" / JSON_FILE).write_text(json.dumps(meta))
    assert main(["monitor", "prof", "same.npy"]) == 2
    assert "format version 0" in capsys.readouterr().err


def test_bad_history_lines(tmp_path):
    f = tmp_path / "h.jsonl"
    f.write_text('{"format": "embeval-report monitoring history", "version": 1}\n')
    with pytest.raises(InputError, match="line 1: missing field 'batch'"):
        read_history(f)
    f.write_text("not json\n")
    with pytest.raises(InputError, match="h.jsonl, line 1: not valid JSON"):
        read_history(f)


def test_chapter_end_to_end(profile, tmp_path):
    from embeval_report.monitoring.history import append_history, history_record

    folder = tmp_path / "set"
    folder.mkdir()
    np.save(folder / "vectors.npy", draw(300, 0))
    for i, shift in enumerate((0.0, 0.0, 1.5)):
        s = fast(profile, draw(300, 40 + i, shift=shift), seed=i)
        append_history(folder / "h.jsonl", history_record(s, batch=f"week {i + 1}", timestamp=f"2024-01-0{i + 1}"))
    (folder / "manifest.yaml").write_text(yaml.safe_dump({"vectors": "vectors.npy", "monitor_history": "h.jsonl"}))
    out = tmp_path / "r"
    assert main(["run", str(folder / "manifest.yaml"), "--out", str(out), "--formats", "html", "--chapters",
                 "monitoring", "--device", "cpu"]) == 0
    chapter = json.loads((out / "metrics.json").read_text())["chapters"]["monitoring"]["metrics"]
    assert chapter["batches"]["value"] == 3 and chapter["batches_alerting"]["value"] >= 1
    assert chapter["mean_shift"]["verdict"] in ("concerning", "problematic")
    assert chapter["mean_shift"]["ci_low"] <= chapter["mean_shift"]["value"] <= chapter["mean_shift"]["ci_high"]
    html = (out / "report.html").read_text()
    for words in ("monitoring dashboard", "week 3", "The latest batch"):
        assert words in html, words
