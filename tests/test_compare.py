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


def test_verdicts_and_the_correction():
    assert paired.verdict("higher", 0.02, 0.001, 0.005, 0.01) == "B better"
    assert paired.verdict("lower", 0.02, 0.001, 0.005, 0.01) == "A better"
    assert paired.verdict("higher", 0.002, 0.4, 0.008, 0.01) == "no difference larger than the MDE"
    assert paired.verdict("higher", 0.002, 0.4, 0.05, 0.01) == "underpowered"
    rng = np.random.default_rng(3)
    rows = []
    for i in range(6):
        a = rng.uniform(0, 1, 80)
        rows.append(dict(a="x", b="y", chapter="c", metric=f"m{i}", label=f"m{i}", direction="higher", unit="queries",
                         result=paired.paired_comparison(a, a + rng.normal(0.03 * i, 0.1, 80), seed=i)))
    table = paired.compare_table(rows, correction="holm", effect=0.01)
    np.testing.assert_allclose(table["p_adjusted"], multipletests(table["p_randomisation"], method="holm")[1])
    bh = paired.compare_table(rows, correction="bh", effect=0.01)
    np.testing.assert_allclose(bh["p_adjusted"], multipletests(bh["p_randomisation"], method="fdr_bh")[1])
    assert (paired.compare_table(rows, correction="none")["p_adjusted"] == table["p_randomisation"]).all()
    assert table.loc[5, "verdict"] == "B better"
    with pytest.raises(ValueError, match="correction"):
        paired.compare_table(rows, correction="bonferroni")


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
            rows.append(dict(a="x", b="y", chapter="c", metric=f"m{m}", label="m", direction="higher", unit="u",
                             result=paired.paired_comparison(a, a + rng.normal(0, 0.1, n), seed=seed,
                                                             n_resamples=199)))
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
    assert "new vs prod" in capsys.readouterr().err
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
    assert "regression" in capsys.readouterr().err
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


def test_compare_bad_input_is_one_line(tmp_path, capsys):
    a = _model(tmp_path / "a", 1.0)
    assert main(["compare", str(a), "--out", str(tmp_path / "o")]) == 2
    assert "at least two models" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "--names", "x", "--out", str(tmp_path / "o")]) == 2
    assert "one per model" in capsys.readouterr().err
