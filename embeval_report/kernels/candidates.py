"""Exact candidates: every corpus row a product's error bound cannot rule out, scored in float64.

The pieces of :mod:`.neighbours`' search that turn candidate products (:func:`~.device.exact_product`, each within
:func:`~.device.product_bound` of its float64 score) into the float64 top-k: the float64 rows of the corpus
(:class:`_Rows64`) and its transposed product inputs (:class:`_CorpusTiles`, made tile by tile for a corpus
larger than memory), the kept-entry pass of a plain search (:func:`_collect`, :func:`_collected_lists`), the
proof of a fixed pool (:func:`_bounded_lists`) with its second search (:func:`_complete_rows`), and the
float64 re-scoring they share (:func:`_rescore_lists`: exact ties, the lower index first).
"""
from __future__ import annotations

import functools

import torch

from ..context import current
from ..progress import progress
from .device import (
    Product,
    cache_rows,
    candidate_mm,
    chunk_rows,
    mask_indices,
    one_thread,
    round_down,
    step_budget,
    true_indices,
)
from .heap import trim
from .prefetch import prefetch_rows

#: columns per pruning group: a group is merged only when its maximum beats the running k-th score
GROUP = 32
#: extra float32 candidates per row re-scored in float64, so near-ties that float32 rounding cannot
#: order are ordered exactly (ties in float64: the lower index first)
RERANK = 4
#: corpus tiles made (of a corpus beyond the budget) between two returns of the allocator's free memory to the OS
#: (:func:`~.heap.trim`: one return per tile cost about a tenth of a 2M-row sampled search)
TRIM_TILES = 8
#: bytes of gathered float64 candidate rows scored at a time (in cache for the batched product)
SCORE_BYTES = 2 * 2**20
#: batched re-scoring calls of a kept-entry pass after its first, at most, per device type where each call waits
#: for the device (:func:`_rescore_widths`); elsewhere the widths grow by half a round, which keeps padding low
DEVICE_ROUNDS = {"cuda": 2}
#: device types where :func:`_complete_rows` tries one pass for as many rows as their tiles allow (each pass waits
#: for the device); elsewhere the rows go in passes that hold whole rows' selections, as they always did
PASS_DEVICES = ("cuda",)


class _Rows64:
    """The float64 (unit, for cosine) rows of a float32 corpus, made on demand chunk by chunk, so no
    float64 copy of the whole corpus is held (a 2M x 768 set would need 12 GB for it)."""

    def __init__(self, X32: torch.Tensor, unit: bool):
        self.X32, self.unit = X32, unit
        self.step = cache_rows(len(X32), X32.shape[1] * 8 * 4, X32.device)  # pieces in cache (row by row: same values)
        self.norms = None
        with one_thread(X32.device):  # cache-sized pieces (see :func:`~.device.one_thread`)
            if unit:  # written in place: a small result allocated after each chunk's float64 copy would keep the
                # allocator from reusing the copy's memory (a 2M x 768 corpus under a 1 GiB budget held 11.6 GiB)
                self.norms = torch.empty(len(X32), dtype=torch.float64, device=X32.device)
                for s in range(0, len(X32), self.step):
                    self.norms[s:s + self.step] = X32[s:s + self.step].double().norm(dim=1)
                self.norms.clamp_min_(torch.finfo(torch.float64).tiny)
            self.whole = None  # the float64 rows themselves, when they fit in the budget: gathered without a pass
            if current().fits(X32.numel() * 8):
                self.whole = torch.cat(list(self._chunks())) if len(X32) else X32.double()

    def __getitem__(self, idx) -> torch.Tensor:
        if self.whole is not None:
            if isinstance(idx, torch.Tensor) and idx.dim() > 1:  # one row gather (faster than fancy indexing)
                return self.whole.index_select(0, idx.reshape(-1)).view(*idx.shape, -1)
            return self.whole[idx]
        rows = self.X32[idx].double()
        return rows / self.norms[idx].unsqueeze(-1) if self.unit else rows  # as unit_rows, row by row

    def __len__(self) -> int:
        return len(self.X32)

    def gather(self, idx: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
        """``self[idx]`` for a 2-D index ``idx`` (m, c), written into the start of ``buffer`` (at least m c rows of
        float64, as wide as the rows) when the float64 rows are held whole: the same rows, without allocating."""
        if self.whole is None:
            return self[idx]
        flat = idx.reshape(-1)
        return torch.index_select(self.whole, 0, flat, out=buffer[:len(flat)]).view(*idx.shape, -1)

    def subset(self, rows: torch.Tensor) -> _Rows64:
        """The float64 rows ``rows`` (ascending: read in file order) held in memory, as a corpus of their own; rows
        of a corpus beyond the budget (a memory map) have their pages asked of the OS first (:mod:`.prefetch`)."""
        if self.whole is None and self.X32.device.type == "cpu" and self.X32.dim() == 2 and self.X32.stride(1) == 1:
            prefetch_rows(self.X32.data_ptr(), self.X32.stride(0) * self.X32.element_size(), rows.cpu().numpy())
        sub = object.__new__(_Rows64)
        sub.whole = self[rows]
        sub.X32, sub.unit, sub.norms, sub.step = sub.whole, self.unit, None, self.step
        return sub

    def squared_norms(self) -> torch.Tensor:
        out = torch.empty(len(self.X32), dtype=torch.float64, device=self.X32.device)
        with one_thread(self.X32.device):
            for s, r in zip(range(0, len(self.X32), self.step), self._chunks()):  # in place (see ``norms``)
                out[s:s + len(r)] = (r * r).sum(1)
        return out

    def _chunks(self):
        for s in range(0, len(self.X32), self.step):
            yield self[s:s + self.step]

    def inputs(self, rows, sq64, product: Product | None) -> tuple[torch.Tensor, tuple[float, float, float]]:
        """The candidate-product inputs of corpus rows ``rows`` (euclidean: ``[2x, -|x|^2]``; a linear re-scoring
        with column c: ``[2x, -c]``), float32 (rounded
        by ``product``; None: the bfloat16 of fast mode), and the maxima over these rows of the float64 rows'
        norms, the inputs' rounding residuals and the inputs' norms (see :func:`~.device.product_bound`)."""
        r64 = self[rows]
        r = r64.float()
        if sq64 is not None:
            r = torch.cat([2 * r, -sq64[rows].float()[:, None]], 1)
            r64 = torch.cat([2 * r64, -sq64[rows][:, None]], 1)
        if product is None:
            return r.to(torch.bfloat16), (0.0, 0.0, 0.0)
        if product.bits != 24:
            r = product.rounded(r)
        if len(r) == 0:
            return r.to(product.dtype), (0.0, 0.0, 0.0)
        r_d = r.double()
        return r.to(product.dtype), (float(r64.norm(dim=1).max()), float((r_d - r64).norm(dim=1).max()),
                                     float(r_d.norm(dim=1).max()))

    def transposed(self, sq64, product: Product | None) -> tuple[torch.Tensor, tuple[float, float, float]]:
        """The (d, n) corpus the products read (:meth:`inputs`, transposed) and its input maxima."""
        d = self.X32.shape[1] + int(sq64 is not None)
        out = torch.empty((d, len(self.X32)), dtype=torch.bfloat16 if product is None else product.dtype,
                          device=self.X32.device)
        stats = (0.0, 0.0, 0.0)
        with one_thread(self.X32.device):
            for s in range(0, len(self.X32), self.step):
                r, st = self.inputs(slice(s, s + self.step), sq64, product)
                out[:, s:s + len(r)] = r.T
                stats = tuple(map(max, stats, st))
        return out, stats

    @functools.cached_property
    def inv32(self) -> torch.Tensor | None:
        """Float32 reciprocals of the unit rows' norms (zero rows: 0, so they stay zero), for :meth:`unit_inputs`;
        None unless every nonzero norm is far from float32's range limits. Made on first use (a tiled corpus)."""
        if not self.unit or not len(self.X32):
            return None
        zero = self.norms == torch.finfo(torch.float64).tiny
        nonzero = self.norms[~zero]
        if len(nonzero) and not (float(nonzero.min()) > 2.0**-60 and float(nonzero.max()) < 2.0**60):
            return None
        return torch.where(zero, 0.0, 1.0 / self.norms).float()

    def _unit32(self, rows, product: Product) -> tuple[torch.Tensor, torch.Tensor]:
        r"""The float32 unit rows :math:`v = x \cdot fl(1/\lVert x\rVert)` of ``rows`` and their rounding by
        ``product`` (float32 inputs: ``v`` itself)."""
        v = self.X32[rows] * self.inv32[rows].unsqueeze(-1)
        return v, v if product.bits == 24 else product.rounded(v)

    def unit_inputs(self, rows, product: Product) -> torch.Tensor:
        r"""The candidate inputs of unit rows ``rows`` made in float32 (:meth:`_unit32`): within :meth:`unit_stats`
        of the float64 unit rows, without a float64 copy (for a corpus read tile by tile, where :meth:`inputs`
        converts every tile of every pass)."""
        return self._unit32(rows, product)[1].to(product.dtype)

    def unit_stats(self, product: Product) -> tuple[float, float, float]:
        r"""The input maxima of :meth:`unit_inputs` (see :func:`~.device.product_bound`), measured in one float32 pass.

        With :math:`v = fl(x \cdot fl(1/n))` the float32 row and :math:`\tilde y` its rounding: per element
        :math:`fl(1/n)` and the product each err by at most :math:`2^{-24}` relatively (an underflow by
        :math:`2^{-149}`), so :math:`\lVert v - y\rVert \le 2^{-22}\lVert y\rVert + 2^{-149}\sqrt d`; the residual
        :math:`\tilde y - v` is exact in float32 and its float32 norm within :math:`(d + 1)\,2^{-23}` relatively.
        So :math:`\lVert\tilde y - y\rVert \le \lVert\tilde y - v\rVert (1 + (d + 1) 2^{-23}) + 2^{-22}\lVert
        y\rVert + 2^{-149}\sqrt d`, with :math:`\lVert y\rVert \le 1 + (d + 2)\,2^{-52}` for a row divided by its
        float64 norm. The residuals are about those of :meth:`stats` (a bound as tight), without a float64 copy."""
        d = self.X32.shape[1]
        norm, grow = 1.0 + (d + 2) * 2.0**-52, 1.0 + (d + 1) * 2.0**-23
        residual = rounded_norm = 0.0
        with one_thread(self.X32.device):
            for s in range(0, len(self.X32), self.step):
                v, r = self._unit32(slice(s, s + self.step), product)
                residual = max(residual, float((r - v).norm(dim=1).max()))
                rounded_norm = max(rounded_norm, float(r.norm(dim=1).max()))
        err = residual * grow + 2.0**-22 * norm + 2.0**-149 * d**0.5
        return norm, err, rounded_norm * grow

    def stats(self, sq64, product: Product) -> tuple[float, float, float]:
        """The input maxima of :meth:`transposed` without keeping the transposed corpus (one pass)."""
        stats = (0.0, 0.0, 0.0)
        with one_thread(self.X32.device):
            for s in range(0, len(self.X32), self.step):
                stats = tuple(map(max, stats, self.inputs(slice(s, s + self.step), sq64, product)[1]))
        return stats


class _CorpusTiles:
    """The transposed corpus of :meth:`_Rows64.transposed`, made tile by tile where :func:`~.tiles.sweep_tiles` reads
    it (``corpus_t[:, j:j + w]``): for a corpus whose transposed copy would not fit in the memory budget (a
    10M x 768 set: 30 GB). Unit rows of a bounded search are made in float32 (:meth:`_Rows64.unit_inputs`,
    their error measured in one float32 pass, :meth:`_Rows64.unit_stats`); otherwise the same values as
    :meth:`_Rows64.transposed`. Each query block reads the corpus once more."""

    def __init__(self, corpus64: _Rows64, product: Product | None, sq64=None, *, desc: str | None = None,
                 tiles: int = 0):
        self.corpus64, self.product, self.sq64 = corpus64, product, sq64
        self.in_float32 = corpus64.inv32 is not None and sq64 is None and product is not None
        self.shape = (corpus64.X32.shape[1] + int(sq64 is not None), len(corpus64.X32))
        self._ticks = iter(progress(range(tiles), desc=f"{desc} (corpus tiles)", total=tiles)) if desc else None
        self._made = 0

    def stats(self) -> tuple[float, float, float] | None:
        """The input maxima the search's error bound takes (None without a bound: fast mode)."""
        if self.product is None:
            return None
        if self.in_float32:
            return self.corpus64.unit_stats(self.product)
        return self.corpus64.stats(self.sq64, self.product)

    def __getitem__(self, key) -> torch.Tensor:
        _, cols = key
        if self._ticks is not None:
            next(self._ticks, None)
        self._made += 1
        if self._made % TRIM_TILES == 0:  # the last tiles' temporaries, pinned by the entries kept since: to the OS
            trim()
        if self.in_float32:
            return self.corpus64.unit_inputs(cols, self.product).T.contiguous()
        return self.corpus64.inputs(cols, self.sq64, self.product)[0].T.contiguous()


def _top_k(cand: torch.Tensor, exact: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row the k best of candidates ``cand`` by float64 score ``exact``; exact ties: the lower index first."""
    cand, order = cand.sort(1)
    exact = exact.gather(1, order)
    best = torch.sort(exact, dim=1, descending=True, stable=True).indices[:, :k]
    return cand.gather(1, best), exact.gather(1, best)


def _exact_scores(corpus64: _Rows64, sq64, q64: torch.Tensor, cand: torch.Tensor, metric: str) -> torch.Tensor:
    """The float64 scores (higher = closer; euclidean: :math:`-\\lVert q - x\\rVert^2`; linear: :math:`2\\cos - c_x`
    for the column c in ``sq64``) of candidates ``cand``
    (m, c) of query rows ``q64`` (m, d): one batched product per call shape, so that the scores of one row's
    candidates come from one computation (exact duplicates tie exactly). Rows go in pieces of about
    :data:`SCORE_BYTES` of gathered candidates on the CPU, which stay in cache for the product (3x faster than
    one gather of the whole block; the same numbers: each row's product is computed alone)."""
    if corpus64.whole is None and cand.numel() > 1 and q64.device.type == "cpu":
        # rows read from the set (beyond the budget, maybe beyond RAM): each distinct candidate row once, in file
        # order, their pages asked of the OS first (:meth:`_Rows64.subset`); the same float64 rows, so the same
        # scores. The rows held at once stay within the budget.
        held = max(1, chunk_rows(len(cand), cand.shape[1] * q64.shape[1] * 8))
        if held < len(cand):  # each piece's scores copied out at once, so its rows' memory is reused (see _Rows64)
            out = torch.empty(cand.shape, dtype=torch.float64, device=cand.device)
            for s in range(0, len(cand), held):
                out[s:s + held] = _exact_scores(corpus64, sq64, q64[s:s + held], cand[s:s + held], metric)
            return out
        rows, at = torch.unique(cand, return_inverse=True)
        return _exact_scores(corpus64.subset(rows), None if sq64 is None else sq64[rows], q64, at, metric)
    step = max(1, SCORE_BYTES // max(1, cand.shape[1] * q64.shape[1] * 8)) if q64.device.type == "cpu" else len(cand)
    if step >= len(cand):
        exact = torch.bmm(corpus64[cand], q64[:, :, None])[:, :, 0]
    else:  # the pieces' rows gathered into one buffer: a fresh 2 MiB allocation per piece took half the time
        buffer = torch.empty(step * cand.shape[1], q64.shape[1], dtype=torch.float64, device=cand.device)
        exact = torch.cat([torch.bmm(corpus64.gather(cand[s:s + step], buffer), q64[s:s + step, :, None])[:, :, 0]
                           for s in range(0, len(cand), step)])
    if metric == "euclidean":
        exact = 2 * exact - sq64[cand] - (q64 * q64).sum(1, keepdim=True)  # -|q - x|^2
    elif metric == "linear":  # a re-scoring 2 cos - c_j (``sq64`` holds the column c: CSLS's r(y))
        exact = 2 * exact - sq64[cand]
    return exact


class _Block:
    """One query block of a bounded search: its float64 rows, candidate inputs and error bounds."""

    def __init__(self, start: int, q64: torch.Tensor, q: torch.Tensor, bound: torch.Tensor | None,
                 offset: torch.Tensor | float, drop_self: bool):
        self.start, self.q64, self.q, self.bound, self.offset, self.drop_self = start, q64, q, bound, offset, drop_self


def _bounded_lists(k: int, top, blk: _Block, corpus64: _Rows64, sq64, corpus_t, metric: str,
                   product: Product, tile_cols: int, n_avail: int):
    r"""The float64 top-k of every row of a block from its fixed float32 candidate pool, proven complete.

    ``top`` holds each row's K best candidate products :math:`\tilde p` (sorted), each within ``blk.bound``
    :math:`B_i` of its float64 score (:func:`~.device.product_bound`). The pool is scored in float64 (one
    batched product), its k best (exact ties: the lower index) are the list and t its k-th score. A corpus
    row outside the pool has :math:`\tilde p \le \tilde p_K`; if :math:`\tilde p_K < t - B` its score is
    below t and it can neither enter the list nor tie. Rows where the pool cannot show this (dense
    near-ties, more than K exact ties) are searched again over the whole corpus (:func:`_complete_rows`).
    Returns ``(indices (m, k), float64 scores (m, k), rows searched again)``.
    """
    cand, approx = top.indices, top.values
    idx, val = _top_k(cand, _exact_scores(corpus64, sq64, blk.q64, cand, metric), k)
    if cand.shape[1] >= n_avail:  # the pool holds every candidate row
        return idx, val, 0
    threshold = val[:, -1] + blk.offset - blk.bound
    again = true_indices(approx[:, -1].double() >= threshold)
    if len(again):
        idx[again], val[again] = _complete_rows(k, again, threshold[again], blk, corpus64, sq64, corpus_t, metric,
                                                product, tile_cols)
    return idx, val, len(again)


def _rescore_lists(k: int, cand: torch.Tensor, counts: torch.Tensor, q64: torch.Tensor, corpus64: _Rows64, sq64,
                   metric: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 top-k of each row among its first ``counts`` candidates ``cand`` (m, W), exact ties: the
    lower index first. All of a row's candidates are scored by one batched product of one shape (rows of
    the same call, or chunks of one width: padded with the row's first candidate), so that equal rows get
    equal scores (exact duplicates tie exactly); memory: one chunk budget."""
    dev = cand.device
    m, W = cand.shape
    row_bytes = W * q64.shape[1] * 8 * 3
    if m == 0:
        return cand[:, :k], torch.empty((0, k), dtype=torch.float64, device=dev)
    budget = step_budget(dev)  # on a GPU a share of its free memory: few calls, each waits for the device
    if m > 1 and chunk_rows(m, row_bytes, budget) < m:  # several calls of whole rows
        step = max(1, chunk_rows(m, row_bytes, budget))
        best_i = torch.empty((m, k), dtype=torch.int64, device=dev)  # filled in place (see _Rows64)
        best_v = torch.empty((m, k), dtype=torch.float64, device=dev)
        for a in range(0, m, step):
            best_i[a:a + step], best_v[a:a + step] = _rescore_lists(k, cand[a:a + step], counts[a:a + step],
                                                                    q64[a:a + step], corpus64, sq64, metric)
        return best_i, best_v
    width = chunk_rows(W, m * q64.shape[1] * 8 * 3, budget)
    best_i = torch.full((m, k), torch.iinfo(torch.int64).max, dtype=torch.int64, device=dev)
    best_v = torch.full((m, k), -torch.inf, dtype=torch.float64, device=dev)
    for a in range(0, int(counts.max()), width):
        pos = a + torch.arange(width, device=dev)
        valid = pos[None, :] < counts[:, None]
        c = cand.gather(1, torch.where(valid, pos[None, :], 0).clamp_max(W - 1))
        ex = _exact_scores(corpus64, sq64, q64, c, metric).masked_fill(~valid, -torch.inf)
        c = torch.where(valid, c, torch.iinfo(torch.int64).max)  # padding sorts after every real column
        best_i, best_v = _top_k(torch.cat([best_i, c], 1), torch.cat([best_v, ex], 1), k)
    return best_i, best_v


def _complete_rows(k: int, rows: torch.Tensor, threshold: torch.Tensor, blk: _Block, corpus64: _Rows64, sq64,
                   corpus_t, metric: str, product: Product, tile_cols: int):
    """The float64 top-k of block rows ``rows`` over the whole corpus: every corpus row whose candidate product
    reaches the row's ``threshold`` (:math:`t + \text{offset} - B` of :func:`_bounded_lists`, which every
    row of the true list reaches) is scored in float64 (:func:`_rescore_lists`); the rest cannot enter.

    Rows go in passes over the corpus of as many rows as a step budget holds if each selected its whole row (16
    bytes an entry). On a device of :data:`PASS_DEVICES`, where each pass waits for it, a pass first takes as many
    rows as the budget holds tiles of (their products and comparisons), which selections of the usual few entries a
    row leave room for: all of a block's rows in one pass, typically; a pass whose selections outgrow the budget
    is given up and its rows go in passes of the first kind."""
    n, dev = len(corpus64), blk.q.device
    budget = step_budget(dev)
    safe = chunk_rows(len(rows), n * 8 * 2, budget)  # rows at a time: selections within budget
    step = max(safe, chunk_rows(len(rows), tile_cols * 16, budget)) if dev.type in PASS_DEVICES else safe
    out_i, out_v = [], []
    a = 0
    while a < len(rows):
        sub = rows[a:a + step]
        found = _selected(sub, threshold[a:a + step], blk, corpus_t, product, tile_cols, n,
                          None if step == safe else budget)
        if found is None:  # more selected than the budget holds: the rows in passes that always fit
            step = safe
            continue
        cols, _, counts = _rows_to_padded(*(torch.cat(x) for x in zip(*found)), len(sub))
        i, v = _rescore_lists(k, cols, counts, blk.q64[sub], corpus64, sq64, metric)
        out_i.append(i)
        out_v.append(v)
        a += len(sub)
    return torch.cat(out_i), torch.cat(out_v)


def _selected(sub: torch.Tensor, threshold: torch.Tensor, blk: _Block, corpus_t, product: Product, tile_cols: int,
              n: int, budget: int | None) -> list | None:
    """One pass of :func:`_complete_rows` over the corpus for block rows ``sub``: per tile the ``(rows, columns,
    products)`` reaching each row's ``threshold``; None as soon as they would take more than ``budget`` bytes."""
    q = blk.q[sub]
    own = sub + blk.start if blk.drop_self else None
    found, held = [], 0
    with product.matmul():
        for j in range(0, n, tile_cols):
            w = min(tile_cols, n - j)
            p = candidate_mm(q, corpus_t[:, j:j + w])
            if own is not None:
                inside = true_indices((own >= j) & (own < j + w))
                p[inside, own[inside] - j] = -torch.inf
            r, c = mask_indices(p.double() >= threshold[:, None])
            found.append((r, c + j, p[r, c]))
            held += len(r) * 8 * 2
            if budget is not None and held > budget:
                return None
    return found


def _rows_to_padded(r: torch.Tensor, c: torch.Tensor, p: torch.Tensor, m: int):
    """Entries ``(row r, column c, product p)`` as per-row lists sorted by product (descending): padded
    matrices ``(columns (m, L), products (m, L))`` (padding: column 0, product -inf) and the counts."""
    order = torch.sort(p, descending=True, stable=True).indices
    order = order[torch.sort(r[order], stable=True).indices]
    r, c, p = r[order], c[order], p[order]
    counts = torch.bincount(r, minlength=m)
    L = max(1, int(counts.max())) if len(r) else 1
    pos = torch.arange(len(r), device=r.device) - (torch.cumsum(counts, 0) - counts)[r]
    cols = torch.zeros((m, L), dtype=torch.int64, device=r.device)
    vals = torch.full((m, L), -torch.inf, dtype=p.dtype, device=r.device)
    cols[r, pos] = c
    vals[r, pos] = p
    return cols, vals, counts


def _collect(k: int, blk: _Block, corpus_t, tile_cols: int, buffer: torch.Tensor, slack: bool = True):
    r"""One pass over the products of a block's rows against the corpus, keeping every entry that can be in a
    row's float64 top-k.

    A tile's products are grouped by 32 columns (group g of a tile of w = 32 G columns: columns
    ``g, g + G, ...``, one strided max pass); each row keeps the k largest maxima of groups of four such groups
    seen so far, whose smallest, v, is a lower bound on the row's final k-th largest product :math:`v_k`
    (they are k distinct entries). Any row of the final list has :math:`\tilde p \ge v_k - 2B - \delta`:
    its score is at least the k-th score t, and k rows have :math:`\tilde p \ge v_k`, hence score
    :math:`\ge v_k - \delta - B`, so :math:`t \ge v_k - \delta - B` (δ: the rounding of a bfloat16 product,
    at most :math:`2^{-7}|\tilde p|`; 0 for float32 products). So every entry at or above that limit (v only
    rises; the limit rounded down to the products' format) is kept, read from the groups whose maximum
    reaches it. For bfloat16 products and a positive limit the group maxima are taken over the raw 16-bit
    patterns (integer order is float order for positive values; negative values stay below any positive
    limit). ``slack=False``: every entry at or above the row's k-th group maximum (v itself), which holds the row's k
    largest products, for a caller that needs only k entries of large product, not the list (the limits of
    :mod:`.sweep`). Returns the kept ``(rows, columns, products)``.
    """
    q = blk.q
    m, n = len(q), corpus_t.shape[1]
    dev = q.device
    W = min(tile_cols, n)
    rows = torch.arange(m, device=dev)
    best = torch.full((m, k), -torch.inf, device=dev)  # k entries' products (a lower bound on the k-th)
    out16 = q.dtype == torch.bfloat16
    margin = 2 * blk.bound if slack else 0.0

    def below(v):  # v - 2B - delta in float64, rounded down to the products' dtype: no entry above it is lost
        v = v.double()
        return round_down(v - margin - (v.abs() * (2.0**-7 * 1.01) if out16 and slack else 0.0), q.dtype)

    parts = []
    for j in range(0, n, W):
        w = min(W, n - j)
        tile = buffer[:m * w].view(m, w)
        candidate_mm(q, corpus_t[:, j:j + w], out=tile)
        if blk.drop_self and blk.start < j + w and j < blk.start + m:  # the tile holds own columns
            own = rows + blk.start - j
            inside = (own >= 0) & (own < w)
            tile[rows[inside], own[inside]] = -torch.inf
        G = w // GROUP
        groups = tile[:, :G * GROUP].view(m, GROUP, G)  # group g: columns g, g + G, ..., g + 31 G
        rest = tile[:, G * GROUP:]  # the last columns, fewer than a group: entries of their own
        raw = groups.view(torch.int16).amax(1) if out16 else None  # an entry of each group (its max if positive)
        group_max = raw.view(torch.bfloat16) if out16 else groups.amax(1)
        G4 = G // 4
        coarse = group_max[:, :4 * G4].view(m, 4, G4).amax(1) if G4 >= k else group_max
        best = _merged_best(best, torch.cat([coarse.float(), rest.float()], 1), k)
        limit = below(best[:, -1])
        if out16 and not bool((limit > 0).all()):  # raw patterns order negative values backwards
            group_max = groups.amax(1)
            hit = group_max >= limit[:, None]
        elif out16:
            hit = raw >= limit.view(torch.int16)[:, None]
        else:
            hit = group_max >= limit[:, None]
        r, g = mask_indices(hit)
        vals = groups[r, :, g]
        rr, a = mask_indices(vals >= limit[r, None])
        parts.append((r[rr], j + g[rr] + a * G, vals[rr, a]))
        if rest.shape[1]:
            r, c = mask_indices(rest >= limit[:, None])
            parts.append((r, j + G * GROUP + c, rest[r, c]))
    r, c, p = (torch.cat(x) for x in zip(*parts))
    keep = (p >= below(best[:, -1])[r]) & (p > -torch.inf)  # the final limit; never the row itself
    return r[keep], c[keep], p[keep]


def _rescore_widths(need: torch.Tensor, device: torch.device) -> float:
    r"""How much the width of each re-scoring call of :func:`_collected_lists` may exceed the smallest count of the
    rows left, :math:`W = \lfloor f\,c_{min}\rfloor + 1`: f = 1.5 (a third of the candidates padding at most),
    or, where a device allows at most r further calls (:data:`DEVICE_ROUNDS`), :math:`f = \max(1.5,
    (c_{max}/c_{min})^{1/r})`, so that after r calls the smallest count left would exceed :math:`c_{max}`: every row
    is scored within r calls, however the counts spread (a GPU took about 14 rounds a block with f = 1.5)."""
    rounds = DEVICE_ROUNDS.get(device.type)
    if rounds is None or not len(need):
        return 1.5
    return max(1.5, (int(need.max()) / int(need.min())) ** (1 / rounds) * (1 + 1e-9))  # f^r >= max / min


def _merged_best(best: torch.Tensor, new: torch.Tensor, k: int) -> torch.Tensor:
    """Per row the k largest of its running ``best`` (k values, descending) and ``new`` values. On the CPU only the new
    values above their row's k-th are merged (the others cannot change its k largest values), padded per row, sorted
    with the row's k: a sweep's limits pass of 100,000 x 384 with k = 33 took a top-k of 161 values a row each tile,
    6 % of the sweep."""
    if best.device.type != "cpu":  # no host round trip for the rows
        return torch.topk(torch.cat([best, new], 1), k, dim=1).values
    r, c = mask_indices(new > best[:, -1:])
    if not len(r):
        return best
    rows, inverse, counts = torch.unique_consecutive(r, return_inverse=True, return_counts=True)
    pad = torch.full((len(rows), int(counts.max())), -torch.inf, dtype=best.dtype)
    pad[inverse, torch.arange(len(r)) - (torch.cumsum(counts, 0) - counts)[inverse]] = new[r, c]
    best[rows] = torch.cat([best[rows], pad], 1).sort(dim=1, descending=True).values[:, :k]
    return best


def _collected_lists(k: int, blk: _Block, corpus64: _Rows64, sq64, corpus_t, metric: str, tile_cols: int,
                     buffer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The float64 top-k of every row of a block (plain products, no re-scoring) from the entries
    :func:`_collect` kept, which hold every row that can be in the list.

    Per row the ``k + RERANK`` kept entries of largest product are scored in float64 (one batched product,
    the same numbers as the float32 pool of :func:`_bounded_lists`); their k-th score :math:`t'` bounds the
    row's k-th score from below, so only entries with :math:`\tilde p \ge t' + \text{offset} - B` (a prefix
    of the row's entries by product) can still enter: rows with more such entries are scored again over that
    prefix (:func:`_rescore_lists`), and the k best by float64 score (exact ties: the lower index) are the list."""
    r, c, p = _collect(k, blk, corpus_t, tile_cols, buffer)
    order = torch.sort(p, descending=True, stable=True).indices
    order = order[torch.sort(r[order], stable=True).indices]  # by row, then product descending
    r, c, p = r[order], c[order], p[order]
    m = len(blk.q)
    counts = torch.bincount(r, minlength=m)
    starts = torch.cumsum(counts, 0) - counts
    R = k + RERANK if p.dtype == torch.float32 else 2 * k + RERANK  # bfloat16 products: coarser, more within B
    pos = torch.arange(R, device=c.device)[None, :]
    first = c[(starts[:, None] + pos.clamp_max(counts[:, None] - 1))]  # short rows repeat their last entry
    idx, val = _rescore_lists(k, first, counts.clamp_max(R), blk.q64, corpus64, sq64, metric)
    floor = round_down(val[:, -1] + blk.offset - blk.bound, p.dtype)  # t' + offset - B, in products
    need = torch.zeros(m, dtype=torch.int64, device=c.device).index_add_(
        0, r, (p >= floor[r]).to(torch.int64))  # a prefix of each row
    more = true_indices(need > R)
    growth = _rescore_widths(need[more], c.device)
    while len(more):  # by width, so that few candidates are padding: all of a row's in one call
        W = int(int(need[more].min()) * growth) + 1
        now = more[need[more] <= W]
        W = int(need[now].max())
        prefix = c[(starts[now, None] + torch.arange(W, device=c.device)[None, :]).clamp_max(len(c) - 1)]
        idx[now], val[now] = _rescore_lists(k, prefix, need[now], blk.q64[now], corpus64, sq64, metric)
        more = more[need[more] > W]
    return idx, val


#: float64 values a padded per-row table holds at once (:func:`_kth`)
PAD_VALUES = 4 * 2**20


def _kth(r: torch.Tensor, v: torch.Tensor, counts: torch.Tensor, starts: torch.Tensor, k: int) -> torch.Tensor:
    """Per row (entries grouped by row ``r``; every row with at least k) the k-th largest of its values ``v``."""
    m = len(counts)
    if bool((counts < k).any()):  # cannot happen (:mod:`.sweep`): a row keeps k entries that are in any list
        raise RuntimeError("a row kept fewer entries than its list holds")
    pos = torch.arange(len(r)) - starts[r]
    out = torch.empty(m, dtype=v.dtype)
    width = int(counts.max()) if m else 0
    step = max(1, PAD_VALUES // max(1, width))
    for a in range(0, m, step):
        at = (r >= a) & (r < a + step) if step < m else slice(None)
        pad = torch.full((min(step, m - a), width), -torch.inf, dtype=v.dtype)
        pad[r[at] - a, pos[at]] = v[at]
        out[a:a + step] = torch.topk(pad, k, dim=1).values[:, -1]
    return out


def _padded_cosines(r: torch.Tensor, c: torch.Tensor, q64: torch.Tensor, corpus64) -> tuple:
    """Per row of ``q64`` (``r`` grouped; at least one entry each) its columns ``c`` padded to the longest row's count
    (short rows repeat their last entry), their float64 cosines, and which are real entries."""
    m = len(q64)
    counts = torch.bincount(r, minlength=m)
    starts = torch.cumsum(counts, 0) - counts
    at = torch.arange(int(counts.max()))[None, :]
    valid = at < counts[:, None]
    cand = c[(starts[:, None] + at.clamp_max(counts[:, None] - 1))]
    return cand, _exact_scores(corpus64, None, q64, cand, "cosine"), valid
