"""Vectors larger than memory: a memory-mapped ``.npy``, a Zarr array or an HDF5 dataset, read in row blocks.

A source is named in a manifest's ``vectors`` as a path (``big.npy``, ``big.zarr``, ``big.h5``) or as a
mapping ``{zarr: store, array: name, ids: name}`` / ``{hdf5: file, dataset: name, ids: name}``. Validation
(shape, dtype, NaN/inf, float32 overflow, zero rows) streams over row blocks, and the float32 copy every
chapter memory-maps is written block by block into a ``.npy`` file (:func:`numpy.lib.format.open_memmap`),
so the whole matrix is never held in memory. :data:`BLOCK_BYTES` is the working-memory budget of one
block: a block holds a quarter of it in source rows (Zarr holds a block about three times while it
decompresses: compressed chunks, decoded chunks, the result; then come the float32 cast and the masks).
A Zarr or HDF5 chunk is always decoded whole, so the peak is at least about three chunks; the ids (when
given) are held in memory too. A source of at most one block takes the in-memory path of
:func:`~embeval_report.io.matrix.finalize`, with the same messages.
"""
from __future__ import annotations

import atexit
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..context import current
from ..errors import InputError
from .files import as_ids, check_count, check_unique, library_errors, one_line
from .limits import check_whole_read
from .matrix import check_shape, finalize, pick_array_name, row_ref, too_long_error, too_long_rows

#: working-memory budget of one block in bytes (a block reads a quarter of it in source rows); a source of
#: at most a quarter of it is read whole, in memory
BLOCK_BYTES = 64 << 20

ZARR_MARKERS = ("zarr.json", ".zarray", ".zgroup")
HDF5_SUFFIXES = (".h5", ".hdf5")
STORE_SUFFIXES = (".zarr", *HDF5_SUFFIXES)
STORE_KEYS = {"zarr": ("array", "ids"), "hdf5": ("dataset", "ids")}
#: what a Zarr store must be, said when zarr cannot read it (an object array with a pickle codec, an unknown codec)
ZARR_EXPECTED = "a Zarr store of numeric arrays (metadata zarr can parse, codecs it knows)"


def block_data_bytes() -> int:
    """Bytes of source rows in one block: a quarter of :data:`BLOCK_BYTES`."""
    return max(1, (current().share("block") or BLOCK_BYTES) // 4)


def is_zarr_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a Zarr store folder (v2 or v3 metadata), or is named ``*.zarr``."""
    p = Path(path)
    return p.suffix.lower() == ".zarr" or (p.is_dir() and any((p / m).is_file() for m in ZARR_MARKERS))


def is_store(spec: Any) -> bool:
    """Whether a ``vectors`` value (a path or a mapping) names a Zarr store or an HDF5 file."""
    if isinstance(spec, dict):
        return True
    return is_zarr_store(spec) or Path(spec).suffix.lower() in HDF5_SUFFIXES


def store_path(spec: Any) -> Path:
    """The file or folder a ``vectors`` value names."""
    if isinstance(spec, dict):
        return Path(spec["zarr"] if "zarr" in spec else spec["hdf5"])
    return Path(spec)


def store_label(spec: Any) -> str:
    """How messages name a ``vectors`` value: ``big.zarr (array 'emb')``, ``big.h5 (dataset 'emb')``."""
    name = store_path(spec).name
    if isinstance(spec, dict):
        inner = spec.get("array") or spec.get("dataset")
        if inner:
            return f"{name} ({'array' if 'zarr' in spec else 'dataset'} {inner!r})"
    return name


class ArraySource:
    """A 2-D array read in row blocks; every read error becomes one InputError naming the rows."""

    def __init__(self, array: Any, label: str, what: str, *, ids: Any = None, ids_label: str | None = None,
                 chunk_rows: int | None = None, closer: Any = None) -> None:
        self.array, self.label, self.what, self.ids, self.ids_label = array, label, what, ids, ids_label or label
        self.chunk_rows, self._closer = chunk_rows, closer
        self.shape = tuple(int(s) for s in array.shape)
        self.dtype = np.dtype(array.dtype)
        self.ndim = len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def is_npy_float32(self) -> bool:
        """A C-ordered float32 memmap: already what the chapters read, so no copy is needed."""
        a = self.array
        return isinstance(a, np.memmap) and a.dtype == np.float32 and a.flags.c_contiguous

    def read(self, start: int, stop: int) -> np.ndarray:
        try:
            return np.asarray(self.array[start:stop])
        except Exception as e:  # codecs raise many types for a corrupt chunk
            raise InputError(f"{self.label}, rows {start + 1}-{stop}: could not read ({self.what}; a corrupt or "
                             f"unreadable chunk?): {one_line(e)}") from None

    def block_rows(self) -> int:
        """Rows per block: a quarter of :data:`BLOCK_BYTES` of source (at least 4 bytes a value), whole chunks;
        at least one chunk, which is decoded whole anyway (a block inside a larger chunk would decode that
        chunk once per block: 24 times over for 131,072-row chunks of 768 float32 and the default budget)."""
        width = int(np.prod(self.shape[1:], dtype=np.int64)) * max(self.dtype.itemsize, 4)
        rows = max(1, block_data_bytes() // max(1, width))
        if self.chunk_rows:
            rows = max(rows - rows % self.chunk_rows, self.chunk_rows)
        return rows

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        step = self.block_rows()
        for start in range(0, self.shape[0], step):
            yield start, self.read(start, min(start + step, self.shape[0]))

    def close(self) -> None:
        if self._closer is not None:
            self._closer()
            self._closer = None

    def __enter__(self) -> ArraySource:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------- opening


def open_source(spec: Any, label: str | None = None) -> ArraySource | None:
    """Open a store (Zarr / HDF5) or a ``.npy`` file larger than one block; None for anything else."""
    if is_store(spec):
        path = store_path(spec)
        label = label or store_label(spec)
        opts = spec if isinstance(spec, dict) else {}
        if "hdf5" in opts or (not opts and path.suffix.lower() in HDF5_SUFFIXES):
            return _open_hdf5(path, opts.get("dataset"), opts.get("ids"), label)
        return _open_zarr(path, opts.get("array"), opts.get("ids"), label)
    path = Path(spec)
    if path.suffix.lower() != ".npy" or not path.is_file():
        return None
    label = label or path.name
    with library_errors(label, "a NumPy .npy file"):
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    if array.nbytes <= block_data_bytes():
        return None
    return ArraySource(array, label, "a NumPy .npy file")


def _zarr(label: str):
    try:
        import zarr
    except ImportError:
        raise InputError(f"{label}: reading a Zarr store needs the zarr package: pip install 'embeval-report[scale]' "
                         "(or pip install zarr)") from None
    return zarr


def _missing(label: str, kind: str, name: str, names: list[str]) -> InputError:
    return InputError(f"{label}: no {kind} named {name!r}; {kind}s present: {', '.join(map(repr, names)) or 'none'}")


def _pick(names: list[str], label: str) -> str:

    return pick_array_name(names, label)


def _select(container: Any, names: list[str], array: str | None, ids: str | None, label: str, kind: str
            ) -> tuple[Any, np.ndarray | None, str]:
    """The vectors' array of a Zarr group or HDF5 file (``container[name]``) among its arrays ``names``: the one
    named ``array``, else the one :func:`pick_array_name` picks; its ids: the array named ``ids``, else one named
    ``ids`` when the vectors' array was picked, else none (a missing name: one line listing those present; ``kind``:
    "array" or "dataset"). Returns ``(target, ids values or None, the ids' label)``."""
    chosen = array or _pick(names, label)
    if chosen not in names:
        raise _missing(label, kind, chosen, names)
    ids_name = ids or ("ids" if array is None and "ids" in names else None)
    ids_label = f"{label}, ids {kind} {ids_name!r}"
    ids_values = None
    if ids_name is not None:
        if ids_name not in names:
            raise _missing(label, kind, ids_name, names)
        ids_values = _read_ids(container[ids_name], ids_label)
    return container[chosen], ids_values, ids_label


def _open_zarr(path: Path, array: str | None, ids: str | None, label: str) -> ArraySource:
    if not path.exists():
        raise InputError(f"{label}: Zarr store not found: {path}")
    if not is_zarr_store(path) or not path.is_dir():
        raise InputError(f"{label}: {path} is not a Zarr store (a folder with zarr.json, .zarray or .zgroup)")
    zarr = _zarr(label)
    with library_errors(label, ZARR_EXPECTED):
        node = zarr.open(str(path), mode="r")
    if not hasattr(node, "array_keys"):  # an array at the root
        if array or ids:
            key = "array" if array else "ids"
            raise InputError(f"{label}: the store holds a single array at its root; remove key {key!r}")
        return ArraySource(node, label, "a Zarr array", chunk_rows=_chunk_rows(node))
    with library_errors(label, ZARR_EXPECTED):  # a member's metadata is parsed here
        target, ids_values, ids_label = _select(node, sorted(_zarr_arrays(node)), array, ids, label, "array")
    return ArraySource(target, label, "a Zarr array", ids=ids_values, ids_label=ids_label,
                       chunk_rows=_chunk_rows(target))


def _zarr_arrays(group: Any, prefix: str = "") -> Iterator[str]:
    """Paths of every array in a Zarr group, nested groups included."""
    for name, member in group.members():
        if hasattr(member, "array_keys"):
            yield from _zarr_arrays(member, f"{prefix}{name}/")
        else:
            yield prefix + name


def _chunk_rows(array: Any) -> int | None:
    chunks = getattr(array, "chunks", None)
    return int(chunks[0]) if chunks else None


def _read_ids(array: Any, label: str) -> np.ndarray:
    check_whole_read(tuple(array.shape), np.dtype(array.dtype).itemsize, label, "the ids array")  # read whole
    with library_errors(label, "ids"):
        values = np.asarray(array[...])
    if values.dtype.kind in "fcb":
        raise InputError(f"{label}: expected text (or integer) ids, found values of type {values.dtype}")
    return as_ids(values, label)


def _open_hdf5(path: Path, dataset: str | None, ids: str | None, label: str) -> ArraySource:
    import h5py

    if not path.is_file():
        raise InputError(f"{label}: HDF5 file not found: {path}")
    with library_errors(label, "an HDF5 file"):
        f = h5py.File(path, "r")
    try:
        names: list[str] = []
        f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        target, ids_values, ids_label = _select(f, names, None if dataset is None else dataset.strip("/"),
                                                ids.strip("/") if ids else None, label, "dataset")
        return ArraySource(target, label, "an HDF5 dataset", ids=ids_values, ids_label=ids_label,
                           chunk_rows=_chunk_rows(target), closer=f.close)
    except BaseException:
        f.close()
        raise


def read_store(spec: Any, label: str | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Read a whole store into memory (for inputs that are matched or used whole: queries, runs)."""
    with open_source(spec, label) as source:
        check_shape(source, source.label)
        check_whole_read(source.shape, source.dtype.itemsize, source.label, source.what)
        return source.read(0, source.shape[0]), source.ids


# ------------------------------------------------------------------- streaming


def finalize_source(source: ArraySource, ids: Any, vectors_label: str, ids_label: str,
                    out_dir: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate ``source`` block by block and return (float32 memmap (n, d), ids) as
    :func:`~embeval_report.io.matrix.finalize` does, with the same messages.

    The float32 copy is written to ``out_dir/vectors.npy`` (the runner passes its prepared cache), else to a
    temporary file that is removed once mapped; a C-ordered float32 ``.npy`` is used in place (linked from
    ``out_dir``), since it is already what the chapters memory-map. A source of at most one block is read whole and goes through ``finalize``.
    """

    check_shape(source, vectors_label)
    if source.nbytes <= block_data_bytes():
        return finalize(np.array(source.read(0, source.shape[0])), ids, vectors_label, ids_label)
    if ids is not None:
        ids = as_ids(ids, ids_label)
        check_count(ids, source.shape[0], ids_label, vectors_label)
        check_unique(ids, ids_label)
    if source.is_npy_float32:  # already what the chapters read: validated in place, linked, never copied
        _scan(source, None, vectors_label, ids, row_ref)
        if out_dir is None or not _link(Path(source.array.filename), Path(out_dir) / "vectors.npy"):
            return source.array, ids
        vectors = np.load(Path(out_dir) / "vectors.npy", mmap_mode="r")
        vectors._embeval_file = str((Path(out_dir) / "vectors.npy").resolve())  # save_prepared: in place
        return vectors, ids
    if out_dir is not None:
        target = Path(out_dir) / "vectors.npy"
    else:
        fd, name = tempfile.mkstemp(prefix="embeval-vectors-", suffix=".npy")
        os.close(fd)
        target = Path(name)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with _npy_writer(tmp, source.shape) as f:
            _scan(source, f, vectors_label, ids, row_ref)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        if out_dir is None:
            target.unlink(missing_ok=True)
        raise
    vectors = np.load(target, mmap_mode="r")
    if out_dir is None:
        _remove_later(target)
    else:
        vectors._embeval_file = str(target.resolve())  # save_prepared: already in place
    return vectors, ids


def _link(source: Path, target: Path) -> bool:
    """Link ``target`` to ``source`` (a float32 ``.npy`` used as it is); False where links are not possible."""
    try:
        target.unlink(missing_ok=True)
        target.symlink_to(source.resolve())
        return True
    except OSError:
        return False


def _remove_later(path: Path) -> None:
    try:
        path.unlink()  # POSIX keeps the mapping alive
    except OSError:
        atexit.register(lambda: path.unlink(missing_ok=True))


def _scan(source: ArraySource, out: Any, label: str, ids: np.ndarray | None, row_ref) -> None:
    """One pass over the blocks: NaN/inf stop at once (the first in row order); float32 overflow, rows too long
    (:data:`~.matrix.MAX_ROW_NORM`) and zero rows are reported after the pass, in that order, as the in-memory
    path does."""
    is_float = source.dtype.kind == "f"
    wide = is_float and source.dtype.itemsize > 4
    overflow = zero = long_row = None
    for start, raw in source.blocks():
        if is_float:
            bad = _first_bad(raw)
            if bad is not None:
                value = raw[bad]
                text = "NaN" if np.isnan(value) else str(float(value))
                raise InputError(f"{label}, {row_ref(start + bad[0], ids)}, column {bad[1] + 1}: {text}; "
                                 "expected finite numbers")
        with np.errstate(over="ignore"):
            block = raw.astype(np.float32, copy=False)
        if wide and overflow is None:
            bad = _first_bad(block)
            if bad is not None:
                overflow = (start + bad[0], bad[1], raw[bad])
        if long_row is None and overflow is None:
            long = too_long_rows(block)
            if long.any():
                long_row = too_long_error(block, int(np.argmax(long)), label, ids, start)
        if zero is None:
            empty = ~block.any(axis=1)
            if empty.any():
                zero = start + int(np.argmax(empty))
        if out is not None:  # blocks come in row order: append
            np.ascontiguousarray(block).tofile(out)
        del raw, block
    if overflow is not None:
        row, col, value = overflow
        raise InputError(f"{label}, {row_ref(row, ids)}, column {col + 1}: {value:g} does not fit in float32 "
                         f"(largest magnitude {np.finfo(np.float32).max:g})")
    if long_row is not None:
        raise long_row
    if zero is not None:
        raise InputError(f"{label}, {row_ref(zero, ids)}: zero vector (all {source.shape[1]} values are 0); "
                         "expected a direction")


def _first_bad(block: np.ndarray) -> tuple[int, int] | None:
    rows = ~np.isfinite(block).all(axis=1)
    if not rows.any():
        return None
    r = int(np.argmax(rows))
    return r, int(np.flatnonzero(~np.isfinite(block[r]))[0])


def _npy_writer(path: Path, shape: tuple[int, ...]):
    """A file positioned at the data of a new float32 ``.npy`` of ``shape`` (header by ``open_memmap``).

    Blocks are appended with ordinary writes rather than through the memory map, so that the written
    pages are page cache, not this process's resident memory."""
    header = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
    offset = header.offset
    del header
    f = open(path, "r+b")
    f.seek(offset)
    return f


def copy_rows(vectors: np.ndarray, path: Path) -> None:
    """Write float32 ``vectors`` to a ``.npy`` at ``path`` block by block (for a memory-mapped set)."""
    step = max(1, block_data_bytes() // max(1, vectors.shape[1] * 4))
    with _npy_writer(path, vectors.shape) as f:
        for start in range(0, vectors.shape[0], step):
            np.ascontiguousarray(vectors[start:start + step], dtype=np.float32).tofile(f)
