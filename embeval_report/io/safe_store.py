"""A store for loaded side data that cannot run code when read (the prepared cache's ``side/`` folder).

The prepared cache's path is written into every executed notebook, so whatever reads it must not execute what
it finds there (pickle does). A value is stored as a folder: ``value.json``, a tree of plain JSON with tagged
nodes, beside ``aN.npy`` files for the numeric arrays (read with ``allow_pickle=False``). The encoder is
explicit: it knows

* ``None``, ``bool``, ``int``, ``float`` (NaN and infinities included), ``str``; ``list``, ``tuple``, ``dict``
  (any keys it knows);
* numpy arrays (numeric, boolean, datetime, fixed-width text: ``.npy``; ``object``: element by element) and
  numpy scalars (their dtype and bytes);
* pandas ``DataFrame``, ``Series`` and ``Index`` (``RangeIndex`` and flat indexes), their ``attrs``, with
  numpy, categorical, string, masked (``Int64``, ``boolean``, ...) and time-zone columns; ``pd.NA``, ``NaT``
  and ``Timestamp`` elements;
* the frozen dataclasses of :data:`dataclass_types` (the side-data records), rebuilt field by field without
  calling their ``__init__``.

Anything else is a :class:`TypeError` at save time, so a new side-data type is caught by the round-trip test
of the demo's side data (``tests/test_faults.py``), not at read time. Values come back equal in type, dtype
and every element (``-0.0`` and NaN payloads of float arrays included).
"""
from __future__ import annotations

import dataclasses
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

VALUE_FILE = "value.json"
STORE_VERSION = 1


@cache
def dataclass_types() -> dict[str, type]:
    """The dataclasses a side-data loader returns (by ``module.qualname``): the only classes built when reading."""
    from .monitor_history import MonitorHistory
    from .annotations import Annotations
    from .association_tests import AssociationTest, FairnessSpec, WordSet
    from .embedding_set import MatchedVectors
    from .graph import EdgeList, Negatives
    from .interactions import Interactions, Roles
    from .pairs import PositivePairs
    from .queries import QuerySet
    from .runs import Checkpoint, RunFile, Vocabulary
    from .snapshots import Snapshot
    from .training_log import TrainingLog
    from .words import AnalogyFile, WordPairFile

    types = (Annotations, AssociationTest, FairnessSpec, WordSet, MatchedVectors, EdgeList, Interactions, Roles,
             PositivePairs, QuerySet, Checkpoint, RunFile, Vocabulary, Negatives, Snapshot, TrainingLog, AnalogyFile,
             WordPairFile, MonitorHistory)
    return {_name(t): t for t in types}


def _name(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def save_value(value: Any, folder: str | os.PathLike) -> None:
    """Write ``value`` into the new or empty ``folder`` (see the module docstring); ``value.json`` last, so its
    presence marks a complete entry."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tree = _Encoder(folder).encode(value)
    tmp = folder / (VALUE_FILE + ".tmp")
    tmp.write_text(json.dumps({"version": STORE_VERSION, "value": tree}, allow_nan=True), encoding="utf-8")
    os.replace(tmp, folder / VALUE_FILE)


def load_value(folder: str | os.PathLike) -> Any:
    """Read a value written by :func:`save_value`. Raises ``ValueError``/``OSError`` for a damaged entry."""
    folder = Path(folder)
    doc = json.loads((folder / VALUE_FILE).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("version") != STORE_VERSION:
        raise ValueError(f"{folder / VALUE_FILE}: not a side-data entry of version {STORE_VERSION}")
    return _Decoder(folder).decode(doc["value"])


class _Encoder:
    def __init__(self, folder: Path):
        self.folder, self.count = folder, 0

    def _npy(self, a: np.ndarray) -> dict:
        name = f"a{self.count}.npy"
        self.count += 1
        np.save(self.folder / name, np.ascontiguousarray(a) if a.ndim else a, allow_pickle=False)
        return {"$": "npy", "file": name}

    def encode(self, v: Any) -> Any:
        if v is None or type(v) in (bool, str, int, float):
            return v
        if isinstance(v, np.generic):
            if v.dtype.hasobject:
                raise TypeError(f"cannot store a numpy scalar of dtype {v.dtype}")
            return {"$": "npscalar", "dtype": v.dtype.str, "hex": v.tobytes().hex()}
        if type(v) is list:
            return {"$": "list", "v": [self.encode(x) for x in v]}
        if type(v) is tuple:
            return {"$": "tuple", "v": [self.encode(x) for x in v]}
        if type(v) is dict:
            return {"$": "dict", "k": [self.encode(k) for k in v], "v": [self.encode(x) for x in v.values()]}
        if isinstance(v, np.ndarray):
            return self.array(v)
        if v is pd.NA:
            return {"$": "NA"}
        if v is pd.NaT:
            return {"$": "NaT"}
        if isinstance(v, pd.Timestamp):
            return {"$": "timestamp", "ns": v.as_unit("ns").value, "unit": v.unit, "tz": _tz(v.tz)}
        if isinstance(v, pd.DataFrame):
            return {"$": "frame", "index": self.index(v.index), "columns": self.index(v.columns),
                    "data": [self.values(v.iloc[:, i].array) for i in range(v.shape[1])],
                    "attrs": self.encode(dict(v.attrs))}
        if isinstance(v, pd.Series):
            return {"$": "series", "index": self.index(v.index), "name": self.encode(v.name),
                    "data": self.values(v.array), "attrs": self.encode(dict(v.attrs))}
        if isinstance(v, pd.Index):
            return self.index(v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return self.dataclass(v)
        raise TypeError(f"cannot store a value of type {type(v).__module__}.{type(v).__qualname__} in the side-data "
                        "store; add it to embeval_report.io.safe_store")

    def array(self, a: np.ndarray) -> dict:
        if a.dtype.hasobject:
            if a.dtype != object:
                raise TypeError(f"cannot store a structured array of dtype {a.dtype}")
            return {"$": "objects", "shape": list(a.shape), "v": [self.encode(x) for x in a.ravel(order="C")]}
        if a.dtype.kind == "V":
            raise TypeError(f"cannot store an array of dtype {a.dtype}")
        return self._npy(np.asarray(a))

    def values(self, arr) -> dict:
        """A column's values (``Series.array``/``Index.array``) with their dtype."""
        dtype = arr.dtype
        if isinstance(dtype, np.dtype) or (isinstance(arr, pd.arrays.NumpyExtensionArray)
                                           and not isinstance(dtype, pd.StringDtype)):
            return {"$": "numpy", "v": self.array(arr.to_numpy())}  # object, numbers, datetime64, timedelta64
        if isinstance(dtype, pd.CategoricalDtype):
            return {"$": "categorical", "codes": self.array(np.asarray(arr.codes)),
                    "categories": self.index(dtype.categories), "ordered": bool(dtype.ordered)}
        if isinstance(dtype, pd.StringDtype):
            na = "nan" if dtype.na_value is not pd.NA else "NA"
            items = [None if pd.isna(x) else str(x) for x in np.asarray(arr, dtype=object)]
            return {"$": "string", "storage": dtype.storage, "na": na, "v": items}
        if isinstance(dtype, pd.DatetimeTZDtype):
            return {"$": "datetimetz", "unit": dtype.unit, "tz": _tz(dtype.tz),
                    "i8": self.array(np.asarray(arr.asi8 if hasattr(arr, "asi8") else arr.view("i8")))}
        if isinstance(arr, pd.api.extensions.ExtensionArray) and hasattr(arr, "_mask") and hasattr(arr, "_data"):
            return {"$": "masked", "dtype": str(dtype), "data": self.array(np.asarray(arr._data)),
                    "mask": self.array(np.asarray(arr._mask))}
        raise TypeError(f"cannot store a pandas column of dtype {dtype}; add it to embeval_report.io.safe_store")

    def index(self, ix: pd.Index) -> dict:
        if isinstance(ix, pd.MultiIndex):
            raise TypeError("cannot store a pandas MultiIndex; add it to embeval_report.io.safe_store")
        if type(ix) is pd.RangeIndex:
            return {"$": "range", "start": ix.start, "stop": ix.stop, "step": ix.step, "name": self.encode(ix.name)}
        return {"$": "index", "data": self.values(ix.array), "name": self.encode(ix.name)}

    def dataclass(self, v) -> dict:
        name = _name(type(v))
        if dataclass_types().get(name) is not type(v):
            raise TypeError(f"cannot store a {name}: not one of the side-data types of embeval_report.io.safe_store")
        fields = {f.name: self.encode(getattr(v, f.name)) for f in dataclasses.fields(v)}
        extra = set(getattr(v, "__dict__", {})) - set(fields)
        if extra:
            raise TypeError(f"cannot store a {name} with attributes beyond its fields ({', '.join(sorted(extra))})")
        return {"$": "dataclass", "type": name, "fields": fields}


class _Decoder:
    def __init__(self, folder: Path):
        self.folder = folder

    def decode(self, t: Any) -> Any:
        if not isinstance(t, dict):
            return t
        tag = t["$"]
        if tag == "npscalar":
            return np.frombuffer(bytes.fromhex(t["hex"]), dtype=np.dtype(t["dtype"]))[0]
        if tag == "list":
            return [self.decode(x) for x in t["v"]]
        if tag == "tuple":
            return tuple(self.decode(x) for x in t["v"])
        if tag == "dict":
            return {self.decode(k): self.decode(x) for k, x in zip(t["k"], t["v"], strict=True)}
        if tag in ("npy", "objects"):
            return self.array(t)
        if tag == "NA":
            return pd.NA
        if tag == "NaT":
            return pd.NaT
        if tag == "timestamp":
            return pd.Timestamp(t["ns"], unit="ns", tz=t["tz"]).as_unit(t["unit"])
        if tag == "frame":
            index, columns = self.index(t["index"]), self.index(t["columns"])
            data = {i: self.series(c, index) for i, c in enumerate(t["data"])}
            frame = pd.DataFrame(data, index=index)
            frame.columns = columns
            frame.attrs.update(self.decode(t["attrs"]))
            return frame
        if tag == "series":
            s = self.series(t["data"], self.index(t["index"]))
            s.name = self.decode(t["name"])
            s.attrs.update(self.decode(t["attrs"]))
            return s
        if tag in ("range", "index"):
            return self.index(t)
        if tag == "dataclass":
            cls = dataclass_types().get(t["type"])
            if cls is None:
                raise ValueError(f"unknown side-data type {t['type']!r}")
            obj = object.__new__(cls)  # no __init__/__post_init__: the stored fields as they were
            names = {f.name for f in dataclasses.fields(cls)}
            if set(t["fields"]) != names:
                raise ValueError(f"{t['type']}: stored fields {sorted(t['fields'])} are not {sorted(names)}")
            for k, x in t["fields"].items():
                object.__setattr__(obj, k, self.decode(x))
            return obj
        raise ValueError(f"unknown node {tag!r} in a side-data entry")

    def array(self, t: dict) -> np.ndarray:
        if t["$"] == "npy":
            name = t["file"]
            if "/" in name or "\\" in name or name.startswith("."):
                raise ValueError(f"bad array file name {name!r}")
            return np.load(self.folder / name, allow_pickle=False)
        out = np.empty(len(t["v"]), dtype=object)
        out[:] = [self.decode(x) for x in t["v"]] if t["v"] else []
        return out.reshape(t["shape"])

    def series(self, t: dict, index: pd.Index) -> pd.Series:
        """A column with its own dtype (pandas would infer ``str`` from an object array of text)."""
        values = self.values(t)
        return pd.Series(values, index=index, dtype=values.dtype, copy=False)

    def values(self, t: dict):
        tag = t["$"]
        if tag == "numpy":
            return self.array(t["v"])
        if tag == "categorical":
            dtype = pd.CategoricalDtype(self.index(t["categories"]), ordered=t["ordered"])
            return pd.Categorical.from_codes(self.array(t["codes"]), dtype=dtype)
        if tag == "string":
            dtype = pd.StringDtype(t["storage"], na_value=np.nan if t["na"] == "nan" else pd.NA)
            return pd.array(t["v"], dtype=dtype)
        if tag == "datetimetz":
            utc = pd.DatetimeIndex(self.array(t["i8"]).view(f"M8[{t['unit']}]")).tz_localize("UTC")
            return utc.tz_convert(t["tz"]).array
        if tag == "masked":
            dtype = pd.api.types.pandas_dtype(t["dtype"])
            return dtype.construct_array_type()(self.array(t["data"]), self.array(t["mask"]))
        raise ValueError(f"unknown column node {tag!r} in a side-data entry")

    def index(self, t: dict) -> pd.Index:
        name = self.decode(t["name"])
        if t["$"] == "range":
            return pd.RangeIndex(t["start"], t["stop"], t["step"], name=name)
        values = self.values(t["data"])
        return pd.Index(values, name=name, copy=False, dtype=values.dtype)


def _tz(tz) -> str | None:
    return None if tz is None else str(tz)
