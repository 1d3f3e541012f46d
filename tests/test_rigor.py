"""Statistical rigor: the report-wide correction of every recorded test (against statsmodels' multipletests
directly), the per-unit records and their minimum detectable effects (against statsmodels' TTestPower), the
chapters' test tables filled with the adjusted values, and the chapter in a report."""
import json
import math

import nbformat
import numpy as np
import pandas as pd
import pytest
import yaml
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from embeval_report.cli import main
from embeval_report.metrics import rigor as rg
from embeval_report.chapters.recorder import Recorder
from embeval_report.present.display import hypothesis_rows, hypothesis_table
from embeval_report.report.rigor import with_adjusted_tests
from embeval_report.stats import HypothesisTest, minimum_detectable_effect, required_units


def _records(seed=0, n_a=7, n_b=12):
    rng = np.random.default_rng(seed)
    pa = np.concatenate([rng.uniform(0, 1, n_a - 2), [1e-6, np.nan]])
    pb = rng.uniform(0, 0.2, n_b)
    a = [HypothesisTest(f"a{i}", "KS", p, statistic=0.1 * i, n="10 + 10", null="same").to_record()
         for i, p in enumerate(pa)]
    b = [HypothesisTest(f"b{i}", "KS", p, statistic=1.0, family="per-dimension KS").to_record()
         for i, p in enumerate(pb)]
    return {"drift": {"tests": b}, "stability": {"tests": a}, "isotropy": {"metrics": {}}}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_report_wide_adjustment_matches_statsmodels(seed):
    records = _records(seed)
    tests = rg.collect_tests(records, ["isotropy", "stability", "drift"])
    assert list(tests["chapter"].unique()) == ["stability", "drift"] and len(tests) == 19
    adj = rg.adjust_tests(tests)
    p = tests["p_value"].to_numpy()
    ok = np.isfinite(p)
    for method, col in (("holm", "p_holm"), ("fdr_bh", "p_bh")):
        reject, expected, _, _ = multipletests(p[ok], alpha=0.05, method=method)
        np.testing.assert_allclose(adj[col].to_numpy()[ok], expected)
        assert np.isnan(adj[col].to_numpy()[~ok]).all()
        assert (adj["rejected_" + ("holm" if method == "holm" else "bh")].to_numpy()[ok] == reject).all()
    counts = rg.rejection_counts(adj)
    assert counts["tests_total"] == 18  # the NaN p-value is not a test result
    assert counts["tests_rejected_holm"] <= counts["tests_rejected_bh"]


def test_large_families_are_one_row_and_adjusted_columns_appear_when_known():
    tests = rg.collect_tests(_records())
    raw = hypothesis_rows(tests)
    assert len(raw) == 7 + 1  # 7 single tests, the 12-test family in one row
    family = raw[raw["test"].str.startswith("12 tests")].iloc[0]
    assert family["p"].startswith("min ") and "adjusted" in raw.columns
    shown = hypothesis_rows(rg.adjust_tests(tests), chapter_column=True)
    assert {"Holm (report)", "BH (report)", "chapter"} <= set(shown.columns) and "adjusted" not in shown.columns
    assert shown[shown["test"].str.startswith("12 tests")]["Holm (report)"].iloc[0].endswith(
        tuple("0123456789")) or "rejected" in shown[shown["test"].str.startswith("12 tests")]["Holm (report)"].iloc[0]


def test_units_record_the_minimum_detectable_effect(tmp_path):
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"query_id": [f"q{i}" for i in range(150)], "ndcg": rng.uniform(0, 1, 150),
                          "hit": (rng.uniform(size=150) < 0.4).astype(float)})
    frame.loc[3, "ndcg"] = np.nan  # an undefined unit is left out
    rec = Recorder("retrieval", tmp_path)
    rec.units(frame, key="query_id", unit="queries", means=("ndcg", "hit"))
    x = frame["ndcg"].dropna().to_numpy()
    d = TTestPower().solve_power(nobs=len(x), alpha=0.05, power=0.8, alternative="two-sided")
    assert rec.metrics["mde_ndcg"]["value"] == pytest.approx(d * x.std(ddof=1), rel=1e-9)
    assert rec.metrics["mde_ndcg"]["direction"] == "lower" and "149 queries" in rec.metrics["mde_ndcg"]["note"]
    assert rec.info["units"]["stats"]["hit"]["n"] == 150
    saved = pd.read_csv(tmp_path / "units" / "retrieval.csv")
    assert list(saved.columns) == ["query_id", "ndcg", "hit"] and len(saved) == 150
    with pytest.raises(ValueError, match="no column"):
        rec.units(frame, key="query_id", unit="queries", means=("recall",))
    stats = rg.unit_statistics({"retrieval": json.loads((tmp_path / "retrieval.json").read_text())})
    power = rg.power_table(stats, 0.05).set_index("metric")
    assert power.loc["ndcg", "n"] == 149
    assert power.loc["ndcg", "required_n"] == required_units(0.05, x.std(ddof=1))
    assert bool(power.loc["ndcg", "detects_effect"]) == (power.loc["ndcg", "mde"] <= 0.05)
    assert power.loc["ndcg", "mde"] == pytest.approx(minimum_detectable_effect(x.std(ddof=1), len(x)))


def test_power_rows_use_each_metrics_effect():
    """The default E per metric kind, from the specs' ranges: 0.01 for a bounded rate (10 % of the distance to a
    bound near one), 5 % of the value for mean rank (an unbounded range); a per-metric --mde wins. Units needed
    against statsmodels' TTestPower solved for n."""
    stats = pd.DataFrame([
        dict(chapter="link_prediction", metric="mean_rank", label="Mean rank", unit="test edges", n=7919, sd=30.0,
             mde=0.95, value=46.0),
        dict(chapter="link_prediction", metric="mrr", label="MRR", unit="test edges", n=7919, sd=0.2, mde=0.0063,
             value=0.11),
        dict(chapter="recommendation", metric="hit_rate_at_10", label="Hit rate@10", unit="users", n=4000, sd=0.12,
             mde=0.0053, value=0.015),
    ])
    power = rg.power_table(stats, "auto").set_index("metric")
    assert power.loc["mean_rank", "effect"] == pytest.approx(0.05 * 46.0)
    assert power.loc["mrr", "effect"] == pytest.approx(0.01)
    assert power.loc["hit_rate_at_10", "effect"] == pytest.approx(0.1 * 0.015)
    for m in power.index:
        e, sd = power.loc[m, "effect"], power.loc[m, "sd"]
        n = TTestPower().solve_power(effect_size=e / sd, alpha=0.05, power=0.8, alternative="two-sided")
        assert power.loc[m, "required_n"] == math.ceil(n) and bool(power.loc[m, "detects_effect"]) == (
            power.loc[m, "mde"] <= e)
    assert power.loc["mean_rank", "required_n"] < 2000  # not the tens of millions an absolute 0.01 would ask for
    given = rg.power_table(stats, "0.02,link_prediction.mean_rank=1,hit_rate_at_10=20%").set_index("metric")
    assert list(given["effect"]) == pytest.approx([1.0, 0.02, 0.2 * 0.015])
    assert given.loc["mean_rank", "effect_rule"] == "--mde link_prediction.mean_rank=1"


def test_test_tables_are_shown_adjusted_when_rendered_and_the_notebook_is_left_as_executed(tmp_path):
    tests = rg.collect_tests(_records())
    data, meta = hypothesis_table(tests[tests["chapter"] == "drift"], "drift")._repr_mimebundle_()
    assert "at the end of the run" in data["text/html"] and meta["embeval"]["tests"] == "drift"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("show_tests(ctx.rec)", outputs=[
        nbformat.v4.new_output("display_data", data=data, metadata=meta)])]
    executed = nbformat.writes(nb)
    assert with_adjusted_tests(nb, rg.adjust_tests(tests)) == 1
    out = nb.cells[0].outputs[0]
    assert "Holm (report)" in out.data["text/html"] and "at the end of the run" not in out.data["text/html"]
    assert "BH (report)" in out.data["text/markdown"]
    assert "at the end of the run" in nbformat.reads(executed, 4).cells[0].outputs[0].data["text/html"]


def _set_with_runs_and_snapshots(folder, n=300, d=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    ids = [f"e{i}" for i in range(n)]
    np.save(folder / "base.npy", X)
    (folder / "ids.txt").write_text("\n".join(ids))
    for r, noise in ((1, 0.3), (2, 0.5)):
        pd.DataFrame(X + noise * rng.standard_normal((n, d)), index=ids).rename_axis("id").reset_index().to_csv(
            folder / f"run{r}.csv", index=False)
    shifted = X + 0.4 * rng.standard_normal((n, d)) + np.eye(d)[0]
    np.save(folder / "snap.npy", shifted.astype(np.float32))
    pd.DataFrame({"id": ids, "frequency": rng.integers(1, 1000, n)}).to_csv(folder / "meta.csv", index=False)
    manifest = {"vectors": "base.npy", "ids": "ids.txt", "metadata": "meta.csv", "runs": ["run1.csv", "run2.csv"],
                "snapshots": [{"name": "later", "vectors": "snap.npy"}]}
    (folder / "m.yaml").write_text(yaml.safe_dump(manifest))
    return folder / "m.yaml"


def test_rigor_chapter_in_a_report(tmp_path):
    """Stability and drift record their tests and per-entity units; the rigor chapter counts and adjusts every
    test of the report, each chapter's table shows the report-wide values, and `mde_<metric>` is recorded."""
    m = _set_with_runs_and_snapshots(tmp_path)
    out = tmp_path / "report"
    assert main(["run", str(m), "--out", str(out), "--formats", "html", "--chapters", "stability,drift",
                 "--device", "cpu", "--mde", "0.02"]) == 0
    doc = json.loads((out / "metrics.json").read_text())["chapters"]
    results = {c: json.loads((out / "results" / f"{c}.json").read_text()) for c in ("stability", "drift")}
    p = np.array([t["p_value"] for c in ("stability", "drift") for t in results[c]["tests"]], float)
    assert len(results["drift"]["tests"]) == 1 + 8  # MMD and one KS per dimension
    assert len(results["stability"]["tests"]) >= 2  # frequency bins compared, frequency vs overlap
    rigor = doc["rigor"]["metrics"]
    assert rigor["tests_total"]["value"] == np.isfinite(p).sum()
    assert rigor["tests_rejected_holm"]["value"] == multipletests(p, method="holm")[0].sum()
    assert rigor["tests_rejected_bh"]["value"] == multipletests(p, method="fdr_bh")[0].sum()
    units = pd.read_csv(out / "results" / "units" / "stability.csv")
    x = units["knn_overlap"].to_numpy()
    assert doc["stability"]["metrics"]["knn_overlap"]["value"] == pytest.approx(x.mean())
    assert doc["stability"]["metrics"]["mde_knn_overlap"]["value"] == pytest.approx(
        minimum_detectable_effect(x.std(ddof=1), len(x)))
    assert "mde_mean_drift__later" in doc["drift"]["metrics"]
    drift_nb = nbformat.read(next((out / "chapters").glob("*_drift.ipynb")), 4)
    tables = [o for c in drift_nb.cells for o in c.get("outputs", [])
              if o.get("metadata", {}).get("embeval", {}).get("tests") == "drift"]
    # the executed notebook is left as it ran; the rendered report shows the report-wide adjusted p-values
    assert len(tables) == 1 and "Holm (report)" not in tables[0]["data"]["text/html"]
    html = (out / "report.html").read_text()
    assert html.count('id="tbl-drift-tests"') == 1 and "Holm (report)" in html.split('id="tbl-drift-tests"')[1][:20_000]
    html = (out / "report.html").read_text()
    assert "Statistical rigor" in html and "tbl-rigor-power" in html and "units to detect 0.02" in html
    run = json.loads((out / "run.json").read_text())
    order = [c["name"] for c in run["chapters"]]
    assert order[0] == "summary" and order[-1] == "rigor"
