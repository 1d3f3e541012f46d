"""A hostile copy of the demo set (issue 40): every string a user controls carries markup of every output.

:func:`write_hostile_set` writes the demo's side data at a reduced size (the demo world's defaults shrunk while it
is written, then restored) and renames everything a user names: ids, metadata columns and values, snapshot, run,
tranche, vocabulary and batch names, the anomaly-score and fairness-attribute columns, monitoring history rules,
analogy sections, association tests, raters, relations, the set's and profile's names, and the file names of the
runs and snapshots. Each carries HTML, Markdown, LaTeX / mathtext, Typst payloads and bidi characters.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import yaml

#: payloads of the names (spaces allowed)
HTML_IMG = "<img src=x onerror=alert(1)>"
HTML_LINK = '<a href="javascript:alert(1)">l</a>'
MD_LINK = "[m](javascript:alert(1))"
TYPST_EVAL = '#eval("1+1")'
TYPST_LINK = '#link("javascript:alert(1)")[t]'
TYPST_LOOP = "#while true {}"
DOLLARS = "run_$LR_$SEED"
LATEX = r"$\x$"
BIDI = "\u202egnp.exe\u202c"
NAME = f"{HTML_IMG} {HTML_LINK} {MD_LINK} *e* `c` {LATEX} {DOLLARS} {TYPST_EVAL} {TYPST_LINK} {TYPST_LOOP} {BIDI}"
#: payloads of ids and of names in whitespace-separated files (no space, comma or quote)
ID_PAYLOADS = ("<img/src=x/onerror=alert(1)>", "[i](javascript:alert(1))", "_$LR_$SEED", r"$\x$", "#eval(1)",
               "*s*`k`", "\u202etxt\u202c", "<svg/onload=alert(1)>")
#: what report.pdf shows of :data:`NAME` somewhere: the payloads as text, not as effects
PDF_TEXTS = ("onerror=alert(1)", "#eval(", "run_$LR_$SEED", "#while true")

_ID = re.compile(r"\b(?:user|item|query)_\d{4,5}\b")


def name(i, short: bool = False) -> str:
    """The ``i``-th hostile name (unique): :data:`NAME`, or a shorter form of it."""
    base = f"{HTML_IMG} {MD_LINK} {DOLLARS} {TYPST_LOOP} {BIDI}" if short else NAME
    return f"{base} {i}"


def _id(match: re.Match) -> str:
    old = match.group(0)
    return old + ID_PAYLOADS[int(old.rsplit("_", 1)[1]) % len(ID_PAYLOADS)]


def _small_world(n_users: int, n_items: int, n_queries: int):
    """Shrink the demo world's defaults and the retrieval demo's queries (returns the function that restores
    them)."""
    from embeval_report.demo import retrieval, world

    saved = (world.streaming_world.__wrapped__.__defaults__, world.streaming_embeddings.__defaults__,
             retrieval.demo_side_data.__defaults__)
    world.streaming_world.__wrapped__.__defaults__ = (n_users, n_items, 64)
    world.streaming_embeddings.__defaults__ = (n_users, n_items, 64)
    retrieval.demo_side_data.__defaults__ = (0, n_queries)
    world.streaming_world.cache_clear()

    def restore():
        (world.streaming_world.__wrapped__.__defaults__, world.streaming_embeddings.__defaults__,
         retrieval.demo_side_data.__defaults__) = saved
        world.streaming_world.cache_clear()
    return restore


def write_hostile_set(folder, *, n_users: int = 400, n_items: int = 200, n_queries: int = 100, seed: int = 0) -> Path:
    """The demo set, hostile, in ``folder``; returns its manifest."""
    from embeval_report.demo import write_demo

    folder = Path(folder)
    restore = _small_world(n_users, n_items, n_queries)
    try:
        manifest_path = write_demo(folder, seed=seed)
    finally:
        restore()
    m = yaml.safe_load(manifest_path.read_text())
    m["name"] = name("set")

    # ids everywhere (text files; the parquet files' id columns)
    for p in folder.rglob("*"):
        if p.suffix in (".txt", ".csv", ".tsv", ".jsonl") and p.is_file():
            p.write_text(_ID.sub(_id, p.read_text()))
        elif p.suffix == ".parquet":
            t = pd.read_parquet(p)
            if "id" in t.columns:
                t["id"] = t["id"].astype(str).str.replace(_ID, _id, regex=True)
                t.to_parquet(p, index=False)
    tests = yaml.safe_load((folder / "association_tests.yaml").read_text())
    for i, t in enumerate(tests["tests"]):
        t["name"] = name(f"test {i}", short=True)
        for key in ("targets", "attributes"):
            t[key] = {name(f"{key} {i}.{j}", short=True): [_ID.sub(_id, x) for x in v]
                      for j, v in enumerate(t[key].values())}
    (folder / "association_tests.yaml").write_text(yaml.safe_dump(tests, allow_unicode=True))

    # metadata: the fairness attributes' columns renamed, every text value hostile
    meta = pd.read_csv(folder / "metadata.csv", keep_default_na=False)
    attrs = {a: name(f"attr {a}", short=True) for a in m["fairness"]["attributes"]}
    for col in ("label", "region", "age_band", "title"):
        values = sorted(set(meta[col]) - {""})
        meta[col] = meta[col].map({v: f"{v} {ID_PAYLOADS[k % len(ID_PAYLOADS)]} {BIDI}" for k, v in enumerate(values)}
                                  | {"": ""})
    meta = meta.rename(columns=attrs)
    meta.to_csv(folder / "metadata.csv", index=False)
    m["fairness"]["attributes"] = list(attrs.values())
    q = pd.read_csv(folder / "query_metadata.csv")
    q["group"] = q["group"].map(lambda g: f"{g} {HTML_IMG} {DOLLARS}")
    q.to_csv(folder / "query_metadata.csv", index=False)

    scores = pd.read_csv(folder / "anomaly_scores.csv")
    scores.rename(columns={c: name(f"score {c}", short=True) for c in scores.columns if c != "id"}) \
        .to_csv(folder / "anomaly_scores.csv", index=False)
    ann = pd.read_csv(folder / "annotations.csv")
    ann["rater"] = ann["rater"].map(lambda r: f"{r} {HTML_IMG} {DOLLARS} {BIDI}")
    ann.to_csv(folder / "annotations.csv", index=False)
    edges = pd.read_csv(folder / "edges.csv")
    edges["relation"] = edges["relation"].map(lambda r: f"{r} {MD_LINK} {DOLLARS}")
    edges.to_csv(folder / "edges.csv", index=False)
    log = pd.read_csv(folder / "training_log.csv")
    log["run"] = log["run"].map(lambda r: f"{r} {HTML_IMG} {DOLLARS} {TYPST_EVAL}")
    log.to_csv(folder / "training_log.csv", index=False)
    if m.get("training_run"):  # the log's run the vectors came from, named as the log now names it
        m["training_run"] = f"{m['training_run']} {HTML_IMG} {DOLLARS} {TYPST_EVAL}"
    analogies = folder / "analogies.txt"
    analogies.write_text(re.sub(r"^: (.*)$", lambda mm: f": {mm.group(1)} {HTML_IMG} {DOLLARS}", analogies.read_text(),
                                flags=re.M))

    # named side data: runs and snapshots under hostile file names, tranches, vocabularies
    runs = []
    for i, r in enumerate(m["runs"]):
        src = folder / r
        dst = src.with_name(f"run {i} {HTML_IMG} {DOLLARS} {BIDI}{src.suffix}")
        src.rename(dst)
        runs.append(str(dst.relative_to(folder)))
    renamed = dict(zip(m["runs"], runs))
    m["runs"] = runs
    for t in m["tranches"]:
        t["name"] = name(f"tranche {t['name']}", short=True)
        t["run"] = f"{t['run']} {HTML_IMG} {DOLLARS}"
        t["vectors"] = renamed.get(t["vectors"], t["vectors"])
    for v in m["vocabularies"]:
        v["name"] = name(f"vocabulary {v['name']}", short=True)
    batch_names = {}
    for s in m["snapshots"]:
        src = folder / s["vectors"]
        dst = src.with_name(f"snapshot {s['name']} {HTML_IMG} {DOLLARS}.parquet")
        src.rename(dst)
        batch_names[s["vectors"]] = dst.name
        s["name"] = name(f"snapshot {s['name']}", short=True)
        s["vectors"] = dst.name

    # the monitoring history: batch names, file names, rules; the profile's name
    lines = []
    for line in (folder / "monitor_history.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rec["batch"] = name(f"batch {rec['batch']}", short=True)
        rec["file"] = batch_names.get(rec.get("file"), rec.get("file"))
        _hostile_rules(rec)
        lines.append(json.dumps(rec, ensure_ascii=False))
    (folder / "monitor_history.jsonl").write_text("\n".join(lines) + "\n")
    prof = folder / "monitor_profile" / "profile.json"
    if prof.exists():
        doc = json.loads(prof.read_text())
        doc["name"] = name("profile", short=True)
        prof.write_text(json.dumps(doc, ensure_ascii=False, indent=1))

    manifest_path.write_text(yaml.safe_dump(m, sort_keys=False, allow_unicode=True))
    return manifest_path


def _hostile_rules(rec: dict) -> None:
    """Every ``rule`` of a history record (its alerts, its signals) made hostile."""
    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("rule", "label") and isinstance(v, str):
                    x[k] = f"{v} {HTML_IMG} {MD_LINK} {DOLLARS} {TYPST_EVAL}"
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(rec)


def copy_set(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst / "manifest.yaml"
