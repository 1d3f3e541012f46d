"""How often each finding rule fires on clean and on planted sets (issue 42 item 6, calibration).

Runs every set of ``tests/calibration_sets.py`` (clean and planted, each chapter computed in this process as a
report computes it, then the report-wide adjustment, the remedy checks and the findings) over several seeds and
writes, per rule (``chapter: effect``):

* on clean sets: the share of runs in which it fired at ``concerning`` or above (a false alarm), and at ``note``;
* on the planted sets made for it: the share of runs in which it was found as planted (chapter, effect, kind,
  severity, subset and sign: :func:`calibration_sets.problems`);
* on planted sets made for other rules: how often it fired beside them (``allowed`` co-firings included);
* with ``--real``: the packaged MiniLM on real text (``calibration_sets.REAL_SETS``, seed 0): status and findings.

    python benchmarks/calibration.py --seeds 10 --out /tmp/calibration [--real]

writes ``runs.jsonl`` (one line per set and seed: its findings, status, problems, CPU seconds) and
``table.md`` (the table docs/findings.md quotes) into ``--out``.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections import defaultdict
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import calibration_sets as cal  # noqa: E402


def run(seeds: int, out: Path, only: list[str] | None = None, real: bool = False) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(out / "runs.jsonl", "w") as log:
        for seed in range(seeds):
            for cs in cal.SETS + (cal.REAL_SETS if real and seed == 0 else []):  # real text: one run each
                if only and not any(o in cs.name for o in only):
                    continue
                with tempfile.TemporaryDirectory(prefix="calibration-") as tmp:
                    o = cal.run_set(cs, Path(tmp), seed)
                row = {"set": cs.name, "clean": cs.clean, "real": cs in cal.REAL_SETS, "seed": seed, "status": o.status, "scope": o.scope,
                       "cpu_seconds": o.cpu_seconds, "problems": cal.problems(cs, o),
                       "expect": [e.rule for e in cs.expect], "allowed": list(cs.allowed),
                       "found": [e.rule for e in cs.expect if not cal.missed(e, o)],
                       "findings": [{k: f.get(k) for k in ("severity", "kind", "chapter", "effect", "title",
                                                         "folded_into")} for f in o.expanded()]}
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                print(f"seed {seed} {cs.name}: {o.status}, {len(row['problems'])} problem(s), {o.cpu_seconds:.1f} s",
                      flush=True)
    return rows


def table(rows: list[dict], seeds: int) -> str:
    """The markdown table: one row per rule."""
    rules = sorted({e for r in rows for e in r["expect"]} | {f"{f['chapter']}: {f['effect']}" for r in rows
                                                             for f in r["findings"]})
    real = [r for r in rows if r.get("real")]
    rows = [r for r in rows if not r.get("real")]
    clean = [r for r in rows if r["clean"]]
    fired = defaultdict(lambda: [0, 0])     # rule -> [clean runs fired >= concerning, clean runs with a note]
    found, planted_runs, beside = defaultdict(int), defaultdict(int), defaultdict(int)
    for r in clean:
        for rule in {f"{f['chapter']}: {f['effect']}" for f in r["findings"] if f["severity"] in cal.FLAGGED}:
            fired[rule][0] += 1
        for rule in {f"{f['chapter']}: {f['effect']}" for f in r["findings"] if f["severity"] == "note"}:
            fired[rule][1] += 1
    planted = [r for r in rows if not r["clean"]]
    for r in planted:
        for rule in r["expect"]:
            planted_runs[rule] += 1
            found[rule] += rule in r["found"]
        for rule in {f"{f['chapter']}: {f['effect']}" for f in r["findings"] if f["severity"] in cal.FLAGGED}:
            if rule not in r["expect"]:
                beside[rule] += 1
    kinds = {f"{f['chapter']}: {f['effect']}": f["kind"] for r in rows for f in r["findings"]}
    kinds |= {e.rule: e.kind for cs in cal.SETS for e in cs.expect}
    n_clean, n_planted = len(clean), len(planted)
    lines = ["| rule (chapter: effect) | kind | fires on clean sets (≥ concerning) | note on clean sets | found on its "
             "planted sets | fires beside other planted problems |", "|---|---|---|---|---|---|"]
    for rule in rules:
        runs = planted_runs.get(rule, 0)
        lines.append(f"| {rule} | {kinds.get(rule, '')} | {_rate(fired[rule][0], n_clean)} | "
                     f"{_rate(fired[rule][1], n_clean)} | {_rate(found[rule], runs) if runs else '—'} | "
                     f"{_rate(beside[rule], n_planted)} |")
    sets = len({r['set'] for r in rows})
    cpu = sum(r["cpu_seconds"] for r in rows)
    head = (f"{sets} sets ({len({r['set'] for r in clean})} clean, {len({r['set'] for r in planted})} planted) × "
            f"{seeds} seeds = {len(rows)} runs, {cpu / 60:.0f} CPU minutes; {date.today().isoformat()}, "
            f"{platform.machine()} {platform.python_version()}, `python benchmarks/calibration.py --seeds {seeds}`.")
    text = head + "\n\n" + "\n".join(lines) + "\n"
    for r in real:  # the packaged MiniLM on real text: its status and findings
        text += (f"\n**{r['set']}**: status {r['status']}" + "".join(
            f"\n- {f['severity']} ({f['kind']}) {f['chapter']}: {f['title']}" for f in r["findings"]) + "\n")
    return text


def _rate(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f} %)" if n else "—"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10, help="seeds per set (default 10)")
    p.add_argument("--out", type=Path, default=Path("calibration-out"), help="folder for runs.jsonl and table.md")
    p.add_argument("--only", nargs="*", help="only the sets whose name contains one of these")
    p.add_argument("--real", action="store_true", help="also the packaged MiniLM on real text (once each; slow)")
    args = p.parse_args(argv)
    t = time.time()
    rows = run(args.seeds, args.out, args.only, args.real)
    text = table(rows, args.seeds)
    (args.out / "table.md").write_text(text)
    print(text)
    print(f"{time.time() - t:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
