"""The consumers of product tiles and the sweeps that feed them: each row's running top-k under a plain or re-scored
order (:class:`RunningTopK`), the rows' Gaussian potential (:class:`RowPotential`), one pass over a block's tiles
(:func:`sweep_tiles`) and the merge of one tile, or its transpose, into a consumer (:func:`feed_view`).
:mod:`.neighbours` drives them."""
from __future__ import annotations

import threading

import torch

from .candidates import GROUP
from .device import mask_indices, true_indices

#: plain rows are merged in buckets by their number of groups above the k-th score (at most 4, 5 to 8, more)
GROUP_BUCKETS = (4, 8)
#: re-scored rows are merged in buckets by their number of entries above the k-th score (at most 16, 17 to 128, more),
#: so a few rows with many such entries do not set the merge width of all
HIT_BUCKETS = (16, 128)
#: rows of a tile the potential transforms and sums at once on the CPU (64 rows of a 4,096-column tile: 1 MiB)
POTENTIAL_ROWS = 64
#: columns of the first tile whose plain top-k seeds each row's running threshold
FIRST_COLUMNS = 256
#: groups of largest maxima a re-scored top-k (mutual proximity) merges first, before its floor is raised
PRESCORED_GROUPS = 8


class RunningTopK:
    """One consumer of the product tiles: each query row's running top-k, merged without full-row ``topk``.

    ``rescore`` ranks by a re-scoring that increases with the product for every pair instead, in one
    of two ways:

    * ``rescore.tile_scores(tile, col0, out)`` writes the scores of a whole tile (corpus columns from
      ``col0``) into ``out``: for cheap re-scorings (CSLS), which are then pruned like products;
    * otherwise ``rescore.scores(rows, cols, products)`` gives the scores elementwise (``rows``: query
      numbers counted from the sweep's ``self_start``, or 0, broadcastable to ``products`` like
      ``cols``) and ``rescore.floor(rows, kth)`` a product at or below which no column can score above
      ``kth``: groups whose maximum is at or below it are skipped, and in the others only the products
      above it are re-scored (for costly re-scorings: mutual proximity). A re-scoring may also bound each
      entry by its column: ``rescore.column_floor(kth)`` per row and ``rescore.can_beat(cols, products, floor)``,
      whose false entries cannot beat the row's k-th score and are not re-scored (mutual proximity's
      log Φ(z_y) ≤ kth: at 10,000 x 384, 2.0 of the 23.5 million entries above the rows' floors pass it).
    """

    def __init__(self, m: int, k: int, device: torch.device, rescore=None, dtype=torch.float32):
        self.k = k
        self.tile_scores = getattr(rescore, "tile_scores", None)
        self.scorer = rescore if self.tile_scores is None else None  # elementwise re-scoring, pruned by a floor
        self.values = torch.full((m, k), -torch.inf, dtype=dtype, device=device)
        self.indices = torch.zeros((m, k), dtype=torch.int64, device=device)

    def _merge(self, at, values, column):  # rows ``at`` keep the top-k of their best and ``values`` (at ``column(pos)``)
        k = self.k
        top = torch.topk(torch.cat([self.values[at], values], 1), k, dim=1)
        pos = top.indices
        new = pos >= k
        self.indices[at] = torch.where(new, column((pos - k).clamp_min(0)),
                                       self.indices[at].gather(1, pos.clamp_max(k - 1)))
        self.values[at] = top.values

    def merge_columns(self, at, values, cols, base: int, floor=None):
        """Merge candidates with explicit column numbers ``cols`` (re-scored when asked; products at or
        below the rows' ``floor`` cannot beat their k-th score and are not re-scored)."""
        if self.scorer is not None:
            rows = base + at
            if floor is None:
                values = self.scorer.scores(rows[:, None], cols, values)
            else:
                r, c = mask_indices(values > floor[:, None])
                scored = torch.full_like(values, -torch.inf)
                scored[r, c] = self.scorer.scores(rows[r], cols[r, c], values[r, c])
                values = scored
        self._merge(at, values, lambda p: cols.gather(1, p))

    def start(self, rows, scores, base: int) -> None:
        """Merge the first columns of a sweep (``scores`` of columns 0, 1, ...): a re-scored top-k takes its k
        columns of largest product first, then only the others above the floor their scores raise."""
        cols = torch.arange(scores.shape[1], device=scores.device).expand(len(rows), -1)
        if self.scorer is None or scores.shape[1] <= self.k:
            self.merge_columns(rows, scores, cols, base)
            return
        top = torch.topk(scores, self.k, dim=1)
        self.merge_columns(rows, top.values, top.indices, base)
        rest = scores.scatter(1, top.indices, -torch.inf)
        self.merge_columns(rows, rest, cols, base, self._limit(rows, base))

    def merge_groups(self, rows, groups, group_max, offset: int, base: int):
        """Merge the entries of the 32-column ``groups`` (tile columns from ``offset``) that can beat each row's
        k-th score: those above the row's limit (:meth:`_limit`), read from the groups whose maximum is above it.

        Plain products: a tile value in the merged top-k lies in a group beating the row's k-th score and in one
        of the row's k groups with the largest maxima (else k larger maxima outrank it), so those groups are
        merged whole. A re-scored top-k first merges, in rows where many groups pass, the groups of largest
        maxima: their scores raise the rows' k-th score, so that the floor then rules out most of the other
        groups (in the first tile most of a row's groups pass the floor of its first columns' scores: 91 % of the
        re-scored entries of a 30,000-row sweep). Only the entries above the limit are gathered and re-scored
        (in a sweep of mutual proximity, 3.5 % of the entries of the groups that pass).
        """
        limit = self._limit(rows, base)
        if self.scorer is None:  # plain products: per row its k groups of largest maxima that beat the k-th
            hits = (group_max > limit[:, None]).sum(1)
            bounds = [0, *GROUP_BUCKETS, group_max.shape[1]]
            for low, high in zip(bounds, bounds[1:]):
                at = true_indices((hits > low) & (hits <= high))
                if len(at):
                    chosen = torch.topk(group_max[at], min(self.k, int(hits[at].max())), dim=1).indices
                    values = groups[at[:, None], chosen].view(len(at), -1)
                    self._merge(at, values, lambda p: offset + chosen.gather(1, p // GROUP) * GROUP + p % GROUP)
            return
        if group_max.shape[1] > PRESCORED_GROUPS:
            at = true_indices((group_max > limit[:, None]).sum(1) > PRESCORED_GROUPS)
            if len(at):
                chosen = torch.topk(group_max[at], PRESCORED_GROUPS, dim=1).indices
                self._merge_above(at.repeat_interleave(PRESCORED_GROUPS), chosen.flatten(), groups, limit, offset,
                                  base)
                group_max = group_max.clone()
                group_max[at[:, None], chosen] = -torch.inf
                limit = self._limit(rows, base)
        self._merge_above(*mask_indices(group_max > limit[:, None]), groups, limit, offset, base)

    def _merge_above(self, r, g, groups, limit, offset: int, base: int) -> None:
        """Re-score and merge the entries above their row's ``limit`` in groups ``g`` of rows ``r`` (in order)."""
        vals = groups[r, g]
        p, e = mask_indices(vals > limit[r, None])
        if len(p):
            at, cols, vals = r[p], offset + g[p] * GROUP + e, vals[p, e]
            if hasattr(self.scorer, "can_beat"):  # the columns' own bound (mutual proximity: log Φ(z_y) > kth)
                keep = true_indices(self.scorer.can_beat(cols, vals, self.scorer.column_floor(self.values[:, -1])[at]))
                at, cols, vals = at[keep], cols[keep], vals[keep]
            if len(at):
                self._merge_entries(at, cols, self.scorer.scores(base + at, cols, vals))

    def _merge_entries(self, at, cols, values) -> None:
        """Merge scored entries (``at``: their rows, in order) into the running top-k, rows in buckets by their
        number of entries (at most :data:`HIT_BUCKETS`, more), so a few rows with many do not set the width of all."""
        counts = torch.bincount(at, minlength=len(self.values))
        pos = torch.arange(len(at), device=at.device) - (torch.cumsum(counts, 0) - counts)[at]
        bounds = [0, *HIT_BUCKETS, int(counts.max())]
        for low, high in zip(bounds, bounds[1:]):
            if high <= low:
                continue
            rows = true_indices((counts > low) & (counts <= high))
            if len(rows) == 0:
                continue
            slot = torch.full_like(counts, -1)
            slot[rows] = torch.arange(len(rows), device=at.device)
            mine = true_indices(slot[at] >= 0)
            width = int(counts[rows].max())
            dense = torch.full((len(rows), width), -torch.inf, dtype=values.dtype, device=at.device)
            where = torch.zeros((len(rows), width), dtype=torch.int64, device=at.device)
            dense[slot[at[mine]], pos[mine]] = values[mine]
            where[slot[at[mine]], pos[mine]] = cols[mine]
            self._merge(rows, dense, lambda q: where.gather(1, q))

    def _limit(self, rows, base: int) -> torch.Tensor:
        """Per row the product at or below which no column can enter its running top-k."""
        kth = self.values[:, -1]
        return kth if self.scorer is None else self.scorer.floor(base + rows, kth)


class RowPotential:
    r"""One consumer of cosine tiles: per row :math:`\sum_j \exp(-t\lVert u_i-u_j\rVert^2) = \sum_j e^{2t(\cos-1)}`.

    Row sums of each tile in float32 (pairwise summation), accumulated across tiles in float64;
    it exponentiates the tile in place, so it runs after the top-k consumers. On the CPU a tile is
    transformed and summed :data:`POTENTIAL_ROWS` rows at a time, which stay in cache between the steps
    (the same sums: each row is summed alone either way).
    """

    def __init__(self, m: int, t: float, device: torch.device):
        self.t = float(t)
        self.sums = torch.zeros(m, dtype=torch.float64, device=device)
        self.tile_sums = torch.empty(m, dtype=torch.float32, device=device)

    def add_tile(self, tile: torch.Tensor, columns: RowPotential | None = None) -> None:
        """Add a tile's terms to its rows; ``columns``: the potential of the rows that are the tile's columns (a
        tile of the upper triangle of a symmetric sweep), which gets the column sums (float32 per tile)."""
        step = len(tile) if tile.device.type == "cuda" else POTENTIAL_ROWS
        column_sums = None if columns is None else torch.zeros(tile.shape[1], dtype=tile.dtype, device=tile.device)
        for i in range(0, len(tile), step):
            part = tile[i:i + step]
            torch.exp(part.sub_(1.0).clamp_max_(0.0).mul_(2.0 * self.t), out=part)
            torch.sum(part, 1, out=self.tile_sums[i:i + len(part)])
            if column_sums is not None:
                column_sums += part.sum(0)
        self.sums += self.tile_sums[:len(tile)]
        if columns is not None:
            columns.sums += column_sums


def sweep_tiles(q: torch.Tensor, corpus_t: torch.Tensor, consumers: list[RunningTopK], *,
                potential: RowPotential | None = None, self_start: int | None = None, tile_cols: int | None = None,
                buffer: torch.Tensor | None = None) -> None:
    """One pass over the products ``q @ corpus_t``, tile by tile, feeding every consumer.

    ``q`` (m, d) and ``corpus_t`` (d, n) are float32 on one device. ``self_start``: query row i is
    corpus column ``self_start + i`` and is excluded. Rows are processed against ``tile_cols``
    corpus columns at a time (one product into ``buffer``); per tile the 32-column group maxima are
    computed once and shared by the top-k consumers that prune on products (each merges only the
    groups that can beat its rows' k-th scores; a consumer whose re-scoring transforms whole tiles
    prunes its own scores), then ``potential`` (if any) sums the tile.
    """
    m, n = len(q), corpus_t.shape[1]
    dev = q.device
    W = n if tile_cols is None else min(tile_cols, n)
    if buffer is None or buffer.numel() < m * W:
        buffer = torch.empty(m * W, dtype=q.dtype, device=dev)
    rows = torch.arange(m, device=dev)
    base = self_start or 0
    scratch = (torch.empty(m * W, dtype=q.dtype, device=dev)
               if any(c.tile_scores for c in consumers) else None)
    for j in range(0, n, W):
        w = min(W, n - j)
        tile = buffer[:m * w].view(m, w)
        torch.matmul(q, corpus_t[:, j:j + w], out=tile)
        if self_start is not None and self_start < j + w and j < self_start + m:  # the tile holds own columns
            own = rows + self_start - j
            inside = (own >= 0) & (own < w)
            tile[rows[inside], own[inside]] = -torch.inf
        first = min(w, first_columns(consumers)) if j == 0 else 0
        feed_views([c for c in consumers if c.tile_scores is None], tile, first, j, base)
        for c in consumers:  # consumers that score the whole tile prune their own scores
            if c.tile_scores is not None:
                feed_view(c, c.tile_scores(tile, j, scratch[:m * w].view(m, w)), first, j, base)
        if potential is not None:
            potential.add_tile(tile)


def first_columns(consumers: list[RunningTopK]) -> int:
    """How many of a sweep's first corpus columns start every consumer's running top-k (one number for all, so
    that they share the groups of the rest of the tile)."""
    return max([FIRST_COLUMNS, *(c.k for c in consumers)])


def feed_views(consumers: list[RunningTopK], tile: torch.Tensor, first: int, offset: int, base: int, *,
               transposed: bool = False) -> None:
    """:func:`feed_view` of one tile to consumers that prune on its products: its groups and their maxima made
    once, shared by all."""
    grouped = None
    for c in consumers:
        grouped = feed_view(c, tile, first, offset, base, transposed=transposed, grouped=grouped)


def feed_view(consumer: RunningTopK, tile: torch.Tensor, first: int, offset: int, base: int, *,
              transposed: bool = False, grouped=None):
    """Merge one tile of scores into a consumer whose rows are the tile's rows (``transposed``: its columns, for a
    tile of the upper triangle of a symmetric sweep) and whose columns start at corpus column ``offset``.

    The first ``first`` columns (the sweep's first: corpus columns 0, 1, ...) start the running top-k; then the
    32-column groups are merged (:meth:`RunningTopK.merge_groups`; transposed: groups of 32 tile rows, read in
    place), then the last columns, fewer than a group. ``grouped``: the groups and their maxima when another
    consumer of the same view already made them. Returns them."""
    m, w = (tile.shape[1], tile.shape[0]) if transposed else tile.shape
    rows = torch.arange(m, device=tile.device)
    full = first + (w - first) // GROUP * GROUP
    if first:
        consumer.start(rows, tile[:first].T if transposed else tile[:, :first], base)
    if full > first:
        if grouped is None:
            if transposed:
                groups = tile[first:full].view((full - first) // GROUP, GROUP, m)
                grouped = groups.permute(2, 0, 1), groups.amax(1).T
            else:
                groups = tile[:, first:full].view(m, (full - first) // GROUP, GROUP)
                grouped = groups, groups.amax(2)
        consumer.merge_groups(rows, *grouped, offset + first, base)
    if full < w:  # the last columns, fewer than a group
        cols = (offset + full + torch.arange(w - full, device=tile.device)).expand(m, -1)
        consumer.merge_columns(rows, tile[full:w].T if transposed else tile[:, full:w], cols, base)
    return grouped


def upper_triangle(blocks: int, run_tile, finish_row, buffers, pool=None, workers: int = 2, rows=None) -> int:
    """Run ``run_tile(i, j, buffer)`` for every tile i <= j of a triangle of ``blocks`` x ``blocks`` tiles and
    ``finish_row(i)`` (returning a count, summed) once row i's tiles are done; ``buffers``: a queue of tile buffers.

    Without ``pool``: row by row. With ``pool`` (an executor of ``workers`` threads): the workers take tiles side by
    side, each tile (i, j) once (i, j - 1) and (i - 1, j) are done, so that the tiles touching a block (those of its
    row and of its column) still run one at a time and in row order, and every block gets the same calls in the same
    order as row by row; this thread finishes the rows in order. ``rows``: wraps the iterable of row numbers (a
    progress bar)."""
    order = rows or (lambda r: r)
    if pool is None:
        buffer, again = buffers.get(), 0
        for i in order(range(blocks)):
            for j in range(i, blocks):
                run_tile(i, j, buffer)
            again += finish_row(i)
        buffers.put(buffer)
        return again
    state = threading.Condition()
    done = [i - 1 for i in range(blocks)]  # per row: its last column done
    running = [False] * blocks
    left = blocks * (blocks + 1) // 2  # tiles not yet taken
    failed: list[BaseException] = []

    def ready():
        for i in range(blocks):
            j = done[i] + 1
            if j < blocks and not running[i] and (i == 0 or done[i - 1] >= j):
                return i, j
        return None

    def work() -> None:
        nonlocal left
        buffer = buffers.get()
        try:
            while True:
                with state:
                    while not failed and left and (tile := ready()) is None:
                        state.wait()
                    if failed or not left:
                        return
                    running[tile[0]], left = True, left - 1
                try:
                    run_tile(*tile, buffer)
                except BaseException as error:
                    failed.append(error)
                    raise
                finally:
                    with state:
                        running[tile[0]], done[tile[0]] = False, tile[1]
                        state.notify_all()
        finally:
            buffers.put(buffer)

    running_workers = [pool.submit(work) for _ in range(workers)]
    again = 0
    try:
        for i in order(range(blocks)):
            with state:
                while not failed and done[i] < blocks - 1:
                    state.wait()
            if failed:
                break
            again += finish_row(i)
    except BaseException as error:
        with state:
            failed.append(error)
            state.notify_all()
        raise
    finally:
        for worker in running_workers:
            worker.exception()
    if failed:
        raise failed[0]
    return again
