"""The run's shared cosine k-NN graph: computed once, before the chapters that read it, into the prepared cache
(locally, or on the run's Dask cluster), with the all-pairs potential and mutual-proximity ranks of the same
sweep; and the Dask client of a run."""
from __future__ import annotations

import time
from pathlib import Path

from ..chapters.declaration import ChapterSpec, graph_neighbours
from ..chapters.registry import graph_chapters, graph_rescorings
from ..context import cache_folder
from ..settings import ChapterSettings


def shared_graph(es, settings: ChapterSettings, cache: Path, ready: list[ChapterSpec], client=None,
                 on_lost=None) -> dict | None:
    """Compute the set's cosine k-NN graph into the prepared cache when a chapter that reads it will run
    (exact mode; :func:`~embeval_report.chapters.declaration.graph_neighbours`: k + 1 neighbours for the k option),
    so chapters running side by side share one computation. The same sweep sums the all-pairs potential
    (uniformity) and ranks by every re-scoring a chapter that will run declares (``ChapterSpec.graph_rescored``: the
    hubness chapter's mutual proximity, and its CSLS where the sweep ranks it itself: r from the sweep's own cosine
    graph, :class:`~embeval_report.kernels.rescoring.SweptCsls`). Returns the cosine graph's cache event plus the
    products of the sweep.

    With a Dask ``client`` (``--dask``, ``--scheduler``; exact precision) the cosine graph is computed on the
    cluster (:func:`~embeval_report.kernels.dask_engine.knn_blockwise`, the same lists; the workers read the
    prepared ``vectors.npy`` themselves) and stored in the cache as the local sweep would store it; the
    mutual-proximity graph and the potential still come from a local sweep. A cluster lost meanwhile
    (:class:`~embeval_report.kernels.dask_faults.ClusterLost`) is told to ``on_lost(line)``, and the local sweep
    computes the graph instead."""
    import numpy as np

    from ..kernels.neighbours import fast_recall
    from ..kernels.neighbours import usable_k
    from ..metrics.hubness_reduction import reduced_knn

    if settings.sample_size is not None or not set(graph_chapters()) & {ch.name for ch in ready} or es.n < 3:
        return None
    k = usable_k(int(settings.option("k")), es.n)
    methods = graph_rescorings(ch.name for ch in ready)
    events, started = [], time.perf_counter()
    compute = settings.compute(graph_cache=cache_folder(cache / "neighbours", min_k=graph_neighbours(settings),
                                                        log=events.append),
                               moments_cache=cache_folder(cache / "moments"))
    try:
        with compute:  # the sweep itself runs here, locally (the cluster computes only the cosine graph)
            if client is not None and settings.precision == "exact":
                from ..kernels.dask_faults import ClusterLost

                try:
                    _dask_graph(np.load(cache / "vectors.npy", mmap_mode="r"), k, client)
                except ClusterLost as exc:
                    client = None
                    if on_lost is None:
                        raise
                    on_lost(str(exc))
            graphs = reduced_knn(es.vectors, k, methods, with_cosine=True, neighborhood=k, device=settings.device,
                                 desc="k-NN graph (shared by the chapters)")
            recall = fast_recall(es.vectors)
    finally:
        if settings.device == "cuda":  # leave the GPU's memory to the chapter kernels
            import torch

            torch.cuda.empty_cache()
    cosine = [e for e in events if e["metric"] in ("cosine", "cosine-fast")]
    if client is not None and cosine and settings.precision == "exact":  # the cluster's event, not the cache read
        cosine = [cosine[0] | {"engine": "dask"}]
    swept = {"potential"} if settings.precision == "exact" or methods else set()
    products = sorted({e["metric"] for e in events} | swept | ({"csls"} if "csls" in graphs else set()))
    if client is not None and settings.precision == "exact" and not methods:  # no local sweep ran: no potential
        products = [p for p in products if p != "potential"]
    seconds = round(time.perf_counter() - started, 2)
    return (cosine[-1] | {"products": products, "seconds": seconds}
            | ({"recall": recall[0], "recall_queries": recall[1]} if recall else {}) if cosine else None)


def _dask_graph(vectors, k: int, client) -> None:
    """The cosine k-NN graph of ``vectors`` computed on the Dask cluster into the graph cache in use (the
    same key, k and arrays as :func:`~embeval_report.kernels.neighbours.self_sweep` stores).

    ``vectors``: the prepared float32 memory map, whose row blocks the workers read from its file (a task
    carries the path, not the rows); only when a worker cannot open that file are the rows sent instead, one
    block of :data:`~embeval_report.kernels.dask_engine.BLOCK_ROWS` rows read and sent at a time (this process
    never holds a copy of the set)."""
    from contextlib import nullcontext

    import numpy as np

    from ..kernels.dask_engine import BLOCK_ROWS, FileRows, knn_blockwise, readable, shared
    from ..kernels.device import as_numpy
    from ..kernels.graph_cache import cached_products

    X = as_numpy(vectors)
    rows = FileRows.of(X)
    sent = nullcontext()
    if rows is None or not readable(rows, client):
        if len(X) > BLOCK_ROWS:  # the blocks the workers would have read, sent from here one at a time
            sent = shared(X, client=client, rows=BLOCK_ROWS)
        else:  # one block: it travels in the graph
            X = np.array(X, dtype=np.float32)
    with sent:
        cached_products(X, {"cosine": k}, True,
                        lambda missing: {"cosine": knn_blockwise(X, missing["cosine"], client=client)})


def dask_client(engine: str, scheduler: str | None, workers: int):
    """``(client, run_info entry)`` of the engine: no client for ``"local"``, a Dask client for ``"dask"``."""
    if engine == "local" and scheduler is None:
        return None, {"name": "local"}
    from ..kernels.dask_engine import connect, worker_count

    client = connect(scheduler, workers)
    return client, {"name": "dask", "scheduler": scheduler or "LocalCluster", "workers": worker_count(client)}


def cluster_lost(line: str, engine_info: dict, params: dict, settings: ChapterSettings) -> None:
    """The run's Dask cluster was lost (``line`` names it and the cause) while the runner used it: said once, the
    run goes on locally (every chapter's passes in its own process: no chapter waits for a scheduler that is gone)
    and ``run.json``'s engine records it, which the Summary states."""
    from ..errors import notice

    notice(f"{line}; the run goes on without it: the shared k-NN graph and every later pass are computed locally")
    engine_info.update(lost=line, fallback="local")
    params["settings"] = settings.to_params()


def close_client(client) -> None:
    """Close the run's Dask client (and its LocalCluster); one whose scheduler is gone is let go."""
    from contextlib import suppress

    with suppress(Exception):
        client.close(timeout=10)


def cluster_check(client, engine_info: dict, params: dict, settings: ChapterSettings):
    """What the runner calls before each chapter: a cluster whose scheduler no longer answers this run's client
    (its status leaves "running" within a heartbeat) is lost (:func:`cluster_lost`), so that no later chapter
    waits for it."""
    address = client.scheduler.address

    def check() -> None:
        if "lost" not in engine_info and client.status != "running":
            cluster_lost(f"the Dask cluster at {address} is gone: its scheduler stopped answering (client "
                         f"{client.status})", engine_info, params, settings)
    return check
