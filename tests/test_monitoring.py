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
    return score_batch(p, Y, seed=seed, n_perm=150, mmd_sample=300, ks_sample=600, classifier_sample=300,
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
    from embeval_report.io.monitor_history import append_history
    from embeval_report.monitoring.score import history_record

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


def t_rows(n, seed, df=3):
    """Heavy-tailed rows: Student t with 3 degrees of freedom, mixed and shifted like ``draw``."""
    return (np.random.default_rng(seed).standard_t(df, (n, D)) @ MIX + 1.0).astype(np.float32)


def test_exceedances_of_the_calibrated_threshold_are_beta_binomial():
    """A batch's count of scores above the k-th smallest of m held-out scores (k = ceil((1 - q)(m + 1))) follows
    BetaBin(n, m - k + 1, k) whatever the scores' law (here lognormal): simulated counts against scipy's pmf."""
    from scipy import stats

    from embeval_report.monitoring.profile import calibrate

    rng = np.random.default_rng(0)
    m, n, runs = 199, 40, 20000
    counts = np.empty(runs, int)
    for i in range(runs):
        cal, batch = rng.lognormal(0, 2, m), rng.lognormal(0, 2, n)
        threshold, k = calibrate(cal, 0.025)
        counts[i] = (batch > threshold).sum()
    assert k == 195  # ceil(0.975 * 200)
    expected = stats.betabinom.pmf(np.arange(n + 1), n, m - k + 1, k) * runs
    observed = np.bincount(counts, minlength=n + 1)
    keep = expected >= 5  # pool the tail for the chi-square test
    obs = np.r_[observed[keep], observed[~keep].sum()]
    exp = np.r_[expected[keep], expected[~keep].sum()]
    assert stats.chisquare(obs, exp).pvalue > 0.001
    assert counts.mean() / n == pytest.approx((m - k + 1) / (m + 1), rel=0.03)


def test_unchanged_heavy_tailed_batches_stay_ok_in_the_table_and_the_dashboard(tmp_path):
    """Student-t rows: the calibrated threshold leaves (m - k)/m of the held-out rows above it, about q = 2.5 %;
    unchanged batches stay ok (at most the Bonferroni false-alarm rate), their anomalous fraction below its warning
    edge, and the dashboard reads every level from the bands the table's level came from."""
    from embeval_report.chapters.monitoring import PANELS, dashboard_figure, panel_data
    from embeval_report.io.monitor_history import append_history
    from embeval_report.monitoring.score import history_record
    from embeval_report.monitoring.score import band_level

    p = build_profile(t_rows(4000, 0), sample_size=1500, calibration=600, device="cpu")
    cal = p.calibration_scores
    assert (cal > p.anomaly_threshold).mean() == pytest.approx((len(cal) - p.anomaly_rank) / len(cal))
    m = len(cal)
    assert p.nominal_rate == pytest.approx((m - p.anomaly_rank + 1) / (m + 1)) and p.nominal_rate <= 0.025
    levels = []
    for i in range(8):
        s = fast(p, t_rows(500, 300 + i), seed=i)
        levels.append(s.level)
        f = s.signals["anomalous_fraction"]
        assert f.value <= f.bands["warning"] and f.level == "ok"
        for sig in s.signals.values():  # every signal has a critical edge or says it has none
            assert sig.bands.get("critical") is not None or "no critical level" in sig.rule
        append_history(tmp_path / "h.jsonl", history_record(s, batch=f"b{i}", timestamp=f"2024-01-0{i + 1}"))
    from scipy import stats
    assert sum(lv != "ok" for lv in levels) <= stats.binom.ppf(0.999, 8, 0.05)
    h = read_history(tmp_path / "h.jsonl")
    for sname, col, _ in PANELS:
        d = panel_data(h, sname, col)
        assert list(d["level"]) == list(d["recorded"]), sname  # the dashboard's colour = the table's level
        if sname == "anomalous_fraction":
            assert (d["value"] <= d["warning"]).all() and (d["value"] < 2.5 * p.nominal_rate * 2).all()
    assert band_level(0.2, {"warning": 0.1, "critical": 0.3}) == "warning"
    dashboard_figure(h)


def test_every_level_is_where_its_test_rejects_and_a_strong_shift_is_critical(profile):
    from scipy import stats

    moved = fast(profile, draw(400, 9, shift=1.5))
    auc = moved.signals["domain_classifier"]
    assert auc.value > 0.7 and auc.level == "critical"  # AUC has a critical level now
    assert moved.signals["mmd"].level == "warning" and "no critical level" in moved.signals["mmd"].rule
    for s in moved.signals.values():  # a level above ok only where the signal's own test rejects at alpha/7
        assert (s.level != "ok") <= (s.p_value <= 0.05 / 7), s.name
    frac = moved.signals["anomalous_fraction"]
    a, b = profile.exceedance
    n = frac.detail["rows"]
    for edge in (frac.bands["warning"], frac.bands["critical"]):  # the first count above an edge is significant
        first = int(np.floor(edge * n + 1e-9)) + 1
        assert stats.betabinom.sf(first - 1, n, a, b) <= 0.05 / 7 and edge >= 2 * profile.nominal_rate


def test_small_batches_say_what_they_cannot_see(profile, tmp_path, monkeypatch, capsys):
    from statsmodels.stats.power import NormalIndPower
    from statsmodels.stats.proportion import proportion_effectsize

    s = fast(profile, draw(5, 4))
    assert "anomalous_fraction" in s.info["underpowered"]
    q = profile.nominal_rate
    pw = s.info["power"]["anomalous_fraction"]
    assert pw["power"] == pytest.approx(NormalIndPower().power(proportion_effectsize(2 * q, q), nobs1=5,
                                                               alpha=0.05 / 7, ratio=0, alternative="larger"))
    monkeypatch.chdir(tmp_path)
    np.save("ref.npy", draw(2000, 0))
    np.save("tiny.npy", draw(5, 1))
    assert main(["profile", "ref.npy", "--out", "prof", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["monitor", "prof", "tiny.npy", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "too small to see a warning-level change of the anomalous fraction" in out and "rows needed" in out


def test_monitor_json_beside_the_history_and_json_dash_prints_only_json(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    np.save("ref.npy", draw(2000, 0))
    np.save("same.npy", draw(300, 1))
    np.save("moved.npy", draw(300, 2, shift=1.0))
    assert main(["profile", "ref.npy", "--out", "prof", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["monitor", "prof", "same.npy", "--history", "logs/h.jsonl", "--device", "cpu"]) == 0
    assert (tmp_path / "logs" / "monitor-same.json").is_file() and not (tmp_path / "monitor-same.json").exists()
    capsys.readouterr()
    assert main(["monitor", "prof", "moved.npy", "--json", "-", "--history", "logs/h.jsonl", "--fail-on",
                 "warning", "--device", "cpu"]) == 3
    out, err = capsys.readouterr()
    rec = json.loads(out)
    assert err == "" and rec["level"] == "critical" and rec["verdict"] == "problematic"
    assert not (tmp_path / "logs" / "monitor-moved.json").exists()
    assert len(read_history("logs/h.jsonl").records) == 2


def test_a_long_history_is_aggregated_in_the_dashboard_and_the_table(profile, tmp_path):
    """A 400-batch history: the dashboard shows the latest RECENT batches one by one and the older ones in at
    most WINDOWS windows (median, range, median bands, worst level: checked against a loop over the batches); the
    table lists the latest TABLE_RECENT batches and the latest TABLE_ALERTS alerts before them, and says how many
    it leaves to the history file. (2,000 batches drew 105 s of CPU and a 2,000-row table before.)"""
    import pandas as pd

    from embeval_report.chapters import monitoring as mon
    from embeval_report.monitoring.score import LEVELS, history_record

    scored = [history_record(fast(profile, draw(200, 60 + i, shift=shift), seed=i), batch="x", timestamp="x")
              for i, shift in enumerate((0.0, 0.0, 1.5))]
    n = 400
    with open(tmp_path / "h.jsonl", "w") as f:
        for i in range(n):
            r = dict(scored[0 if i % 9 else 2], batch=f"b{i:03d}", timestamp=f"2024-01-01T{i % 24:02d}:00")
            f.write(json.dumps(r) + "\n")
    h = read_history(tmp_path / "h.jsonl")
    size = mon.window_size(n)
    assert size == -(-(n - mon.RECENT) // mon.WINDOWS) == 9
    d = mon.panel_data(h, "mean_shift", "ratio")
    cut = n - mon.RECENT
    w = mon.windowed(d, cut, size)
    for k, row in w.iterrows():  # the reference: each window's batches, one by one
        part = d[(d["batch_index"] >= k * size) & (d["batch_index"] < min((k + 1) * size, cut))]
        assert (row["first"], row["last"]) == (part["batch_index"].min(), part["batch_index"].max())
        assert row["value"] == pytest.approx(float(np.median(part["value"])))
        assert (row["low"], row["high"]) == (part["value"].min(), part["value"].max())
        assert row["level"] == max(part["level"], key=LEVELS.index)
        assert row["warning"] == pytest.approx(float(np.median(part["warning"])))
    assert len(w) == -(-cut // size) <= mon.WINDOWS
    fig = mon.dashboard_figure(h)
    ax = fig.axes[0]
    from matplotlib.collections import PathCollection

    points = sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))
    assert points == mon.RECENT + len(w)  # no marker per old batch
    assert len(ax.collections) <= 3 * (mon.RECENT + len(w)) + 4  # nor a band
    assert len(fig.axes[-1].get_xticks()) <= 16
    kept, left, alerting = mon.table_records(h)
    old_alerts = [r for r in h.records[:-mon.TABLE_RECENT] if r["level"] != "ok"]
    assert kept == old_alerts[-mon.TABLE_ALERTS:] + h.records[-mon.TABLE_RECENT:]
    assert (left, alerting) == (n - mon.TABLE_RECENT - mon.TABLE_ALERTS, len(old_alerts) - mon.TABLE_ALERTS)
    rep = mon.MonitoringReport(h, {}, h.records[-1])
    assert len(mon.batches_table(rep)) == mon.TABLE_RECENT + mon.TABLE_ALERTS
    assert isinstance(mon.batches_table(rep), pd.DataFrame)
    short = mon.MonitoringReport(read_history(_first_lines(tmp_path, 12)), {}, h.records[11])
    assert mon.table_records(short.history) == (short.history.records, 0, 0) and mon.window_size(12) == 1


def _first_lines(tmp_path, k):
    lines = (tmp_path / "h.jsonl").read_text().splitlines()[:k]
    (tmp_path / "short.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path / "short.jsonl"
