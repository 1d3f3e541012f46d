"""Every side-data field of a manifest, loaded and validated in one place before any chapter runs.

:data:`LOADERS` maps each manifest field to the function that reads it; :func:`load_side_data`
runs them in that order (``negatives`` after ``test_edges``, which it is checked against), so a
bad file stops the run with exit status 2 and one line naming the file, row and field, before
any chapter starts. A chapter reads the result through :class:`SideData` (``ctx.side.edges``).

Adding a side-data field: its schema entry in :data:`embeval_report.io.manifest.MANIFEST_FIELDS`,
one reader, one line here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


from .annotations import read_annotations, read_level
from .anomaly_scores import load_anomaly_scores
from .association_tests import read_association_tests, read_fairness_spec
from ..errors import InputError
from .embedding_set import EmbeddingSet
from .graph import Negatives, field_label, read_edges, read_negatives, read_score
from .monitor_history import read_history
from .interactions import load_interactions, read_id_list
from .pairs import read_positive_pairs
from .qrels import read_qrels
from .queries import load_queries
from .runs import load_runs, load_tranches, read_vocabularies
from .snapshots import load_snapshots
from .training_log import read_training_log
from .words import read_analogies, read_word_pairs



def checked_run(log, run: str | None):
    """``log`` after checking that the manifest's ``training_run`` (when given) names one of its runs."""
    if run is not None and str(run) not in log.runs:
        raise InputError(f"training_run: {str(run)!r} is not a run of the training log (its runs: "
                         f"{', '.join(map(str, log.runs[:10]))}{' …' if len(log.runs) > 10 else ''})")
    return log


def evaluated_run(log, run: str | None) -> str | None:
    """The run of ``log`` that produced the evaluated vectors: the manifest's ``training_run``, or its only run."""
    return str(run) if run is not None else (str(log.runs[0]) if len(log.runs) == 1 else None)

def _negatives(es: EmbeddingSet, path: str, side: dict) -> Negatives:
    test, negs = read_negatives(path, es.ids, side.get("test_edges"), label=field_label(path, "negatives"))
    return Negatives(test, negs, Path(path).name)


#: manifest field -> loader(es, value, loaded so far); run in this order
LOADERS: dict[str, Callable[[EmbeddingSet, Any, dict], Any]] = {
    "positive_pairs": lambda es, v, _: read_positive_pairs(v, es.ids),
    "word_pairs": lambda es, v, _: read_word_pairs(v),
    "analogies": lambda es, v, _: read_analogies(v),
    "runs": lambda es, v, _: load_runs(es, v),
    "tranches": lambda es, v, _: load_tranches(es, v),
    "vocabularies": lambda es, v, _: read_vocabularies(es, v),
    "snapshots": lambda es, v, _: load_snapshots(es, v),
    "edges": lambda es, v, _: read_edges(v, es.ids, label=field_label(v, "edges")),
    "test_edges": lambda es, v, _: read_edges(v, es.ids, label=field_label(v, "test_edges")),
    "negatives": _negatives,
    "score": lambda es, v, _: read_score(v),
    "queries": lambda es, v, _: load_queries(v, es.d),
    "qrels": lambda es, v, side: read_qrels(v, query_ids=side["queries"].ids if "queries" in side else es.ids,
                                            doc_ids=es.ids, label=f"qrels: {Path(v).name}"),
    "annotation_level": lambda es, v, _: read_level(v),
    "annotations": lambda es, v, side: read_annotations(
        v, level=side.get("annotation_level"), ids=es.ids, query_ids=side["queries"].ids if "queries" in side else None,
        label=f"annotations: {Path(v).name}"),
    "exclude_self": lambda es, v, _: bool(v),
    "training_log": lambda es, v, _: checked_run(read_training_log(v, label=f"training_log: {Path(v).name}"),
                                                 es.fields.get("training_run")),
    "monitor_history": lambda es, v, _: read_history(v),
    "anomaly_scores": lambda es, v, _: load_anomaly_scores(es, v),
    "fairness": lambda es, v, _: read_fairness_spec(es, v),
    "association_tests": lambda es, v, _: read_association_tests(v, label=field_label(v, "association_tests")),
    "users": lambda es, v, _: read_id_list(v, es.ids, label=field_label(v, "users")),
    "items": lambda es, v, _: read_id_list(v, es.ids, label=field_label(v, "items")),
    "interactions": lambda es, v, side: load_interactions(es, v, side, "interactions"),
    "test_interactions": lambda es, v, side: load_interactions(es, v, side, "test_interactions"),
}


class SideData:
    """The loaded side data of a set: ``side.edges``, ``side.runs``, ... (``None`` when absent).

    Backed by a mapping, or by the folder the runner's prepared cache writes (:meth:`save`): one entry per
    field in a format that cannot run code when read (:mod:`.safe_store`), each read on first use, so a chapter
    loads only what it needs. A damaged entry is said in one line and read again from the validated source.
    """

    def __init__(self, values: dict | None = None, folder: Path | None = None, present=()):
        self._values = dict(values or {})
        self._folder = folder
        self._present = set(present) | set(self._values)

    def __contains__(self, name: str) -> bool:
        return name in self._present

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in LOADERS:
            raise AttributeError(f"no side-data field {name!r}; known: {', '.join(LOADERS)}")
        if name not in self._values:
            self._values[name] = self._read(name) if name in self._present else None
        return self._values[name]

    def get(self, name: str, default=None):
        return getattr(self, name) if name in self._present else default

    def __getitem__(self, name: str):
        if name not in self._present:
            raise KeyError(name)
        return getattr(self, name)

    def _read(self, name: str):
        from .safe_store import load_value

        try:
            return load_value(self._folder / name)
        except Exception as exc:  # a damaged entry (truncated, edited, a disk error): read the source again
            from ..errors import notice
            from .files import one_line
            from .prepared import load_prepared

            es = load_prepared(self._folder.parent)
            notice(f"prepared cache: side data '{name}' ({self._folder / name}) is unreadable ({one_line(exc)}); "
                   f"read again from {es.fields[name]}")
            return LOADERS[name](es, es.fields[name], self)

    def fields(self) -> list[str]:
        """The fields present, in loading order."""
        return [f for f in LOADERS if f in self._present]

    def save(self, folder: Path) -> None:
        """Write one entry per present field into ``folder`` (see :meth:`open` and :mod:`.safe_store`)."""
        from .safe_store import save_value

        folder.mkdir(parents=True, exist_ok=True)
        for name in self.fields():
            save_value(getattr(self, name), folder / name)

    @classmethod
    def open(cls, folder: Path) -> "SideData":
        """The side data saved in ``folder`` (inside a prepared cache), read lazily field by field."""
        return cls(folder=folder, present=[p.name for p in folder.iterdir() if p.name in LOADERS and p.is_dir()])


def load_side_data(es: EmbeddingSet, *, progress: Callable[[str], None] | None = None,
                   fields=None) -> SideData:
    """Read and validate every side-data field of ``es`` (raises :class:`~embeval_report.errors.InputError`);
    ``fields``: only these (in the loaders' order, e.g. ``("edges", "test_edges", "negatives")``)."""
    loaded: dict[str, Any] = {}
    for name, loader in LOADERS.items():
        if name in es.fields and (fields is None or name in fields):
            if progress:
                progress(name)
            loaded[name] = loader(es, es.fields[name], loaded)
    return SideData(loaded)
