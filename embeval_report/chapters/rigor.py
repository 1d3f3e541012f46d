"""The Statistical rigor chapter: how many tests the report ran and what survives their adjustment, and
how large a change each headline mean could detect (computed in :mod:`embeval_report.metrics.rigor`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..metrics import rigor as rg
from ..metrics.effects import Effects
from ..present.display import Table, escape, hypothesis_rows, show_figure, show_markdown, show_table
from ..present.escape import markdown_code
from ..present.display import show_metrics as show_metric_table
from ..present.plotting import PALETTE, WIDTH
from .declaration import MDE, ChapterSpec
from .recorder import read_adjusted, read_results

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["RigorReport", "compute", "narrative", "power_display", "pvalue_figure", "show_power", "show_pvalues",
           "show_summary", "show_tests"]

#: p-values below this are drawn at it (the figure's floor)
P_FLOOR = 1e-12
#: chapters whose records are not the report's own measurements
NOT_MEASURED = ("rigor", "summary")


@dataclass(frozen=True)
class RigorReport:
    """Everything the chapter shows."""

    tests: pd.DataFrame     # every recorded test, adjusted over the whole report
    power: pd.DataFrame     # one row per headline mean: n, sd, MDE, its effect E, units needed for E
    counts: dict
    effect: str             # the --mde text (each row's E is in `power`)
    metrics: dict


def compute(ctx: ChapterContext) -> RigorReport:
    """Collect the other chapters' tests and per-unit statistics, adjust, and record the counts."""
    results_dir = ctx.rec.results_dir
    records = {k: v for k, v in read_results(results_dir).items() if k not in NOT_MEASURED} if results_dir else {}
    tests = read_adjusted(results_dir) if results_dir else None
    if tests is None:  # re-run by hand outside a report run: adjust here
        tests = rg.adjust_tests(rg.collect_tests(records))
    effects = Effects.parse(ctx.option("mde"))
    effect = effects.canonical()
    power = rg.power_table(rg.unit_statistics(records), effects)
    counts = rg.rejection_counts(tests)
    metrics = {name: rg.SPECS[name].record(value, verdict=False) for name, value in counts.items()}
    ctx.rec.add(*metrics.values())
    ctx.rec.note(effect=effect, alpha=rg.ALPHA, power=rg.POWER, power_test=rg.POWER_TEST,
                 power_table=power.replace({np.nan: None}).to_dict(orient="records"))
    return RigorReport(tests, power, counts, effect, metrics)


# ---------------------------------------------------------------------------------------------
# Narrative, tables, figures
# ---------------------------------------------------------------------------------------------

def _fmt(x: float) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def narrative(rep: RigorReport) -> str:
    """What the counts and the power table say."""
    c, parts = rep.counts, []
    if c["tests_total"]:
        chapters = rep.tests.loc[rep.tests["p_value"].notna(), "chapter"].nunique()
        parts.append(
            f"The report ran **{c['tests_total']:,} hypothesis tests** in {chapters} chapter(s). At α = 0.05, "
            f"**{c['tests_rejected_holm']:,}** stay significant after Holm's correction over all of them (the chance "
            f"of even one false alarm held at 5 %) and **{c['tests_rejected_bh']:,}** after Benjamini–Hochberg (at "
            "most 5 % of the rejections expected false). A raw p-value below 0.05 in a chapter is not a finding "
            "unless it survives here: with this many tests, about "
            f"{0.05 * c['tests_total']:.1f} raw rejections are expected by chance alone.")
    else:
        parts.append("No chapter of this report ran a hypothesis test, so there is nothing to correct for multiplicity.")
    p = rep.power
    if len(p):
        weak = p[~p["detects_effect"]]
        parts.append(
            f"**{len(p)} headline numbers are means over units** (queries, test edges, entities): for each, the table "
            "below gives the smallest change a paired comparison on the same units would detect (α = 0.05, power "
            f"0.8), the change that matters for it, **E** ({_effect_words(rep)}), and how many units detecting E "
            "would take. "
            + (f"{len(weak)} of them cannot detect their E with the units this report has "
               f"(e.g. {escape(weak.iloc[0]['label'])}: MDE {_fmt(weak.iloc[0]['mde'])} over "
               f"{int(weak.iloc[0]['n']):,} {escape(weak.iloc[0]['unit'])}, E {_fmt(weak.iloc[0]['effect'])}, "
               f"{_fmt(weak.iloc[0]['required_n'])} "
               "needed): a comparison of two models on these numbers would call smaller differences noise."
               if len(weak) else "All of them can detect their E."))
    else:
        parts.append("No chapter in this report recorded a mean over units, so there is no power table.")
    return "\n\n".join(parts)


def _effect_words(rep: RigorReport) -> str:
    """How E was set, in words (``--mde``)."""
    if rep.effect == "auto":
        return ("by default 0.01 for a bounded metric such as a rate, 10 % of its distance to the bound when it is "
                "near one, and 5 % of the value for an unbounded one such as mean rank; `--mde` sets it")
    return markdown_code(f"--mde {rep.effect}")


def _common_effect(power: pd.DataFrame) -> str:
    """``"0.02"`` when every row has the same E, else ``"E"`` (the column header reads "units to detect …")."""
    e = power["effect"].dropna().unique()
    return f"{e[0]:g}" if len(e) == 1 else "E"


def power_display(power: pd.DataFrame) -> pd.DataFrame:
    """The power table as shown: chapter, metric, value, n, sd, MDE, E, units needed for E."""
    return pd.DataFrame({
        "chapter": power["chapter"], "metric": power["label"],
        "value": [_fmt(v) for v in power["value"]],
        "units": [f"{int(n):,} {u}" for n, u in zip(power["n"], power["unit"])],
        "sd over units": [_fmt(s) for s in power["sd"]],
        "MDE (α 0.05, power 0.8)": [_fmt(m) for m in power["mde"]],
        "E": [_fmt(e) for e in power["effect"]],
        f"units to detect {_common_effect(power)}": ["—" if r is None or (isinstance(r, float) and not np.isfinite(r))
                                                      else f"{int(r):,}" for r in power["required_n"]],
        "detects it": ["yes" if d else "no" for d in power["detects_effect"]],
    })


def pvalue_figure(tests: pd.DataFrame, alpha: float = rg.ALPHA) -> plt.Figure:
    """Sorted p-values (log scale) against the Holm and Benjamini–Hochberg rejection lines."""
    p = np.maximum(np.sort(tests["p_value"].dropna().to_numpy(float)), P_FLOOR)
    m = len(p)
    i = np.arange(1, m + 1)
    fig, ax = plt.subplots(figsize=(WIDTH * 0.62, 3.0))
    ax.plot(i, p, "o", ms=3, color=PALETTE["data"], label=f"p-values, sorted (below {P_FLOOR:g} drawn at it)")
    ax.plot(i, alpha * i / m, color=PALETTE["accent"], lw=1.2, label="Benjamini–Hochberg: α·i/m")
    ax.plot(i, alpha / (m - i + 1), color=PALETTE["reference"], lw=1.2, ls="--", label="Holm: α/(m − i + 1)")
    ax.axhline(alpha, color=PALETTE["muted"], lw=0.8, ls=":", label="α = 0.05 (no correction)")
    ax.set_yscale("log")
    ax.set_ylim(min(p.min(), alpha / m) / 5, 1.5)
    ax.set_xlabel("rank i of the p-value")
    ax.set_ylabel("p-value")
    ax.legend(frameon=False, fontsize=7, loc="lower right")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: RigorReport) -> None:
    show_markdown(narrative(rep))
    show_metric_table(rep.metrics, caption="Hypothesis tests of the whole report, and how many survive the "
                                           "report-wide corrections at α = 0.05.", label="tbl-rigor-counts")


def show_power(rep: RigorReport) -> None:
    if not len(rep.power):
        show_markdown("No headline mean over units in this report.")
        return
    show_table(power_display(rep.power),
               caption="Power of every headline mean over units: the smallest true change a two-sided paired t-test "
                       "on the same units detects with probability 0.8 at α = 0.05 (MDE = d·sd, statsmodels "
                       f"TTestPower), the change that matters E ({_effect_words(rep)}), and the units needed to "
                       "detect E.",
               label="tbl-rigor-power")


def show_pvalues(rep: RigorReport) -> None:
    if rep.tests["p_value"].notna().sum() < 2:
        return
    show_figure(pvalue_figure(rep.tests),
                caption="Every p-value of the report, smallest first, against the rejection lines: a test is rejected "
                        "by Benjamini–Hochberg up to the last p-value under the solid line, by Holm up to the first "
                        "p-value above the dashed line.", label="fig-rigor-pvalues")


def show_tests(rep: RigorReport) -> None:
    if not len(rep.tests):
        show_markdown("No tests were recorded.")
        return
    from IPython.display import display

    display(Table(hypothesis_rows(rep.tests, chapter_column=True).drop(columns="null hypothesis"),
                  caption="Every hypothesis test in the report: raw p, and p adjusted over all of them (Holm; "
                          "Benjamini–Hochberg); * rejected at α = 0.05. Families of many tests (one per dimension) "
                          "are one row here; each chapter's own table states the null hypotheses, and results/rigor_tests.csv lists "
                          "every test.", label="tbl-rigor-tests"))


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

CHAPTER = ChapterSpec(
    name="rigor", title="Statistical rigor", order=99,
    description="Every hypothesis test of the report adjusted together (Holm, Benjamini-Hochberg), and the smallest change each headline mean can detect (seed 001 §21.5).",
    requires=(),
    options=(MDE,), stage=1,
)
