"""Validation of a raw vectors matrix, shared by every reader (:mod:`.vectors`) and the out-of-core stores
(:mod:`.stores`): its shape and dtype, NaN / infinite / float32-overflowing values, rows too long for the
kernels' float32 products (:data:`MAX_ROW_NORM`) and zero rows, each named by row (and id) and column."""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from ..errors import InputError
from .files import as_ids, check_count, check_unique

_CHECK_BLOCK = 1 << 22  # elements per block when scanning large arrays

#: the longest row (L2 norm) accepted. The kernels take dot products, squared norms and squared distances of
#: rows in float32 (k-NN candidates, Gram tiles, Euclidean neighbours); a partial sum of products of two rows is at
#: most ``‖x‖·‖y‖`` (Cauchy–Schwarz) and a squared distance at most ``(‖x‖ + ‖y‖)² ≤ 4·max‖x‖²``, so with every
#: row at most ``sqrt(float32 max) / 2`` (about 9.2e18) none of them overflows; the float64 sums of moments have
#: room to spare. Per value this is ``|x| ≤ 9.2e18 / sqrt(d)`` at worst (every value of a row that large).
MAX_ROW_NORM = float(np.sqrt(np.finfo(np.float32).max)) / 2


def finalize(raw: np.ndarray, ids: Any, vectors_label: str, ids_label: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate raw vectors and ids; return float32 C-contiguous vectors and str ids."""
    raw = np.asarray(raw)
    check_shape(raw, vectors_label)
    if ids is not None:
        ids = as_ids(ids, ids_label)
        check_count(ids, raw.shape[0], ids_label, vectors_label)
        check_unique(ids, ids_label)
    vectors = _to_float32(raw, vectors_label, ids)
    long_row = _first_row(vectors, too_long_rows)
    if long_row is not None:
        raise too_long_error(vectors, long_row, vectors_label, ids)
    zero = _first_row(vectors, lambda block: ~block.any(axis=1))
    if zero is not None:
        raise InputError(
            f"{vectors_label}, {row_ref(zero, ids)}: zero vector (all {vectors.shape[1]} values are 0); "
            "expected a direction"
        )
    return vectors, ids


def check_shape(raw: np.ndarray, label: str) -> None:
    if raw.ndim != 2:
        raise InputError(f"{label}: expected a 2-D array (vectors x dimensions), found shape {raw.shape}")
    n, d = raw.shape
    if n < 2:
        found = "no vectors (0 rows)" if n == 0 else "only 1 vector"
        raise InputError(f"{label}: {found}; expected at least 2 vectors")
    if d == 0:
        raise InputError(f"{label}: vectors have 0 dimensions; expected at least 1 value per vector")
    if raw.dtype.kind not in "iuf":
        raise InputError(f"{label}: expected numbers, found values of type {raw.dtype}")


def _to_float32(raw: np.ndarray, label: str, ids: np.ndarray | None) -> np.ndarray:
    """Cast to writable float32 C-contiguous (no copy when already so), rejecting NaN, inf and overflow."""
    bad = _first_non_finite(raw) if raw.dtype.kind == "f" else None
    if bad is not None:
        value = raw[bad]
        text = "NaN" if np.isnan(value) else str(float(value))
        raise InputError(f"{label}, {row_ref(bad[0], ids)}, column {bad[1] + 1}: {text}; expected finite numbers")
    with np.errstate(over="ignore"):
        vectors = np.ascontiguousarray(raw, dtype=np.float32)
    if not vectors.flags.writeable:  # e.g. a read-only view into a pandas frame
        vectors = vectors.copy()
    bad = _first_non_finite(vectors) if raw.dtype.kind == "f" and raw.dtype.itemsize > 4 else None
    if bad is not None:
        raise InputError(
            f"{label}, {row_ref(bad[0], ids)}, column {bad[1] + 1}: {raw[bad]:g} does not fit in float32 "
            f"(largest magnitude {np.finfo(np.float32).max:g})"
        )
    return vectors


def too_long_rows(block: np.ndarray) -> np.ndarray:
    """Which rows of a finite block are longer than :data:`MAX_ROW_NORM` (norms computed in float64, and only for
    rows whose largest value could make them so)."""
    mask = np.zeros(len(block), dtype=bool)
    if block.size == 0:
        return mask
    suspects = np.flatnonzero(np.abs(block).max(axis=1) > MAX_ROW_NORM / np.sqrt(block.shape[1]))
    if suspects.size:
        mask[suspects] = np.linalg.norm(block[suspects].astype(np.float64), axis=1) > MAX_ROW_NORM
    return mask


def too_long_error(vectors: np.ndarray, row: int, label: str, ids: np.ndarray | None,
                   offset: int = 0) -> InputError:
    """The one line for a row longer than :data:`MAX_ROW_NORM` (``row``: in ``vectors``; ``offset``: its first
    row's number in the whole set)."""
    norm = float(np.linalg.norm(np.asarray(vectors[row], dtype=np.float64)))
    return InputError(f"{label}, {row_ref(offset + row, ids)}: its length (L2 norm) {norm:.3g} is beyond "
                      f"{MAX_ROW_NORM:.3g}, where the float32 products and distances of rows overflow; expected "
                      "vectors of an ordinary scale (divide them by a constant)")


def _first_non_finite(arr: np.ndarray) -> tuple[int, int] | None:
    """(row, column) of the first NaN or infinite value, or None."""
    row = _first_row(arr, lambda block: ~np.isfinite(block).all(axis=1))
    if row is None:
        return None
    return row, int(np.flatnonzero(~np.isfinite(arr[row]))[0])


def _first_row(arr: np.ndarray, row_mask: Callable[[np.ndarray], np.ndarray]) -> int | None:
    """Index of the first row where ``row_mask`` is True, scanning in blocks to bound memory."""
    step = max(1, _CHECK_BLOCK // max(1, arr.shape[1]))
    for start in range(0, arr.shape[0], step):
        mask = row_mask(arr[start:start + step])
        if mask.any():
            return start + int(np.argmax(mask))
    return None


def row_ref(row: int, ids: np.ndarray | None) -> str:
    return f"row {row + 1}" + (f" (id {ids[row]!r})" if ids is not None else "")


def pick_array_name(names: Iterable[str], label: str) -> str:
    """'vectors', else 'embeddings', else the only entry besides 'ids'."""
    names = [n for n in names if n != "ids"]
    for preferred in ("vectors", "embeddings"):
        if preferred in names:
            return preferred
    if len(names) == 1:
        return names[0]
    found = ", ".join(map(repr, names)) or "none"
    raise InputError(
        f"{label}: expected a single array or one named 'vectors' or 'embeddings' (plus optional 'ids'), "
        f"found {found}"
    )
