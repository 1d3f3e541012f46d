"""The model swap section of every comparison: what switching from model A's vectors to model B's changes for the
users of an index built on them (:mod:`embeval_report.metrics.swap` computes it).

Each model's set is read again from its report (a model run's kept embeddings, else the input its run.json
records); the ids both sets hold are paired row for row (their dimensions may differ). For the first model (the
one in production) against each later one, :func:`swap_section` gives:

* the overlap of each shared id's top-k cosine neighbours under A and under B (of every shared id up to
  :data:`SWAP_IDS`, beyond that of a seeded sample of them, their neighbours sought among every shared id): its
  distribution and the share of ids whose top-10 changes by more than half;
* with queries (query vectors under both models, or queries that are ids of the set), the share of queries whose
  top-k results change, and, from the retrieval chapter's per-query values, which of them gain and which lose;
* the similarity scale: quantiles of A's and B's cosines over the same seeded pairs of shared ids, and the
  threshold of B that keeps the share of pairs a threshold of A keeps (0.7 in A is t in B).

Memory: the shared rows of both models once, and the chunked k-NN passes' tiles; never an n × n matrix.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..chapters.recorder import json_safe
from ..errors import InputError
from ..metrics import swap as ms

#: neighbours compared per id (the "top-10")
SWAP_K = 10
#: ids whose neighbour lists are compared at most (a seeded sample of the shared ids beyond)
SWAP_IDS = 20_000
#: per-query values a query gains or loses on, in this order of preference (the retrieval chapter's units)
QUERY_METRICS = ("ndcg_at_10", "mrr", "map")
#: queries listed as the largest gains and losses
LISTED = 5


def model_set(report):
    """The embedding set of a model's report folder (:class:`~.pairing.ModelReport`): a model run's kept embeddings
    (``embeddings/manifest.yaml``), else the input run.json records, read again."""
    from ..io import load_source
    from ..io.policy import current_policy, input_policy
    from .explore import report_source

    kept = Path(report.folder) / "embeddings" / "manifest.yaml"
    source = kept if kept.is_file() else report_source(report.folder, report.run)
    with input_policy(allow_outside=["/"], trust_pickles=current_policy().trust_pickles):
        return load_source(source)


def _queries(es):
    """The set's query vectors (its ``queries`` field) or None."""
    if "queries" not in es.fields:
        return None
    from ..io.side_data import load_side_data

    return load_side_data(es, fields=("queries",))["queries"]


def _excludes_self(es) -> bool:
    """Whether the set's retrieval leaves a query's own document out of its results (``exclude_self``)."""
    return bool(es.fields.get("exclude_self"))


def swap_section(A, B, *, k: int = SWAP_K, seed: int = 0, device="auto", sets=None) -> dict:
    """The model swap section of ``A`` → ``B`` (two :class:`~.pairing.ModelReport`; ``sets``: their embedding sets,
    read again when not given): a JSON-ready dict (see the module docstring); ``skipped`` says why there is none."""
    head = {"a": A.name, "b": B.name}
    t0 = time.perf_counter()
    try:
        ea, eb = sets if sets is not None else (model_set(A), model_set(B))
    except (InputError, OSError, ValueError) as exc:
        return {**head, "skipped": f"the models' vectors cannot be read again: {str(exc).splitlines()[0]}"}
    ids_a, ids_b = pd.Index(np.asarray(ea.ids).astype(str)), pd.Index(np.asarray(eb.ids).astype(str))
    shared = ids_a.intersection(ids_b, sort=False)
    if len(shared) < 3:
        return {**head, "shared_ids": len(shared), "skipped": f"{A.name} and {B.name} share {len(shared)} ids: a "
                "neighbour list needs at least 3"}
    ra, rb = ids_a.get_indexer(shared), ids_b.get_indexer(shared)
    XA, XB = _rows(ea.vectors, ra), _rows(eb.vectors, rb)
    rows = None
    if len(shared) > SWAP_IDS:
        rows = np.sort(np.random.default_rng([seed, 43, 1]).choice(len(shared), SWAP_IDS, replace=False))
    nb = ms.neighbour_swap(XA, XB, np.asarray(shared), k=k, rows=rows, device=device)
    summary = nb.summary().iloc[0]
    doc = {**head, "shared_ids": len(shared), "ids_a": len(ids_a), "ids_b": len(ids_b), "d_a": int(XA.shape[1]),
           "d_b": int(XB.shape[1]), "k": nb.k, "ids_compared": len(nb.ids), "sampled": rows is not None,
           "neighbours": {"mean": summary["mean overlap"], "changed_share": nb.changed_share,
                          "quantiles": {c: summary[c] for c in summary.index if c.startswith("q")},
                          "histogram": nb.histogram().to_dict(orient="records")}}
    doc["geometry"] = _geometry(nb, XA, XB, seed=seed)
    doc["queries"] = _query_section(A, B, ea, eb, XA, XB, shared, k=k, device=device)
    scale = ms.similarity_scale(XA, XB, seed=seed, device=device)
    doc["scale"] = {"pairs": scale.pairs, "spearman": scale.spearman,
                    "quantiles": scale.quantiles.to_dict(orient="records"),
                    "thresholds": scale.thresholds.to_dict(orient="records")}
    doc["seconds"] = round(time.perf_counter() - t0, 2)
    return json_safe(doc)


def _skewness(table: pd.DataFrame) -> float:
    """The k-occurrence's skewness (population moments, as :func:`scipy.stats.skew`)."""
    x = table["occurrence"].to_numpy(float)
    sd = x.std()
    return float(((x - x.mean()) ** 3).mean() / sd ** 3) if sd > 0 else math.nan


def _skewness_weighted(table: pd.DataFrame, W: np.ndarray) -> np.ndarray:
    """:func:`_skewness` of the table under each row of unit weights ``W`` (the counts of bootstrap draws)."""
    x = table["occurrence"].to_numpy(float)
    n = W.sum(1)
    m1 = W @ x / n
    m2 = W @ (x * x) / n - m1 ** 2
    m3 = W @ x ** 3 / n - 3 * m1 * (W @ (x * x) / n) + 2 * m1 ** 3
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m2 > 0, m3 / np.abs(m2) ** 1.5, np.nan)


def _geometry(nb, XA, XB, *, seed: int) -> list[dict]:
    """Diagnostics of the shared ids' geometry under A and B, paired over the ids, without a verdict: the mean cosine
    of each id to the others (its mean: the anisotropy, APCS), and with every id's list the k-occurrence's skewness
    (hubness), by a paired bootstrap over the ids."""
    from ..metrics import paired
    from ..stats import mean_ci

    ca, cb = ms.mean_cosines(XA), ms.mean_cosines(XB)
    lo, hi, how = mean_ci(cb - ca, seed=seed, units="shared ids (paired)")
    rows = [{"metric": "apcs", "label": "mean cosine between ids (anisotropy, APCS)", "a": float(ca.mean()),
             "b": float(cb.mean()), "difference": float((cb - ca).mean()), "ci_low": lo, "ci_high": hi,
             "n": len(ca), "method": how}]
    if nb.occurrence_a is not None:
        ta, tb = (pd.DataFrame({"occurrence": o}) for o in (nb.occurrence_a, nb.occurrence_b))
        r, _ = paired.paired_aggregate(_skewness, ta, tb, direction="lower", seed=seed, units="ids",
                                       boot=_skewness_weighted)
        rows.append({"metric": "k_occurrence_skewness", "label": f"skewness of the {nb.k}-occurrence (hubness)",
                     "a": r.mean_a, "b": r.mean_b, "difference": r.diff, "ci_low": r.ci_low, "ci_high": r.ci_high,
                     "n": r.n, "method": r.ci_method})
    return rows


def _rows(vectors, rows: np.ndarray) -> np.ndarray:
    """The given rows of a (possibly memory-mapped) vectors array as float32, read in increasing order; every row in
    order is the array itself (a memory map stays one: no copy of the set)."""
    if len(rows) == len(vectors) and getattr(vectors, "dtype", None) == np.float32 and \
            np.array_equal(rows, np.arange(len(rows))):
        return vectors
    order = np.argsort(rows, kind="stable")
    out = np.empty((len(rows), vectors.shape[1]), np.float32)
    out[order] = np.asarray(vectors[rows[order]], dtype=np.float32)
    return out


def _query_section(A, B, ea, eb, XA, XB, shared, *, k: int, device) -> dict | None:
    """The queries' top-k results under A and B (among the shared ids), and who gains or loses."""
    qa, qb = _queries(ea), _queries(eb)
    if qa is not None and qb is not None:
        ia, ib = pd.Index(np.asarray(qa.ids).astype(str)), pd.Index(np.asarray(qb.ids).astype(str))
        common = ia.intersection(ib, sort=False)
        if not len(common):
            return None
        own = pd.Index(shared).get_indexer(common) if _excludes_self(ea) or _excludes_self(eb) else None
        table = ms.query_swap(np.asarray(qa.vectors)[ia.get_indexer(common)], XA,
                              np.asarray(qb.vectors)[ib.get_indexer(common)], XB, np.asarray(common), k=k, own=own,
                              device=device)
        source = "query vectors"
    else:  # queries that are ids of the set (judged against the other ids): their own neighbour lists
        units = A.units.get("retrieval")
        if units is None:
            return None
        key = A.records["retrieval"]["info"]["units"]["key"]
        where = pd.Index(shared).get_indexer(units[key].astype(str))
        where = np.unique(where[where >= 0])
        if not len(where):
            return None
        nb = ms.neighbour_swap(XA, XB, np.asarray(shared), k=k, rows=where, device=device)
        table = pd.DataFrame({"query": nb.ids, "overlap": nb.overlap})
        source = "ids of the set"
    out = {"source": source, "queries": len(table), "k": min(k, len(XA)),
           "changed_share": float((table["overlap"] < 1).mean()),
           "changed_by_more_than_half": float((table["overlap"] < ms.HALF).mean()),
           "mean_overlap": float(table["overlap"].mean())}
    return out | _gains(A, B, table)


def _gains(A, B, table: pd.DataFrame) -> dict:
    """Of the queries whose results change, how many gain, lose or keep their retrieval value (the first of
    :data:`QUERY_METRICS` both reports recorded per query), and the largest gains and losses."""
    ua, ub = A.units.get("retrieval"), B.units.get("retrieval")
    if ua is None or ub is None:
        return {}
    key = A.records["retrieval"]["info"]["units"]["key"]
    metric = next((m for m in QUERY_METRICS if m in ua and m in ub), None)
    if metric is None:
        return {}
    va, vb = _per_query(ua, key, metric), _per_query(ub, key, metric)
    changed = table[table["overlap"] < 1].assign(query=lambda t: t["query"].astype(str))
    changed = changed[changed["query"].isin(va.index) & changed["query"].isin(vb.index)]
    delta = vb.reindex(changed["query"]).to_numpy(float) - va.reindex(changed["query"]).to_numpy(float)
    changed = changed.assign(a=va.reindex(changed["query"]).to_numpy(float),
                             b=vb.reindex(changed["query"]).to_numpy(float), change=delta)
    changed = changed[np.isfinite(delta)]
    listed = ["query", "overlap", "a", "b", "change"]
    return {"metric": metric, "changed_scored": len(changed), "gain": int((changed["change"] > 1e-12).sum()),
            "lose": int((changed["change"] < -1e-12).sum()), "same": int((changed["change"].abs() <= 1e-12).sum()),
            "gainers": changed[changed["change"] > 1e-12].nlargest(LISTED, "change")[listed].to_dict(orient="records"),
            "losers": changed[changed["change"] < -1e-12].nsmallest(LISTED, "change")[listed].to_dict(orient="records")}


def _per_query(units: pd.DataFrame, key: str, metric: str) -> pd.Series:
    """A retrieval unit table's ``metric`` per query id (as text)."""
    units = units.drop_duplicates(key)
    return pd.Series(pd.to_numeric(units[metric], errors="coerce").to_numpy(float),
                     index=units[key].astype(str).to_numpy())


def swap_sections(reports, *, seed: int = 0, device="auto", progress=None) -> list[dict]:
    """The first model against each later one (:func:`swap_section`), each set read once."""
    sets: dict = {}

    def read(r):
        if r.name not in sets:
            try:
                sets[r.name] = model_set(r)
            except (InputError, OSError, ValueError) as exc:
                sets[r.name] = exc
        return sets[r.name]

    out = []
    for B in reports[1:]:
        A = reports[0]
        if progress:
            progress(f"model swap: {A.name} → {B.name}")
        pair = (read(A), read(B))
        bad = next((x for x in pair if isinstance(x, Exception)), None)
        if bad is not None:
            out.append({"a": A.name, "b": B.name,
                        "skipped": f"the models' vectors cannot be read again: {str(bad).splitlines()[0]}"})
            continue
        try:
            out.append(swap_section(A, B, seed=seed, device=device, sets=pair))
        except ValueError as exc:  # a degenerate pair of sets: the comparison itself still stands
            out.append({"a": A.name, "b": B.name, "skipped": str(exc).splitlines()[0]})
    return out


def swap_lines(sections: list[dict]) -> list[str]:
    """What the terminal prints of each swap section (one or three lines)."""
    lines = []
    for s in sections:
        if s.get("skipped"):
            lines.append(f"model swap {s['a']} → {s['b']}: not computed ({s['skipped']})")
            continue
        nb = s["neighbours"]
        lines.append(f"model swap {s['a']} → {s['b']}: {s['ids_compared']:,} of {s['shared_ids']:,} shared ids; "
                     f"top-{s['k']} neighbour overlap median {nb['quantiles'].get('q50', math.nan):.2f}, "
                     f"{100 * nb['changed_share']:.1f} % of lists change by more than half")
        q = s.get("queries")
        if q:
            gains = (f"; of those scored, {q['gain']} gain and {q['lose']} lose {q['metric']}"
                     if q.get("metric") else "")
            lines.append(f"  queries: {100 * q['changed_share']:.1f} % of {q['queries']:,} change their top-{q['k']}"
                         f"{gains}")
        carried = [t for t in s["scale"]["thresholds"] if t.get("threshold in A") == 0.7]
        if carried and carried[0].get("same share in B") is not None:
            t = carried[0]
            lines.append(f"  similarity scale: cosine 0.7 in {s['a']} keeps {100 * t['pairs at or above']:.2g} % of "
                         f"pairs; the same share in {s['b']} is at {t['same share in B']:.3f}")
    return lines
