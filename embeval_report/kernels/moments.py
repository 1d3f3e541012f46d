"""First and second moments of row sets in one chunked float64 pass (optionally per block)."""
from __future__ import annotations

import numpy as np
import torch

from . import dask_engine
from .dask_faults import falls_back
from .blocks import BlockMoments, assign_blocks, block_chunk_rows
from .device import as_numpy, chunk_budget, iter_chunks, resolve_device, unit_rows
from .moments_cache import digest, remembered


@falls_back
def column_mean(X, *, device="auto") -> np.ndarray:
    """Column mean of ``X`` in one chunked float64 pass (on the engine's cluster when it takes it:
    :func:`~.dask_engine.takes`)."""
    dev = resolve_device(device)
    if dask_engine.takes(X, dev):
        return remembered(X, _pass_key("column_mean", dev, True), lambda: (dask_engine.column_mean(X),))[0]
    return row_sum(X, device=dev) / len(as_numpy(X))


def unit_row_sum(X, *, device="auto") -> np.ndarray:
    """Sum of the L2-normalised rows of ``X``: all the mean cosine over pairs needs,
    ``(‖s‖² − n) / (n(n − 1))``, without the d x d Gram of :func:`block_moments`."""
    return row_sum(X, transform=unit_rows, device=device)


def row_sum(X, *, transform=None, device="auto") -> np.ndarray:
    """Sum of the rows of ``X`` (each mapped by ``transform`` first, when given) in one chunked float64 pass;
    the plain and unit-row sums of the run's set come from the moments cache after the first time."""
    dev = resolve_device(device)

    def compute():
        acc = torch.zeros(as_numpy(X).shape[1], dtype=torch.float64, device=dev)
        for _, x in iter_chunks(X, device=dev):
            acc += (x if transform is None else transform(x)).sum(0)
        return (acc.cpu().numpy(),)

    if transform is not None and transform is not unit_rows:  # a pass the cache cannot name
        return compute()[0]
    return remembered(X, _pass_key(f"row_sum|{getattr(transform, '__name__', None)}", dev, False), compute)[0]


@falls_back
def block_moments(X, *, transform=None, shift: np.ndarray | None = None, n_blocks: int = 1,
                  seed: int = 0, device="auto", desc: str | None = None) -> BlockMoments:
    """Accumulate :class:`BlockMoments` of ``transform(X) - shift`` in one chunked pass.

    ``transform`` maps a chunk of rows (float64 tensor on the device) to new rows, for example
    :func:`unit_rows`; ``shift`` is subtracted afterwards (pass the column mean to keep the
    covariance of a strongly shifted set free of cancellation error). Accumulation is float64.
    A set larger than one chunk with several blocks is read in wider chunks of its own dtype, grouped
    by block and widened block by block, so that each block's product has thousands of rows (see
    :func:`block_chunk_rows`). When the engine's cluster takes the pass (:func:`~.dask_engine.takes`: a
    memory-mapped set larger than one chunk, on the CPU) it runs there as row-range tasks, the same numbers
    to rounding (``transform`` must then pickle).
    """
    dev = resolve_device(device)
    on_cluster = dask_engine.takes(X, dev)
    if transform is not None and transform is not unit_rows:  # a pass the cache cannot name
        return _block_moments(X, transform, shift, n_blocks, seed, dev, desc, on_cluster)
    what = _pass_key(f"block_moments|{getattr(transform, '__name__', None)}|{n_blocks}|{seed}|"
                     f"{None if shift is None else digest(np.asarray(shift, float))}", dev, on_cluster)
    return BlockMoments(*remembered(X, what, lambda: _block_moments(X, transform, shift, n_blocks, seed, dev, desc,
                                                                    on_cluster).arrays()))


def _pass_key(what: str, dev, on_cluster: bool) -> str:
    """A pass's name for the moments cache: its parameters, the device, the chunk size and the engine."""
    return f"{what}|{dev.type}|{chunk_budget()}|{'dask' if on_cluster else 'local'}"


def _block_moments(X, transform, shift, n_blocks, seed, dev, desc, on_cluster) -> BlockMoments:
    """:func:`block_moments` computed."""
    if on_cluster:
        return dask_engine.block_moments(X, transform=transform, shift=shift, n_blocks=n_blocks, seed=seed)
    X = as_numpy(X)
    n, d = X.shape
    n_blocks = int(max(1, min(n_blocks, n)))
    block_of = assign_blocks(n, n_blocks, seed)
    shift = np.zeros(d) if shift is None else np.asarray(shift, float)
    shift_t = torch.as_tensor(shift, device=dev)
    count = torch.zeros(n_blocks, dtype=torch.float64, device=dev)
    S = G = None  # allocated at the first rows: ``transform`` may change their width

    def zeros(width: int):
        return (torch.zeros(n_blocks, width, dtype=torch.float64, device=dev),
                torch.zeros(n_blocks, width, width, dtype=torch.float64, device=dev))

    wide = block_chunk_rows(n, d, n_blocks, X.dtype.itemsize)
    if wide is not None:
        own = torch.float32 if X.dtype == np.float32 else torch.float64
        for start, raw in iter_chunks(X, device=dev, dtype=own, rows=wide, desc=desc):
            b, order = torch.sort(torch.as_tensor(block_of[start:start + len(raw)], device=dev), stable=True)
            blocks, sizes = torch.unique_consecutive(b, return_counts=True)
            for blk, rows in zip(blocks.tolist(), torch.split(raw[order], sizes.tolist())):
                x = rows.to(torch.float64)
                x = (transform(x) if transform is not None else x) - shift_t
                if S is None:
                    S, G = zeros(x.shape[1])
                count[blk] += len(x)
                S[blk] += x.sum(0)
                G[blk] += x.T @ x
        return BlockMoments(count.cpu().numpy(), S.cpu().numpy(), G.cpu().numpy(), shift)
    for start, x in iter_chunks(X, device=dev, desc=desc):
        if transform is not None:
            x = transform(x)
        x = x - shift_t
        if S is None:
            S, G = zeros(x.shape[1])
        b = torch.as_tensor(block_of[start:start + len(x)], device=dev)
        if n_blocks == 1:
            count[0] += len(x)
            S[0] += x.sum(0)
            G[0] += x.T @ x
            continue
        count.index_add_(0, b, torch.ones(len(x), dtype=torch.float64, device=dev))
        S.index_add_(0, b, x)
        # rows grouped by block, each block's rows in their original order (the same products as x[b == blk])
        b, order = torch.sort(b, stable=True)
        x = x[order]
        blocks, sizes = torch.unique_consecutive(b, return_counts=True)
        for blk, xb in zip(blocks.tolist(), torch.split(x, sizes.tolist())):
            G[blk] += xb.T @ xb
    return BlockMoments(count.cpu().numpy(), S.cpu().numpy(), G.cpu().numpy(), shift)


class GroupedMoments:
    """Whole-set moments plus, on demand, those of the set without one random group of rows.

    The same interface as :class:`BlockMoments` for a delete-a-group jackknife: ``total()`` is the
    whole set and ``total(w)`` with ``w`` all ones but a zero at group ``g`` is the set without
    group ``g``. Only one group's d x d moments are held at a time (one extra pass over the data in
    all), so intervals stay available when per-block moments would not fit in memory.
    """

    def __init__(self, X, *, transform=None, shift: np.ndarray | None = None, n_groups: int = 20, seed: int = 0,
                 device="auto", desc: str | None = None):
        self.X, self.transform, self.device = as_numpy(X), transform, resolve_device(device)
        n = len(self.X)
        self.groups = assign_blocks(n, int(max(1, min(n_groups, n))), seed)
        self.count = np.bincount(self.groups).astype(float)
        self.shift = np.zeros(self.X.shape[1]) if shift is None else np.asarray(shift, float)
        whole = block_moments(self.X, transform=transform, shift=self.shift, device=self.device, desc=desc)
        self._total = whole.total()
        self._cached: tuple[int, tuple] | None = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(count, s, G, shift)``, the fields in order."""
        return self.count, self.s, self.G, self.shift

    def total(self, weights: np.ndarray | None = None) -> tuple[float, np.ndarray, np.ndarray]:
        if weights is None:
            return self._total
        w = np.asarray(weights, float)
        out = np.flatnonzero(w == 0)
        if len(out) != 1 or not np.all(np.delete(w, out) == 1):
            raise ValueError("GroupedMoments supports leave-one-group-out weights only (all ones, one zero)")
        g = int(out[0])
        if self._cached is None or self._cached[0] != g:
            rows = np.flatnonzero(self.groups == g)
            self._cached = (g, block_moments(self.X[rows], transform=self.transform, shift=self.shift,
                                             device=self.device).total())
        N, s, G = self._total
        n_g, s_g, G_g = self._cached[1]
        return N - n_g, s - s_g, G - G_g


def resampled_moments(plan, X, *, transform=None, shift: np.ndarray | None = None, seed: int = 0, device="auto",
                      desc: str | None = None):
    """The moments a :class:`~embeval_report.stats.ResamplingPlan` needs: per-block for a bootstrap,
    whole-set plus one group at a time for a jackknife, a single block otherwise."""
    if plan.method == "jackknife":
        return GroupedMoments(X, transform=transform, shift=shift, n_groups=plan.units, seed=seed, device=device,
                              desc=desc)
    units = plan.units if plan.method == "bootstrap" else 1
    return block_moments(X, transform=transform, shift=shift, n_blocks=units, seed=seed, device=device, desc=desc)
