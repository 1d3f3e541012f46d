"""Bounds on what an input may declare before it is read: YAML aliases, and the size a compressed file expands to.

* **YAML** (manifests, association tests, every YAML a user gives) is read by :func:`load_yaml` only: the safe
  loader (plain data, no Python objects), and aliases (``&anchor`` / ``*anchor``) may not make the document
  larger than :data:`ALIAS_EXPANSION` nodes beyond the nodes written; a nested-alias "billion laughs" file is one
  short line, found from the node graph before any value is built (time and memory of the order of the file).
* **Compressed containers** are read whole into memory, so the size they declare once decompressed is checked
  against the memory budget (``--memory-budget``, default 4 GiB) from their metadata first: a Parquet file's
  column chunks (:func:`read_parquet`: the larger of the declared uncompressed size and the values' count times
  their width, since a dictionary-encoded column of one repeated value declares almost nothing; strings count
  the length of their statistics' longest bound, an estimate), a compressed ``.npz`` member's declared size
  (:func:`check_npz_member`), and a store or HDF5 dataset read whole (:func:`check_whole_read`: its shape,
  since missing chunks read as fill values).
"""
from __future__ import annotations

import os
from typing import Any

from ..context import current, describe_bytes
from ..errors import InputError

#: how many nodes aliases may add to a YAML document beyond the nodes written in it
ALIAS_EXPANSION = 100_000


# ------------------------------------------------------------------ YAML


def load_yaml(text: str, label: str) -> Any:
    """Parse YAML text safely (see the module docstring); syntax errors and alias bombs are one InputError
    naming ``label`` (and the line)."""
    import yaml

    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, label)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{label}, line {mark.line + 1}" if mark is not None else label
        problem = getattr(e, "problem", None) or (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InputError(f"{where}: invalid YAML: {problem}"[:500]) from None
    except RecursionError:
        raise InputError(f"{label}: invalid YAML: nested too deeply") from None
    finally:
        loader.dispose()


def _check_expansion(root: Any, label: str) -> None:
    """Refuse a node graph whose aliases expand it by more than :data:`ALIAS_EXPANSION` nodes, or that refers to
    itself; linear in the nodes written (each shared node is sized once, depth first without recursion)."""
    import yaml

    collections = (yaml.SequenceNode, yaml.MappingNode)
    size: dict[int, int] = {}
    written = 0
    started: set[int] = set()
    stack: list[tuple[Any, list | None]] = [(root, None)]
    while stack:
        node, kids = stack.pop()
        key = id(node)
        if kids is not None:  # every child sized: this node's size, aliases expanded
            started.discard(key)
            size[key] = total = 1 + sum(size[id(k)] for k in kids)
            if total - written > ALIAS_EXPANSION:  # more than written so far, so aliases added the difference
                line = node.start_mark.line + 1 if node.start_mark is not None else None
                raise InputError(f"{label}{f', line {line}' if line else ''}: aliases (&anchor / *anchor) expand "
                                 f"this document by more than {ALIAS_EXPANSION:,} values beyond those written; "
                                 "expected plain lists (write the values out)")
            continue
        if key in size:
            continue
        if key in started:
            raise InputError(f"{label}: an alias (*anchor) refers to the value that contains it; expected plain "
                             "data without cycles")
        started.add(key)
        written += 1
        if isinstance(node, collections):
            kids = list(node.value) if isinstance(node, yaml.SequenceNode) else [n for kv in node.value for n in kv]
        else:
            kids = []
        stack.append((node, kids))
        stack.extend((k, None) for k in kids if id(k) not in size)


# ------------------------------------------------------------------ declared sizes


def check_declared(size: int, label: str, what: str) -> None:
    """InputError when ``size`` bytes (what a file declares it holds once read) exceed the memory budget."""
    budget = current().budget
    if size > budget:
        raise InputError(f"{label}: {what} declares {describe_bytes(size)} once decompressed, more than the memory "
                         f"budget of {describe_bytes(budget)}; expected a smaller file, or raise --memory-budget "
                         "if this one is expected")


#: bytes per value of Parquet's fixed-width physical types
_PARQUET_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}


def parquet_declared_bytes(path: str | os.PathLike) -> int:
    """What a Parquet file's metadata says its values take once decoded (see the module docstring)."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    schema = meta.schema
    total = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            kind = chunk.physical_type
            if kind in _PARQUET_WIDTH:
                width = _PARQUET_WIDTH[kind]
            elif kind == "FIXED_LEN_BYTE_ARRAY":
                width = max(1, schema.column(c).length or 1)
            else:  # BYTE_ARRAY: an offset per value and the longest statistics bound, an estimate
                width = 8 + _bound_length(chunk.statistics)
            total += max(int(chunk.total_uncompressed_size), int(chunk.num_values) * width)
    return total


def _bound_length(stats: Any) -> int:
    if stats is None or not stats.has_min_max:
        return 0
    return max(len(stats.min) if isinstance(stats.min, (str, bytes)) else 0,
               len(stats.max) if isinstance(stats.max, (str, bytes)) else 0)


def read_parquet(path: str | os.PathLike, label: str, *, index_as_column: bool = True):
    """``pandas.read_parquet`` after checking the file's declared size against the memory budget (one line
    naming the file, the size and the budget); a stored pandas index (e.g. the ids) becomes the first column
    unless ``index_as_column`` is False. What pyarrow raises for a file it cannot read is left to the caller."""
    import pandas as pd

    check_declared(parquet_declared_bytes(path), label, "the Parquet file")
    table = pd.read_parquet(path)
    if index_as_column and not isinstance(table.index, pd.RangeIndex):
        table = table.reset_index()
    return table


def check_npz_member(archive: Any, name: str, label: str) -> None:
    """The declared size of a compressed ``.npz`` member against the memory budget (a stored member's size is
    the file's own)."""
    import zipfile

    info = archive.zip.getinfo(name if name.endswith(".npy") else f"{name}.npy")
    if info.compress_type != zipfile.ZIP_STORED:
        check_declared(int(info.file_size), label, f"array {name!r}")


def check_whole_read(shape: tuple[int, ...], itemsize: int, label: str, what: str) -> None:
    """An array of ``shape`` read whole (a store's or an HDF5 file's: missing chunks read as fill values, so the
    file's size says nothing) against the memory budget; float32 at least per value, as it is kept."""
    n = 1
    for s in shape:
        n *= int(s)
    check_declared(n * max(int(itemsize), 4), label, what)
