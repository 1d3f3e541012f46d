"""Training diagnostics against independent references: PyTorch Lightning's EarlyStopping rule transcribed with
torch tensors and Lightning's own values (kept in tests/reference/peers.json, live when installed), statsmodels'
KPSS/ADF called directly, ruptures on a planted change, planted convergence, divergence, overfitting and
oscillation found at the right steps, a TensorBoard log written with ``SummaryWriter`` and read back, bad logs ->
one clear line, and one report."""
import importlib.util
import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from embeval_report.errors import InputError
from embeval_report.io.training_log import read_training_log, training_log_frame
from embeval_report.metrics import convergence as cv
from embeval_report.metrics import training_runs as tr
from embeval_report.metrics.training_checks import monitor_checks
from reference import inputs, make_fixtures


# ---------------------------------------------------------------------------------------------
# Early stopping: Lightning's rule
# ---------------------------------------------------------------------------------------------

def lightning_rule(values, min_delta, patience, mode):
    """Transcription of lightning.pytorch.callbacks.EarlyStopping (2.x) __init__ + _evaluate_stopping_criteria:
    the index where should_stop first becomes True, the reason, and the best score then."""
    monitor_op = {"min": torch.lt, "max": torch.gt}[mode]
    min_delta = min_delta * (1 if monitor_op == torch.gt else -1)
    best = torch.tensor(torch.inf) if monitor_op == torch.lt else -torch.tensor(torch.inf)
    wait = 0
    for i, v in enumerate(values):
        current = torch.tensor(float(v))
        if not torch.isfinite(current):
            return i, "non-finite", best
        if monitor_op(current - min_delta, best):
            best, wait = current, 0
        else:
            wait += 1
            if wait >= patience:
                return i, "patience", best
    return None, "", best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", ["min", "max"])
def test_early_stopping_matches_lightning_rule(seed, mode):
    rng = np.random.default_rng(seed)
    x = np.exp(-np.arange(80) / 15) + rng.normal(0, 0.02, 80)
    x = -x if mode == "max" else x
    if seed == 5:
        x[40] = np.nan
    for min_delta in (0.0, 0.01, 0.05):
        for patience in (1, 3, 7):
            stop, reason, best = lightning_rule(x, min_delta, patience, mode)
            es = cv.early_stopping(x, min_delta=min_delta, patience=patience, mode=mode)
            assert (es.stop, es.reason) == (stop, reason)
            assert x[es.best] == pytest.approx(float(best))


def check_against_lightning(ref):
    """Lightning's EarlyStopping stop step and best score over the grid of (mode, min_delta, patience)."""
    for name, x in inputs.early_stopping_series().items():
        for (mode, min_delta, patience), want in zip(inputs.EARLY_STOPPING_GRID, ref[name], strict=True):
            series = x if mode == "min" else -x
            es = cv.early_stopping(series, min_delta=min_delta, patience=patience, mode=mode)
            setting = f"{name}, {mode}, min_delta {min_delta}, patience {patience}"
            assert es.stop == want["stop"], setting
            assert series[es.best] == pytest.approx(want["best"]), setting


def test_early_stopping_matches_installed_lightning():
    """Drift check against the installed Lightning (not in the test extra; see tests/reference/)."""
    if importlib.util.find_spec("lightning") is None:
        pytest.importorskip("pytorch_lightning")
    check_against_lightning(make_fixtures.lightning_values())


def test_early_stopping_matches_lightning_fixture():
    """Lightning's values kept in tests/reference/peers.json: runs in CI."""
    check_against_lightning(make_fixtures.fixture("lightning"))


def test_relative_min_delta_is_a_share_of_the_best():
    x = [10.0, 9.95, 9.9, 9.0, 8.99, 8.98, 8.97]
    es = cv.early_stopping(x, min_delta=0.01, patience=3, relative=True)  # needs > 1 % improvement
    assert es.improved.tolist()[:4] == [True, False, False, True] and es.stop == 6 and es.best == 3


# ---------------------------------------------------------------------------------------------
# Planted events in synthetic logs
# ---------------------------------------------------------------------------------------------

def synthetic(kind, n=120, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    loss = 0.3 + 2.0 * np.exp(-0.08 * t) + rng.normal(0, 0.01, n)
    val = None
    if kind == "diverge":
        loss = loss + np.where(t > 70, 0.05 * (np.exp(0.1 * (t - 70)) - 1), 0)
        loss[t >= 100] = np.inf  # in a table a NaN reads "not logged"; a file's "nan" is kept
    if kind == "overfit":
        val = 0.5 + 2.0 * np.exp(-0.08 * t) + 0.01 * np.maximum(0, t - 50) + rng.normal(0, 0.003, n)
    if kind == "oscillate":
        loss = loss + 0.15 * np.sin(2 * np.pi * t / 8)
    df = pd.DataFrame({"step": (t + 1) * 10, "loss": loss})
    if val is not None:
        df["val_loss"] = val
    return training_log_frame(df)


def test_planted_convergence_divergence_overfitting_and_oscillation():
    d = tr.diagnose_run(synthetic("healthy").frame)
    # 2 exp(-0.08 t) falls within 1 % of the total change (0.02) at t = ln(100)/0.08 = 57.6, plus EMA lag
    assert 55 <= d.convergence <= 80 and not d.div.diverged and not d.osc.oscillating
    d = tr.diagnose_run(synthetic("diverge").frame)
    assert d.div.diverged and d.div.reason == "non-finite" and d.step(d.div.first_nonfinite, False) == 1010
    assert 60 <= d.div.onset <= 80 and d.convergence is None
    assert d.early.reason == "patience" and d.div.onset < d.early.stop < 100  # stops on the rise, before the NaN
    d = tr.diagnose_run(synthetic("overfit").frame)
    assert d.monitor == "val_loss" and d.over.overfitting and 45 <= d.over.onset <= 55
    assert d.early.reason == "patience" and 45 <= d.early.best <= 56
    d = tr.diagnose_run(synthetic("oscillate").frame)
    assert d.osc.oscillating and d.osc.period == pytest.approx(8, abs=0.5) and d.osc.fisher_p < 1e-6


def test_fisher_g_matches_the_exact_formula_by_simulation():
    rng = np.random.default_rng(3)
    from scipy import signal

    ps = [cv.fisher_g_test(signal.periodogram(rng.standard_normal(100))[1][1:-1])[1] for _ in range(400)]
    assert 0.02 < np.mean(np.array(ps) < 0.05) < 0.09  # calibrated under white noise


def test_exponential_fit_recovers_the_rate():
    t = np.arange(200)
    fit = cv.exponential_fit(0.1 + 2 * np.exp(-0.03 * t))
    # the seed subtracts the observed minimum (not the asymptote), which biases the rate slightly up
    assert fit.rate == pytest.approx(0.03, rel=0.1) and fit.r2 > 0.99 and fit.ci[0] <= fit.rate <= fit.ci[1]


def test_change_points_find_a_planted_shift():
    rng = np.random.default_rng(0)
    x = np.r_[np.full(60, 1.0), np.full(60, 0.4)] + rng.normal(0, 0.02, 120)
    cps = cv.change_points(x)
    assert len(cps.indices) == 1 and abs(cps.indices[0] - 60) <= 2
    import ruptures as rpt

    assert cps.indices == [c for c in rpt.Pelt(model="rbf", min_size=10).fit(x.reshape(-1, 1)).predict(pen=3)
                           if c < 120]


def test_stationarity_matches_statsmodels():
    from statsmodels.tsa.stattools import adfuller, kpss

    rng = np.random.default_rng(2)
    y = 0.5 + rng.normal(0, 0.01, 60)
    st = cv.stationarity(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # statsmodels 0.15: tuple results are deprecated
        assert st.kpss_p == pytest.approx(kpss(y, regression="ct", nlags="auto")[1])
        assert st.adf_p == pytest.approx(adfuller(y, regression="ct", autolag="AIC")[1])
    assert st.settled
    walk = np.cumsum(rng.normal(0, 0.05, 60)) + 1
    assert not cv.stationarity(walk).settled


def test_seed_monitor_checks_and_gradients():
    rng = np.random.default_rng(0)
    t = np.arange(100)
    loss = 0.1 + 2 * np.exp(-0.03 * t) + rng.normal(0, 0.02, 100)
    c = monitor_checks(loss, np.full(100, 5000.0)).set_index("check")
    assert c.loc["exploding gradients", "fires"] and not c.loc["vanishing gradients", "fires"]
    assert not c.loc["NaN/Inf loss", "fires"]
    assert monitor_checks(np.r_[loss[:50], np.inf]).set_index("check").loc["NaN/Inf loss", "fires"]


def test_several_runs_summary_pools_nothing_over_configurations():
    """Runs that may differ in configuration: no mean and no interval over them, each run on its own (issue 26)."""
    runs = [tr.diagnose_run(synthetic(k, seed=i).frame, k) for i, k in enumerate(["healthy", "overfit", "diverge"])]
    values, cis = tr.summarize_runs(runs)
    assert values == {"diverged_runs": pytest.approx(1 / 3)} and cis == {}
    per = tr.per_run(runs)
    assert per["healthy"][0]["final_loss"] == pytest.approx(runs[0].final_loss)
    assert "final_loss" not in per["diverge"][0]  # a diverged run has no final loss
    # a run's own interval: over its final checks (at least 4 of them)
    assert len(runs[0].final_loss_values) >= tr.MIN_INTERVAL_N
    lo, hi, _ = per["healthy"][1]["final_loss"]
    assert lo < runs[0].final_loss < hi


def test_replicate_runs_mean_and_spread_with_intervals_only_from_four():
    from scipy import stats as sps
    from statsmodels.stats.proportion import proportion_confint

    three = [tr.diagnose_run(synthetic(k, seed=i).frame, f"s{i}") for i, k in enumerate(["healthy", "healthy",
                                                                                         "diverge"])]
    values, cis = tr.summarize_runs(three, replicates=True)
    finals = [r.final_loss for r in three[:2]]
    assert values["final_loss"] == pytest.approx(np.mean(finals))
    assert values["final_loss_spread"] == pytest.approx(np.std(finals, ddof=1))
    assert cis == {}  # never an interval from 3 runs (or from the 2 that did not diverge)
    five = [tr.diagnose_run(synthetic("healthy", seed=10 + i).frame, f"s{i}") for i in range(4)] + three[2:]
    values, cis = tr.summarize_runs(five, level=0.95, replicates=True)
    x = np.array([r.final_loss for r in five[:4]])
    half = sps.t.ppf(0.975, 3) * x.std(ddof=1) / 2  # t interval over 4 runs: sd / sqrt(4)
    assert cis["final_loss"][:2] == pytest.approx((x.mean() - half, x.mean() + half), rel=1e-9)
    s = x.std(ddof=1)
    assert cis["final_loss_spread"][:2] == pytest.approx((s * math.sqrt(3 / sps.chi2.ppf(0.975, 3)),
                                                          s * math.sqrt(3 / sps.chi2.ppf(0.025, 3))), rel=1e-9)
    assert cis["diverged_runs"][:2] == pytest.approx(proportion_confint(1, 5, 0.05, method="wilson"), rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Reading logs
# ---------------------------------------------------------------------------------------------

def test_lightning_csv_rows_merge_and_logged_nan_is_kept(tmp_path):
    p = tmp_path / "metrics.csv"
    p.write_text("epoch,step,train_loss,val_loss,lr-Adam\n0,9,1.0,,0.1\n0,9,,1.2,\n1,19,nan,,0.1\n1,19,,0.9,\n"
                 "2,29,0.5,,0.1\n")
    log = read_training_log(p)
    f = log.frame
    assert list(f["step"]) == [9, 19, 29] and f["val_loss"].tolist()[:2] == [1.2, 0.9] and "lr" in f
    assert f["loss_logged"].tolist() == [True, True, True] and math.isnan(f["loss"][1])
    j = tmp_path / "log.jsonl"
    j.write_text('{"epoch": 0, "loss": 2.0, "run": "a"}\n{"epoch": 1, "loss": 1.5, "run": "a"}\n'
                 '{"epoch": 0, "loss": 3.0, "run": "b"}\n')
    log = read_training_log(j)
    assert log.x == "epoch" and log.runs == ["a", "b"] and log.run("b")["loss"].tolist() == [3.0]


def test_tensorboard_log_is_read(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    for run in ("seed0", "seed1"):
        w = SummaryWriter(str(tmp_path / "tb" / run))
        for step in range(15):
            w.add_scalar("Loss/train", 1.0 / (step + 1), step)  # the seed's TrainingMonitor tags
            w.add_scalar("Learning_Rate", 0.01, step)
            w.add_scalar("Gradients/norm", 0.5, step)
        w.close()
    log = read_training_log(tmp_path / "tb")
    assert log.format == "tensorboard" and log.runs == ["seed0", "seed1"] and {"lr", "grad_norm"} <= set(log.frame)
    assert log.run("seed1")["loss"].tolist()[:2] == pytest.approx([1.0, 0.5])


@pytest.mark.parametrize("name, text, pattern", [
    ("a.csv", "", r"a\.csv: empty file"),
    ("a.csv", "step,acc\n1,0.5\n", r"a\.csv: no training-loss column \(found 'step', 'acc'\)"),
    ("a.csv", "loss,acc\n1,0.5\n", r"a\.csv: no step or epoch column"),
    ("a.csv", "step,loss\n1,0.5\n2,abc\n", r"a\.csv, row 2 \(line 3\), column 'loss': 'abc' is not a number"),
    ("a.csv", "step,loss\n1,0.5\n2\n", r"a\.csv, row 2 \(line 3\): found 1 field\(s\); expected 2"),
    ("a.csv", "step,loss\n1.5,0.5\n", r"a\.csv, row 1 \(line 2\), column 'step': 1\.5 is not a non-negative integer"),
    ("a.csv", "step,loss\n1,0.5\n5,0.4\n2,0.3\n", r"a\.csv, row 3 \(line 4\), column 'step': step 2 comes after step 5"),
    ("a.csv", "step,loss,val_loss\n1,,0.5\n", r"a\.csv: run 'run' has no training-loss value"),
    ("a.jsonl", '{"step": 1, "loss": 1}\n{"step": 2, loss}\n', r"a\.jsonl, line 2: invalid JSON"),
    ("a.jsonl", "[1, 2]\n", r"a\.jsonl, line 1: expected a JSON object"),
])
def test_bad_logs_name_file_row_and_column(tmp_path, name, text, pattern):
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError, match=pattern):
        read_training_log(tmp_path / name)


def test_empty_tensorboard_folder(tmp_path):
    (tmp_path / "tb").mkdir()
    with pytest.raises(InputError, match=r"tb: no TensorBoard event files"):
        read_training_log(tmp_path / "tb")


# ---------------------------------------------------------------------------------------------
# The chapter in a report
# ---------------------------------------------------------------------------------------------

def test_training_diagnostics_chapter_in_a_report(tmp_path):
    """The demo log (healthy, overfitting, diverging runs) through the CLI: metrics with intervals, the tests
    recorded, the planted problems named in the report; a bad log stops the run with exit 2 and one line."""
    from embeval_report.cli import main
    from embeval_report.demo.training_log import demo_side_data

    np.save(tmp_path / "vectors.npy", np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32))
    demo_side_data(tmp_path)
    (tmp_path / "m.yaml").write_text("vectors: vectors.npy\ntraining_log: training_log.csv\n")
    out = tmp_path / "report"
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--formats", "html", "--chapters",
                 "training_diagnostics", "--device", "cpu"]) == 0
    ch = json.loads((out / "metrics.json").read_text())["chapters"]["training_diagnostics"]
    assert ch["status"] == "ok"
    # three runs of different configurations: nothing pooled (no mean, no spread, no interval over 3 runs) ...
    assert {n for n in ch["metrics"] if "__" not in n} == {"diverged_runs"}
    m = ch["metrics"]["diverged_runs"]
    assert m["value"] == pytest.approx(1 / 3) and m["ci_low"] is None and m["ci_high"] is None
    # ... each run's own values with its own intervals instead
    for name in ("final_loss__baseline", "final_loss__no_dropout", "convergence_rate__baseline"):
        m = ch["metrics"][name]
        assert m["ci_low"] <= m["value"] <= m["ci_high"], name
    assert "final_loss__lr_3e_2" not in ch["metrics"]  # the diverged run has no final loss
    rec = json.loads((out / "results" / "training_diagnostics.json").read_text())
    assert {"kpss: baseline", "adf: baseline", "gap widening: no-dropout"} <= {t["name"] for t in rec["tests"]}
    status = {r["run"]: r["status"] for r in rec["info"]["runs"]}
    assert status["baseline"] in ("settled", "converged") and "overfits" in status["no-dropout"]
    assert "diverged" in status["lr-3e-2"] and "oscillates" in status["lr-3e-2"]
    html = (out / "report.html").read_text()
    for words in ("Early stopping watches", "TrainingMonitor", "Has training settled?",
                  "none is assumed to be the evaluated one"):
        assert words in html, words
    assert rec["info"]["evaluated_run"] is None and "mean over runs" not in html
    (tmp_path / "bad.csv").write_text("step,loss\n1,0.5\n2,x\n")
    (tmp_path / "bad.yaml").write_text("vectors: vectors.npy\ntraining_log: bad.csv\n")
    assert main(["run", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "r2"), "--formats", "html"]) == 2
