"""`embeval-report compare`: paired statistics against SciPy, statsmodels and brute-force enumeration, the
size of the randomisation test under the null, the verdict rules, rank intervals, and the command end to end
(runs, reuse of earlier reports, three models, bad input)."""
import itertools
import json
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from embeval_report.cli import main
from embeval_report.metrics import paired
from embeval_report.stats import minimum_detectable_effect


def test_paired_statistics_match_scipy_and_closed_forms():
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, 60)
    b = np.clip(a + rng.normal(0.05, 0.1, 60), 0, 1)
    b[:5] = a[:5]  # ties
    r = paired.paired_comparison(a, b, seed=1)
    d = b - a
    assert r.n == 60 and r.diff == pytest.approx(d.mean()) and r.mean_b - r.mean_a == pytest.approx(d.mean())
    assert r.p_t == pytest.approx(sps.ttest_rel(b, a).pvalue)
    assert r.p_wilcoxon == pytest.approx(sps.wilcoxon(d[d != 0]).pvalue)
    assert r.d_z == pytest.approx(d.mean() / d.std(ddof=1))
    assert (r.wins, r.ties, r.losses) == ((d > 0).sum(), (d == 0).sum(), (d < 0).sum())
    assert r.mde == pytest.approx(minimum_detectable_effect(d.std(ddof=1), 60))
    assert r.ci_low < d.mean() < r.ci_high
    lower = paired.paired_comparison(a, b, direction="lower", seed=1)
    assert (lower.wins, lower.losses) == (r.losses, r.wins) and lower.p_t == r.p_t


def test_randomisation_test_is_exact_for_few_units():
    d = np.array([0.3, -0.1, 0.25, 0.4, 0.05, -0.2, 0.15, 0.35, 0.1, 0.22])
    flips = np.array(list(itertools.product([1, -1], repeat=len(d))))
    null = np.abs((flips * d).mean(1))
    expected = (null >= abs(d.mean()) - 1e-12).mean()
    assert paired.randomisation_pvalue(d) == pytest.approx(expected)


def test_randomisation_test_below_its_monte_carlo_floor_uses_the_normal_limit():
    """A clear difference over many units: the sampled p-value would sit at its floor 2/(R+1), so the sign-flip
    null's normal limit is reported instead, and it agrees with a sampled test of 10^6 flips where both resolve."""
    rng = np.random.default_rng(5)
    d = rng.normal(0.05, 0.2, 400)
    z = abs(d.sum()) / np.sqrt((d * d).sum())
    assert paired.randomisation_pvalue(d) == pytest.approx(2 * sps.norm.sf(z)) and paired.randomisation_pvalue(d) < 1e-4
    moderate = rng.normal(0.02, 0.2, 400)  # p around 0.05: the sampled value is kept
    sampled = paired.randomisation_pvalue(moderate)
    limit = 2 * sps.norm.sf(abs(moderate.sum()) / np.sqrt((moderate * moderate).sum()))
    assert sampled > 4 / 5000 and sampled == pytest.approx(limit, abs=0.02)
    assert 0 < paired.randomisation_pvalue(rng.normal(0, 1, 5000)) <= 1  # thousands of units: no 2^n overflow


def test_randomisation_test_holds_its_size_under_the_null():
    """Over 300 seeds of two models with the same expected per-unit values, the two-sided test rejects at
    α = 0.05 in about 5 % of them (binomial 99.9 % bounds)."""
    rejections = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        base = rng.uniform(0, 1, 40)
        a, b = base + rng.normal(0, 0.2, 40), base + rng.normal(0, 0.2, 40)
        rejections += paired.randomisation_pvalue(b - a, n_resamples=999, seed=seed) <= 0.05
    lo, hi = sps.binom.ppf([0.0005, 0.9995], 300, 0.05)
    assert lo <= rejections <= hi


def _row(a, b, metric="m", seed=0, **kw):
    """A comparison row as :func:`embeval_report.report.pairing.paired_rows` builds it."""
    return dict(a="x", b="y", chapter="c", metric=metric, label=metric, direction=kw.pop("direction", "higher"),
                unit="queries", result=paired.paired_comparison(a, b, seed=seed, **kw),
                differences=paired.paired_differences(a, b))


def test_verdicts_and_the_correction():
    assert paired.verdict("higher", 0.02, 0.001, inside=False, mde=0.005, effect=0.01) == "B better"
    assert paired.verdict("lower", 0.02, 0.001, inside=False, mde=0.005, effect=0.01) == "A better"
    assert paired.verdict("higher", 0.002, 0.4, inside=True, mde=0.008, effect=0.01) == "no difference larger than E"
    assert paired.verdict("higher", 0.002, 0.4, inside=True, mde=0.05, effect=0.01) == "no difference larger than E"
    assert paired.verdict("higher", 0.002, 0.4, inside=False, mde=0.05, effect=0.01) == "underpowered"
    assert paired.verdict("higher", 0.006, 0.4, inside=False, mde=0.008, effect=0.01) == "inconclusive"
    rng = np.random.default_rng(3)
    rows = []
    for i in range(6):
        a = rng.uniform(0, 1, 80)
        rows.append(_row(a, a + rng.normal(0.03 * i, 0.1, 80), metric=f"m{i}", seed=i))
    table = paired.compare_table(rows, correction="holm", effects=0.01)
    np.testing.assert_allclose(table["p_adjusted"], multipletests(table["p_randomisation"], method="holm")[1])
    bh = paired.compare_table(rows, correction="bh", effects=0.01)
    np.testing.assert_allclose(bh["p_adjusted"], multipletests(bh["p_randomisation"], method="fdr_bh")[1])
    none = paired.compare_table(rows, correction="none", effects=0.01)
    assert (none["p_adjusted"] == table["p_randomisation"]).all()
    assert table.loc[5, "verdict"] == "B better"
    # the simultaneous interval: the paired t interval at 1 - alpha/m (Bonferroni over the 6 rows), closed form
    for r, row in zip(table.itertuples(), rows):
        d = row["differences"]
        half = sps.t.ppf(1 - 0.05 / 6 / 2, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        assert (r.sim_low, r.sim_high) == pytest.approx((d.mean() - half, d.mean() + half), rel=1e-9)
        assert r.sim_level == pytest.approx(1 - 0.05 / 6) and r.interval == "simultaneous"
        assert r.mde == pytest.approx(minimum_detectable_effect(d.std(ddof=1), len(d), alpha=0.05 / 6), rel=1e-9)
        # TOST (statsmodels ttost_paired) at alpha/(2m) agrees with the interval lying inside +-E
        p_tost = ttost_paired(row["result"].mean_b + d, row["result"].mean_b + 0 * d, -0.01, 0.01)[0]
        assert r.p_equivalence == pytest.approx(p_tost, rel=1e-9)
        assert r.inside == (-0.01 < r.sim_low and r.sim_high < 0.01)
    assert (none["interval"] == "marginal").all() and (none["sim_level"] == 0.95).all()
    with pytest.raises(ValueError, match="correction"):
        paired.compare_table(rows, correction="bonferroni")


def _fast_row(d, metric, seed=0):
    """A row from simulated differences ``d`` without the resampling statistics (the verdict reads the p-value,
    the differences and the spread; the randomisation test's own size is tested above): the t-test's p stands in
    for the randomisation test's."""
    sd = float(d.std(ddof=1))
    r = paired.PairedComparison(n=len(d), mean_a=0.5, mean_b=0.5 + d.mean(), diff=float(d.mean()), ci_low=np.nan,
                                ci_high=np.nan, ci_method="", sd_diff=sd, d_z=d.mean() / sd, wins=0, ties=0, losses=0,
                                p_t=np.nan, p_wilcoxon=np.nan, p_randomisation=float(sps.ttest_1samp(d, 0).pvalue),
                                mde=np.nan)
    return dict(a="x", b="y", chapter="c", metric=metric, label=metric, direction="higher", unit="u", result=r,
                differences=d)


def _p_inside(delta, effect, n, alpha):
    """Exact probability that the 1 - alpha paired t interval of n normal differences (mean delta, sd 1) lies inside
    (-effect, effect): Phi terms integrated over the chi-square law of the sample variance (TOST power)."""
    from scipy import integrate

    nu, c, se = n - 1, sps.t.ppf(1 - alpha / 2, n - 1), 1 / np.sqrt(n)

    def given(q):  # q = nu * s^2
        h = c * np.sqrt(q / nu) * se
        return max(0.0, sps.norm.cdf((effect - h - delta) / se) - sps.norm.cdf((-effect + h - delta) / se)) \
            * sps.chi2.pdf(q, nu)
    return integrate.quad(given, 0, sps.chi2.ppf(1 - 1e-12, nu), limit=200)[0]


def _within(count, runs, p):
    """Whether ``count`` of ``runs`` is inside the binomial 99.9 % two-sided range at rate ``p``."""
    lo, hi = sps.binom.ppf([0.0005, 0.9995], runs, p)
    return lo <= count <= hi


def test_equivalence_verdicts_have_their_stated_error_rates():
    """Simulated pairs, 60 units, differences N(delta, 1), E = 0.6, for delta = 0, +-E/2, +-E, +-2E.

    Marginal (--correction none, one table of many rows): "no difference larger than E" at delta = +-E (the worst
    case of a false equivalence) happens at rate alpha/2 = 0.025 exactly, and at 0 and +-E/2 at the TOST power of
    the 95 % interval (exact integral); a false "better" at delta = 0 at rate alpha; never the wrong direction.
    Simultaneous (Holm over families of the 7 rows): equivalence at the Bonferroni level alpha/7, so a false one
    at delta = +-E is at most alpha/14, and the true null row raises a "better" in at most alpha of the families."""
    n, E, runs = 60, 0.6, 400
    deltas = (0.0, E / 2, -E / 2, E, -E, 2 * E, -2 * E)
    rng = np.random.default_rng(29)
    rows = [_fast_row(rng.normal(delta, 1, n), f"d{j}_{i}") for i in range(runs) for j, delta in enumerate(deltas)]
    t = paired.compare_table(rows, correction="none", effects=E)
    t["delta"] = np.tile(deltas, runs)
    by = {delta: t[t["delta"] == delta] for delta in deltas}
    same = "no difference larger than E"
    for delta in deltas:  # the interval lies inside +-E at the TOST power (the exact integral)
        inside = int(by[delta]["inside"].sum())
        assert _within(inside, runs, _p_inside(delta, E, n, 0.05)), (delta, inside)
        # the verdict says so unless the test rejects first (then it names the better model)
        assert ((by[delta]["verdict"] == same) == (by[delta]["inside"] & (by[delta]["p_adjusted"] > 0.05))).all()
        wrong = "A better" if delta > 0 else "B better"
        assert delta == 0 or (by[delta]["verdict"] == wrong).sum() <= sps.binom.ppf(0.999, runs, 0.025)
    edge = pd.concat([by[E], by[-E]])  # a false equivalence: at most alpha/2, attained by the interval
    assert _within(int(edge["inside"].sum()), 2 * runs, 0.025)
    assert (edge["verdict"] == same).sum() <= sps.binom.ppf(0.9995, 2 * runs, 0.025)
    assert _within(int(by[0.0]["verdict"].isin(["A better", "B better"]).sum()), runs, 0.05)
    assert (by[2 * E]["verdict"] == "B better").all() and (by[-2 * E]["verdict"] == "A better").all()
    # families of the 7 rows, Holm + the Bonferroni-level interval
    families, false_alarms, false_same, null_inside = 120, 0, 0, 0
    for i in range(families):
        fam = paired.compare_table([_fast_row(rng.normal(delta, 1, n), f"d{j}") for j, delta in enumerate(deltas)],
                                   effects=E)
        assert fam["sim_level"].iloc[0] == pytest.approx(1 - 0.05 / 7)
        false_alarms += fam["verdict"].iloc[0] in ("A better", "B better")
        false_same += int((fam["verdict"].iloc[[3, 4]] == same).sum())
        null_inside += bool(fam["inside"].iloc[0])
    assert false_alarms <= sps.binom.ppf(0.999, families, 0.05)
    assert false_same <= sps.binom.ppf(0.999, 2 * families, 0.05 / 14)
    assert _within(null_inside, families, _p_inside(0.0, E, n, 0.05 / 7))


def test_holm_keeps_the_family_wise_error_and_the_mde_has_its_power():
    """Simulation over seeds: with no true difference on any of 5 metrics, Holm over the randomisation p-values
    rejects anything in about 5 % of the runs at most; a true difference equal to the MDE is detected at about
    the stated power 0.8, and one of 2 x MDE almost always."""
    n, runs, false_alarms = 60, 200, 0
    for seed in range(runs):
        rng = np.random.default_rng([seed, 1])
        rows = []
        for m in range(5):
            a = rng.normal(0.5, 0.2, n)
            rows.append(_row(a, a + rng.normal(0, 0.1, n), metric=f"m{m}", seed=seed, n_resamples=199))
        false_alarms += (paired.compare_table(rows)["p_adjusted"] <= 0.05).any()
    assert false_alarms <= sps.binom.ppf(0.999, runs, 0.05)
    sd = 0.1
    mde = minimum_detectable_effect(sd, n)
    for shift, lo, hi in ((mde, 0.70, 0.90), (2 * mde, 0.97, 1.0)):
        hits = 0
        for seed in range(300):
            d = np.random.default_rng([seed, 2]).normal(shift, sd, n)
            hits += sps.ttest_1samp(d, 0).pvalue <= 0.05
        assert lo <= hits / 300 <= hi, (shift, hits)


def test_rank_intervals():
    rng = np.random.default_rng(4)
    base = rng.uniform(0, 1, 500)
    separated = {"a": base, "b": base + 0.2, "c": base + 0.4}
    t = paired.rank_intervals(separated, seed=0)
    assert list(t["model"]) == ["c", "b", "a"] and (t["rank_low"] == t["rank_high"]).all()
    assert list(paired.rank_intervals(separated, direction="lower")["model"]) == ["a", "b", "c"]
    noisy = {m: base + rng.normal(0, 0.3, 500) for m in "abc"}
    wide = paired.rank_intervals(noisy, seed=0)
    assert (wide["rank_high"] - wide["rank_low"]).max() >= 1


def _model(folder, noise, seed=5, n_docs=300, n_queries=80, d=16):
    """The same corpus and judgements; queries encoded with ``noise`` (a better model has less)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((n_docs, d)).astype(np.float32)
    target = rng.choice(n_docs, n_queries, replace=False)
    Q = (C[target] + noise * np.random.default_rng([seed, int(noise * 100)]).standard_normal((n_queries, d)))
    np.save(folder / "corpus.npy", C)
    (folder / "corpus_ids.txt").write_text("".join(f"d{i}\n" for i in range(n_docs)))
    np.save(folder / "queries.npy", Q.astype(np.float32))
    (folder / "query_ids.txt").write_text("".join(f"q{i}\n" for i in range(n_queries)))
    (folder / "qrels.txt").write_text("".join(f"q{i} 0 d{t} 1\n" for i, t in enumerate(target)))
    (folder / "m.yaml").write_text("vectors: corpus.npy\nids: corpus_ids.txt\nqueries: {vectors: queries.npy, ids: "
                                   "query_ids.txt}\nqrels: qrels.txt\n")
    return folder / "m.yaml"


def test_compare_command_end_to_end(tmp_path, capsys):
    a, b = _model(tmp_path / "a", 1.6), _model(tmp_path / "b", 0.5)
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--names", "prod,new", "--out", str(out), "--chapters", "retrieval",
                 "--formats", "html", "--device", "cpu"]) == 0
    doc = json.loads((out / "comparison.json").read_text())
    t = pd.DataFrame(doc["comparisons"])
    assert [m["name"] for m in doc["models"]] == ["prod", "new"] and set(t["b"]) == {"new"}
    assert {"mrr", "ndcg_at_10", "recall_at_10"} <= set(t["metric"])
    row = t[t["metric"] == "mrr"].iloc[0]
    units = {m: pd.read_csv(out / "models" / m / "results" / "units" / "retrieval.csv") for m in ("prod", "new")}
    assert row["n"] == 80 and row["diff"] == pytest.approx(units["new"]["mrr"].mean() - units["prod"]["mrr"].mean())
    assert row["verdict"] == "B better" and row["p_adjusted"] <= 0.05
    assert row["p_adjusted"] == pytest.approx(multipletests(t["p_randomisation"], method="holm")[1][row.name])
    html = (out / "report.html").read_text()
    assert "Model comparison" in html and "tbl-compare-differences" in html
    err = capsys.readouterr().err
    assert "new (B) vs prod (A)" in err and "retrieval: new better on" in err and "comparing the models" in err
    assert "retrieval.mrr: +" in err and ": new better" in err and "A better" not in err
    assert 'class="verdict verdict-healthy"' in html and "verdict-new" not in html  # coloured, one class word
    # the model swap section: the same corpus vectors (every list kept), queries encoded with other noise
    swap = doc["swap"][0]
    assert (swap["a"], swap["b"], swap["shared_ids"], swap["k"]) == ("prod", "new", 300, 10)
    assert swap["neighbours"]["changed_share"] == 0.0 and swap["neighbours"]["mean"] == 1.0
    assert swap["queries"]["queries"] == 80 and 0 < swap["queries"]["changed_share"] <= 1
    assert swap["queries"]["gain"] > swap["queries"]["lose"]
    assert "tbl-compare-swap-overlap" in html and "tbl-compare-swap-thresholds" in html
    assert "model swap prod → new: 300 of 300 shared ids" in err
    # earlier report folders are reused as they are: the same numbers without re-running; three models get ranks
    third = tmp_path / "third"
    shutil.copytree(out / "models" / "prod", third)
    units = pd.read_csv(third / "results" / "units" / "retrieval.csv")
    units[[c for c in units.columns if c != "query_id"]] *= 0.5  # a worse model
    units.to_csv(third / "results" / "units" / "retrieval.csv", index=False)
    again = tmp_path / "cmp2"
    assert main(["compare", str(out / "models" / "prod"), str(out / "models" / "new"), str(third), "--out", str(again),
                 "--formats", "html"]) == 0
    doc2 = json.loads((again / "comparison.json").read_text())
    t2 = pd.DataFrame(doc2["comparisons"])
    same = t2[(t2["a"] == "prod") & (t2["b"] == "new")].set_index("metric")
    assert same.loc["mrr", "diff"] == pytest.approx(row["diff"]) and not (again / "models").exists()
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["models"]) == {"prod", "new"} and "retrieval" in metrics["models"]["prod"]
    mrr = metrics["comparisons"]["mrr"]
    assert mrr["a"] == "prod" and mrr["b"] == "new" and mrr["difference"] == pytest.approx(row["diff"])
    assert {"ci_low", "ci_high", "p_value", "p_adjusted", "verdict"} <= set(mrr) and mrr["verdict"] == "B better"
    # the new model first: the old one is a significant regression, and --fail-on-regression gates on it
    gate = tmp_path / "gate"
    assert main(["compare", str(out / "models" / "new"), str(out / "models" / "prod"), "--out", str(gate),
                 "--formats", "html", "--fail-on-regression"]) == 3
    gate_line = capsys.readouterr().err.strip().splitlines()[-1]
    worse = pd.DataFrame(json.loads((gate / "comparison.json").read_text())["comparisons"])
    worse = worse[worse["verdict"] == "A better"]
    assert gate_line == (f"embeval-report: {len(worse)} significant regression(s) against new: "
                         + ", ".join(f"retrieval.{m}" for m in worse["metric"]) + " (--fail-on-regression)")
    assert "Do not ship prod" in (gate / "report.html").read_text()
    assert "Ship new" in html
    # a model whose units share no id with the other's: one line, exit 2
    other = tmp_path / "other"
    shutil.copytree(out / "models" / "prod", other)
    u = pd.read_csv(other / "results" / "units" / "retrieval.csv")
    u["query_id"] = "x" + u["query_id"].astype(str)
    u.to_csv(other / "results" / "units" / "retrieval.csv", index=False)
    assert main(["compare", str(out / "models" / "new"), str(other), "--out", str(tmp_path / "bad")]) == 2
    assert "share no queries" in capsys.readouterr().err
    ranks = pd.DataFrame(doc2["ranks"]["retrieval.mrr"])
    assert list(ranks["model"]) == ["new", "prod", "third"] and "tbl-compare-ranks" in (again / "report.html").read_text()


def test_mde_forms_and_defaults_per_metric_kind():
    from embeval_report.metrics.effects import Effects, metric_kind

    auto = Effects.parse("auto")
    assert metric_kind("link_prediction", "mean_rank")[0] == "unbounded"  # range (1, inf) in its spec
    assert metric_kind("retrieval", "mrr")[:1] == ("bounded",) and metric_kind("drift", "mean_drift__2024_02")[0] == \
        "bounded"
    assert auto.for_metric("link_prediction", "mean_rank", 40.0)[0] == pytest.approx(2.0)
    assert auto.for_metric("retrieval", "mrr", 0.5)[0] == 0.01
    assert auto.for_metric("recommendation", "hit_rate_at_10", 0.015)[0] == pytest.approx(0.0015)
    assert auto.for_metric("retrieval", "hit_rate_at_10", 0.995)[0] == pytest.approx(0.0005)  # near the top bound
    assert auto.for_metric("retrieval", "hit_rate_at_10", 0.0)[0] == 0.01  # on the bound: no relative base
    assert auto.for_metric("x", "not_declared", 3.0) == (0.01, "0.01 (default)")
    e = Effects.parse("2%,link_prediction.mean_rank=1, mrr=0.03,drift.mean_drift=5%")
    assert e.for_metric("link_prediction", "mean_rank", 40.0)[0] == 1.0
    assert e.for_metric("retrieval", "mrr", 0.5)[0] == 0.03 and e.for_metric("link_prediction", "mrr", 0.1)[0] == 0.03
    assert e.for_metric("drift", "mean_drift__2024_05", 0.2)[0] == pytest.approx(0.01)  # a snapshot's copy
    assert e.for_metric("retrieval", "ndcg_at_10", 0.5) == (pytest.approx(0.01), "--mde 2% of 0.5")
    assert Effects.parse(0.02).canonical() == "0.02" and Effects.parse("auto").canonical() == "auto"
    for bad, words in (("x", "not a number"), ("0", "positive"), ("-1%", "positive"), ("1,2", "two values"),
                       ("a.b.c=1", "not a metric name"), ("mrr=1,mrr=2", "given twice"), ("mrr=", "not a number"),
                       ("", "empty"), ("0.01,,mrr=1", "empty entry")):
        with pytest.raises(ValueError, match=words):
            Effects.parse(bad)


def test_bad_mde_values_are_one_line_and_exit_2(tmp_path, capsys):
    a, b = _model(tmp_path / "a", 1.0), _model(tmp_path / "b", 0.5)
    for value, words in (("1.5x", "not a number"), ("0", "positive"), ("link_prediction.mean_rnak=1", "no metric"),
                         ("retrievl.mrr=1", "no chapter 'retrievl'"), ("mrr=2,mrr=3", "given twice")):
        assert main(["compare", str(a), str(b), "--out", str(tmp_path / "o"), "--mde", value]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and err.startswith("embeval-report: error: --mde"), err
        assert not (tmp_path / "o").exists()
    assert main(["run", str(a), "--out", str(tmp_path / "r"), "--mde", "2%", "--mde", "banana=1"]) == 2
    assert "no metric 'banana'" in capsys.readouterr().err


def test_model_names_from_the_manifest_or_the_folder(tmp_path):
    from embeval_report.report.compare import folder_name, model_names

    for sub, text in (("prod", "name: Production model\nvectors: v.npy\n"), ("new", "vectors: v.npy\n"),
                      ("old", "vectors: v.npy\n")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "manifest.yaml").write_text(text)
    sources = [tmp_path / "prod" / "manifest.yaml", tmp_path / "new" / "manifest.yaml"]
    assert model_names(sources) == ["Production model", "new"]  # the name it declares, else the folder's
    assert model_names([tmp_path / "new" / "manifest.yaml", tmp_path / "old" / "manifest.yaml"]) == ["new", "old"]
    assert model_names(sources, ["a", "b"]) == ["a", "b"]
    assert folder_name("Production model (v2)") == "Production-model-v2"


def test_compare_bad_input_is_one_line(tmp_path, capsys):
    a = _model(tmp_path / "a", 1.0)
    assert main(["compare", str(a), "--out", str(tmp_path / "o")]) == 2
    assert "at least two models" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "--names", "x", "--out", str(tmp_path / "o")]) == 2
    assert "one per model" in capsys.readouterr().err
