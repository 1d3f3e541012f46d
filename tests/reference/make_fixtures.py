"""Ask the five peer libraries for their values on the shared seeded inputs and write them to peers.json.

Run in the peer venv (README.md): ``.peer-venv/bin/python tests/reference/make_fixtures.py [peer ...]``.
Each ``*_values`` function imports its peer lazily, so the project's tests import this module too: the live
drift checks call these functions when the peer is installed, the CI twins read :func:`fixture` instead.
"""
from __future__ import annotations

import json
import platform
import sys
from importlib import metadata
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``reference`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from reference import inputs  # noqa: E402

FIXTURE = Path(__file__).with_name("peers.json")

#: peer -> the distribution whose version is recorded
DISTRIBUTIONS = {"wefe": "wefe", "irrcac": "irrCAC", "recommenders": "recommenders", "kiez": "kiez",
                 "lightning": "pytorch-lightning"}


def wefe_values() -> dict:
    """WEFE's WEAT statistic and effect size (population sd, WEFE's convention)."""
    from gensim.models import KeyedVectors
    from wefe.metrics import WEAT
    from wefe.query import Query
    from wefe.word_embedding_model import WordEmbeddingModel

    words, V = inputs.weat_case()
    kv = KeyedVectors(V.shape[1])
    kv.add_vectors(words, V)
    sets = {name: words[a:b] for name, (a, b) in inputs.WEAT_SETS.items()}
    q = Query([sets["X"], sets["Y"]], [sets["A"], sets["B"]], ["X", "Y"], ["A", "B"])
    ref = WEAT().run_query(q, WordEmbeddingModel(kv, "random"), return_effect_size=True)
    return {"weat": float(ref["weat"]), "effect_size": float(ref["effect_size"])}


def irrcac_values() -> dict:
    """irrCAC's Gwet AC1 and Krippendorff alpha (nominal) per matrix."""
    import pandas as pd
    from irrCAC.raw import CAC

    out = {}
    for name, M in inputs.agreement_cases().items():
        cats = sorted(set(M[~np.isnan(M)].tolist()))  # irrCAC counts NaN as a category unless told
        ref = CAC(pd.DataFrame(M), categories=cats, digits=10)
        out[name] = {"gwet_ac1": float(ref.gwet()["est"]["coefficient_value"]),
                     "krippendorff_alpha": float(ref.krippendorff()["est"]["coefficient_value"])}
    return out


def recommenders_values() -> dict:
    """Microsoft Recommenders' python_evaluation on the brute-force top-10 lists: ranking metrics at 10, per-user
    serendipity, diversity and novelty, catalogue coverage."""
    import pandas as pd
    from recommenders.evaluation import python_evaluation as pe

    U, V, train, test, top = inputs.recommendation_case()
    true = pd.DataFrame([(u, i, 1.0) for u, t in enumerate(test) for i in t], columns=["userID", "itemID", "rating"])
    pred = pd.DataFrame([(u, int(i), 10.0 - r) for u in range(len(U)) for r, i in enumerate(top[u]) if i >= 0],
                        columns=["userID", "itemID", "prediction"])
    trn = pd.DataFrame([(u, i) for u, t in enumerate(train) for i in t], columns=["userID", "itemID"])
    out = {name: float(getattr(pe, f"{name}_at_k")(true, pred, k=10)) for name in ("precision", "recall", "ndcg", "map")}
    reco = pred[["userID", "itemID"]].assign(
        relevance=[float(i in test[u]) for u, i in pred[["userID", "itemID"]].itertuples(index=False)])
    feats = pd.DataFrame({"itemID": np.arange(len(V)), "features": list(V.astype(float))})
    ser = pe.user_serendipity(trn, reco, item_feature_df=feats, item_sim_measure="item_feature_vector",
                              col_relevance="relevance")
    div = pe.user_diversity(trn, reco, item_feature_df=feats, item_sim_measure="item_feature_vector")
    nov = pe.historical_item_novelty(trn, reco).set_index("itemID")["item_novelty"]
    per_user = pd.Series(nov.reindex(reco["itemID"]).to_numpy()).groupby(reco["userID"].to_numpy()).mean()
    out.update(user_serendipity=ser.sort_values("userID")["user_serendipity"].astype(float).tolist(),
               user_diversity=div.sort_values("userID")["user_diversity"].astype(float).tolist(),
               user_novelty=per_user.sort_index().astype(float).tolist(),
               catalog_coverage=float(pe.catalog_coverage(trn, reco)))
    return out


def kiez_values() -> dict:
    """kiez's port of scikit-hubness's ``Hubness.score`` measures on the brute-force 10-NN lists."""
    from kiez.analysis import hubness_score

    X, nbrs = inputs.hubness_case()
    ref = hubness_score(nbrs, len(X), k=inputs.HUBNESS_K, return_value="all")
    out = {name: float(ref[name]) for name in ("k_skewness", "robinhood", "gini", "hub_occurrence",
                                                 "antihub_occurrence")}
    out["hubs"] = sorted(int(i) for i in ref["hubs"])
    return out


def lightning_values() -> dict:
    """Lightning's EarlyStopping over the grid: per series, the first step whose check says stop (None: never)
    and its best score then, in the order of :data:`inputs.EARLY_STOPPING_GRID`."""
    import torch
    try:
        from lightning.pytorch.callbacks import EarlyStopping
    except ImportError:
        from pytorch_lightning.callbacks import EarlyStopping

    out = {}
    for name, x in inputs.early_stopping_series().items():
        rows = []
        for mode, min_delta, patience in inputs.EARLY_STOPPING_GRID:
            series = x if mode == "min" else -x
            cb = EarlyStopping(monitor="v", min_delta=min_delta, patience=patience, mode=mode)
            stop = next((i for i, v in enumerate(series) if cb._evaluate_stopping_criteria(torch.tensor(v))[0]),
                        None)
            rows.append({"stop": stop, "best": float(cb.best_score)})
        out[name] = rows
    return out


PEERS = {"wefe": wefe_values, "irrcac": irrcac_values, "recommenders": recommenders_values, "kiez": kiez_values,
         "lightning": lightning_values}


def fixture(peer: str) -> dict:
    """The stored values of ``peer`` (for the CI twins); an AssertionError when the inputs built here are no longer
    the ones the values were computed on (rerun make_fixtures.py)."""
    entry = json.loads(FIXTURE.read_text())["peers"][peer]
    now = inputs.digest(peer)
    assert entry["inputs"] == now, (f"{FIXTURE.name}: {peer}'s inputs changed (fixture {entry['inputs']}, now {now});"
                                    " rerun tests/reference/make_fixtures.py in the peer venv")
    return entry["values"]


def main(argv: list[str]) -> int:
    chosen = argv or list(PEERS)
    unknown = sorted(set(chosen) - set(PEERS))
    if unknown:
        print(f"make_fixtures.py: unknown peer {', '.join(unknown)} (expected some of {', '.join(PEERS)})")
        return 2
    data = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {"peers": {}}
    for peer in chosen:
        data["peers"][peer] = {"version": metadata.version(DISTRIBUTIONS[peer]), "inputs": inputs.digest(peer),
                               "values": PEERS[peer]()}
        print(f"{peer} {data['peers'][peer]['version']}: inputs {data['peers'][peer]['inputs']}")
    data["environment"] = {"python": platform.python_version(),
                           **{d: metadata.version(d) for d in ("numpy", "scipy", "pandas", "torch", "gensim")}}
    data["peers"] = dict(sorted(data["peers"].items()))
    FIXTURE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
