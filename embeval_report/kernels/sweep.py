r"""The set's own sweep on a CPU with a bfloat16 product: the cosine graph, the mutual-proximity graph and the
all-pairs potential from one float32 pass over the upper triangle of the Gram, whose tiles are only compared with
per-row limits set beforehand by a bfloat16 pass (no running top-k is merged tile by tile, the mutual-proximity
scores of the whole Gram are never computed).

1. **Limits** (:func:`_limit_block`): the kept-entry pass of a plain search on bfloat16 products without its slack
   (:func:`~.candidates._collect`: only entries at or above the row's K-th group maximum, not every entry within the
   products' error of it) gives each row its K entries of largest product (K: :func:`_entries`), scored in
   float64. Any k entries bound the row's k-th float64 score from below, so the k-th cosine among them is a limit
   no entry of the cosine list falls below. For mutual proximity :math:`\log MP(x, y) = \log\Phi(z_x) +
   \log\Phi(z_y)`, increasing in the cosine, the k-th of their scores, :math:`\tau`, is at most the row's k-th;
   since :math:`\log\Phi(z_y) \le 0`, a column reaches :math:`\tau` only if
   :math:`\cos \ge \mu_x + \sigma_x \Phi^{-1}(e^{\tau})`. A row's limit is the lower of the two.
2. **One float32 pass** (:class:`~.neighbours._Sweep` without lists: the same tiles, in the same order, as the
   sweep that merged running top-k lists, so the potential is the same bit for bit): every entry of a tile at or
   above its row's limit (less the float32 bound) is kept, from the tile and from its transpose.
3. **Float64 lists** (:func:`_best_of`): per row, the entries within twice the float32 bound of the k-th float32
   product (cosine), or whose score interval reaches the k-th lowest score (mutual proximity; only entries whose
   column can reach the row's limit too, :math:`\log\Phi(z_y) \ge \tau`, as :math:`\log\Phi(z_x) \le 0`), are
   scored in float64; the k best (exact ties: the lower index) are the list. So both lists are the float64 top-k,
   proven.
"""
from __future__ import annotations

import numpy as np
import torch

from . import device as _device
from .candidates import GROUP, _exact_scores, _kth, _padded_cosines, _top_k
from .device import BF16, FP32, mask_indices, round_down, true_indices, unit_rows
from .rescoring import SweptCsls
from .swept_csls import CslsInSweep

#: float64-scored entries per list entry from which a row's limits are set when a plan is mutual proximity (its top-k
#: are not the cosine's: the k-th score among more of the cosine's first entries is closer to the row's own)
MP_ENTRIES = 3
#: margin (in cosine) under the mutual-proximity limit, for the float64 rounding of log Φ and Φ⁻¹
MP_MARGIN = 1e-9
#: entries a row may keep on average above its limit (estimated from :data:`SAMPLE_ROWS` rows) for the float32 pass
#: to keep entries instead of merging running lists tile by tile (:func:`~.tiles.feed_views`): a set whose
#: mutual-proximity lists are far from its cosine lists (strongly anisotropic, 10,000 x 384 with 24 topics: about 1,900
#: a row) keeps too many, and the sweep merges its lists tile by tile instead
KEPT_PER_ROW = 400
SAMPLE_ROWS = 256
#: the most bytes the sampled rows' products take (fewer rows are sampled from a larger set)
SAMPLE_BYTES = 256 * 2**20
#: rows below which a self sweep merges its lists tile by tile instead: the collected sweep's bfloat16 pass and the
#: grouping of what it keeps cost more than the merging they spare (one thread, CPU-seconds collected / merged, a
#: cosine graph and the potential: 5,000 x 384 1.3-1.5, 10,000 x 384 0.94-2.4, 20,000 x 384 1.1-1.4, 40,000 x 384
#: 0.97-1.00, the higher the more anisotropic the set; benchmarks/README.md)
COLLECT_MIN_ROWS = 50_000
#: entries a row may keep in a bfloat16 pass (estimated from :data:`SAMPLE_ROWS` rows before it runs) per
#: multiply-add of the row's products (n d): a kept entry costs about as much as 50,000 of them (one thread, a plain
#: cosine search, where bfloat16 and float32 products cost the same: 10,000 x 384 at about 90 entries a row,
#: 30,000 x 384 at about 205). A set with a strong common direction, whose rows' nearest cosines crowd within a
#: bfloat16 product's error of each other, keeps hundreds (10,000 x 384 with mean cosine 0.88: about 360)
KEPT16_PER_MAC = 1 / 50_000


def collected_sweep(X: np.ndarray, plans: list, dev: torch.device, desc: str | None,
                    potential_t: float | None, sweep_class) -> tuple[list, np.ndarray | None]:
    """The lists of ``plans`` (``(k, None)``: the cosine graph; ``(k, MutualProximity)``; ``(k, SweptCsls)``, after a
    cosine plan of at least its neighbourhood: :mod:`.swept_csls`) and, with ``potential_t``, the rows' log Gaussian
    potential, of the self sweep of ``X`` (see the module). ``sweep_class``: :class:`~.neighbours._Sweep`. Returns
    what :func:`~.neighbours._search` returns, or None when the rows would keep more than :data:`KEPT_PER_ROW` entries
    each (the caller then merges lists tile by tile)."""
    n = len(X)
    longest = max(k for k, _ in plans)
    pre = sweep_class(X, X, [(_entries(plans, n - 1), None)], "cosine", True, dev, None, None, BF16, tight=True)
    if crowded(pre, longest):
        return None
    limits = [torch.full((n,), torch.inf, dtype=torch.float64) for _ in plans]  # per plan (CSLS: none)
    zs = [None if rescore is None else torch.empty(n, dtype=torch.float64) for _, rescore in plans]
    csls = _csls_plans(plans, n)
    pre.on_block = lambda s, blk, entries: _limit_block(s, blk, entries, plans, limits, pre.corpus64, zs, csls)
    pre.run()
    limit = torch.stack(limits).amin(0)
    if _kept_per_row(pre, limit) > KEPT_PER_ROW:
        return None
    tiles = sweep_class(X, X, [], "cosine", True, dev, desc, potential_t, FP32, corpus64=pre.corpus64)
    bound32 = max(float(tiles.inputs(s)[2].bound.max()) for s in tiles.starts)  # any float32 product's, either way
    limit32 = round_down(limit - bound32, torch.float32)
    for state in csls.values():
        state.thresholds(bound32)
    keep32 = _keep_thresholds(limit32, list(csls.values()))
    kept: dict = {s: [] for s in tiles.starts}
    out = [(np.empty((n, k), dtype=np.int64), np.empty((n, k), dtype=np.float32)) for k, _ in plans]
    tiles.on_tile = lambda tile, s, t: _keep(tile, s, t, limit32, kept, keep32)
    tiles.on_row = lambda s, q64: _lists_block(s, q64, kept.pop(s), plans, limits, bound32, tiles.corpus64, out, zs,
                                               limit32, csls)
    tiles.run()
    for i, state in csls.items():
        out[i] = state.lists(out)
    return out, tiles.log_potential


def _csls_plans(plans: list, n: int) -> dict:
    """Plan index -> :class:`~.swept_csls.CslsInSweep` of each :class:`~.rescoring.SweptCsls` plan (r from the first
    plain plan)."""
    cosine = next((i for i, (_, rescore) in enumerate(plans) if rescore is None), None)
    out = {}
    for i, (k, rescore) in enumerate(plans):
        if isinstance(rescore, SweptCsls):
            if cosine is None or plans[cosine][0] < rescore.neighborhood:
                raise ValueError("a swept CSLS plan needs a cosine plan of at least its neighbourhood in the sweep")
            out[i] = CslsInSweep(n, k, rescore, cosine, _entries(plans, n - 1))
    return out


def _keep_thresholds(limit32: torch.Tensor, csls: list):
    """What :func:`_keep` compares with: the rows' limits, or with swept CSLS ``(limit32, a32, h32)``: an entry is kept
    at or above the lower of its row's limit and ``a32[row] + h32[column]`` (:mod:`.swept_csls`, step 3; one CSLS
    plan: the lowest a32 and h32 of several)."""
    if not csls:
        return None
    a32 = torch.stack([c.a32 for c in csls]).amin(0)
    h32 = torch.stack([c.h32 for c in csls]).amin(0)
    return limit32, a32, h32


def _kept_per_row(pre, limit: torch.Tensor) -> float:
    """The mean number of entries a row would keep above its limit, from :data:`SAMPLE_ROWS` rows spread over the set
    (their float32 products with every row)."""
    rows = _sample(pre.n, pre.n)
    S = pre.corpus64[rows].float() @ pre.corpus64[0:pre.n].float().T
    S[torch.arange(len(rows)), rows] = -torch.inf
    return float((S >= limit[rows, None]).sum()) / len(rows)


def _entries(plans: list, most: int) -> int:
    """How many of a row's first entries set its limits (:func:`_limit_block`), at most ``most``."""
    longest = max(k for k, _ in plans)
    return min(longest * (MP_ENTRIES if any(rescore is not None for _, rescore in plans) else 1), most)


def kept16_per_row(search, K: int) -> float:
    """About the mean number of entries a query row keeps in a bfloat16 kept-entry pass for a K-list
    (:func:`~.candidates._collect`: every entry within 2B + δ of the row's K-th product) of ``search`` (a
    :class:`~.neighbours._Sweep` on bfloat16 products, its corpus in memory), from :data:`SAMPLE_ROWS` query rows spread
    over the set (their bfloat16 products with every row; B: the largest bound of the first block's rows). The pass
    keeps somewhat more (its limit rises to the K-th as it reads the row: up to 1.5 times as many on the sets tested)."""
    rows = _sample(len(search.Q), search.n)
    if search.Q is search.X:
        q64 = search.corpus64[rows]
    else:
        q64 = unit_rows(torch.from_numpy(np.asarray(search.Q[rows.numpy()], dtype=np.float32)).double())
    S = (q64.to(search.dtype) @ search.corpus_t).float()
    if search.drop_self:
        S[torch.arange(len(rows)), rows] = -torch.inf
    v = torch.topk(S, K, dim=1).values[:, -1:]
    slack = 2 * float(search.inputs(0)[2].bound.max()) + v.abs() * (2.0**-7 * 1.01)
    return float((S >= v - slack).sum()) / len(rows)


def crowded(search, K: int) -> bool:
    """Whether the rows of ``search`` would keep more entries each in a bfloat16 pass for a K-list than
    :data:`KEPT16_PER_MAC` of their products' multiply-adds allow (:func:`kept16_per_row`). Never where
    :data:`~.device.CANDIDATES` forces the product (tests of the bounded products do)."""
    return (_device.CANDIDATES is None
            and kept16_per_row(search, K) > search.n * search.X.shape[1] * KEPT16_PER_MAC)


def _sample(m: int, n: int) -> torch.Tensor:
    """:data:`SAMPLE_ROWS` of ``m`` rows spread evenly (fewer where their products with ``n`` rows would pass
    :data:`SAMPLE_BYTES`)."""
    return torch.linspace(0, m - 1, min(m, SAMPLE_ROWS, max(16, SAMPLE_BYTES // (4 * n)))).round().long().unique()


def _grouped(r: torch.Tensor, c: torch.Tensor, p: torch.Tensor, m: int):
    """Entries ``(row r in 0..m-1, column c, product p)`` grouped by row, products descending within a row, and the
    rows' entry counts and starts."""
    order = torch.sort(r.double() * 4 - p.double()).indices  # |p| <= 1.01: a row's keys stay apart from the next's
    r, c, p = r[order], c[order], p[order].double()
    counts = torch.bincount(r, minlength=m)
    return r, c, p, counts, torch.cumsum(counts, 0) - counts


def _limit_block(s: int, blk, entries, plans: list, limits: list, corpus64, zs: list, csls: dict) -> None:
    """Each plan's limits of the rows of block ``s`` (see the module, step 1): the first K entries of each row by
    bfloat16 product (K: the longest list) scored in float64; any k of them bound the row's k-th score from below.
    A mutual-proximity plan also keeps in ``zs`` its rows' z = Φ⁻¹(e^τ), which bounds the columns too
    (:func:`_lists_block`). A swept CSLS plan takes the bounds on r of its rows from the same entries
    (:meth:`~.swept_csls.CslsInSweep.limit_block`)."""
    m = len(blk.q)
    r, c, p, counts, starts = _grouped(*entries, m)
    if int(counts.min()) < max(k for k, _ in plans):  # cannot happen: the pass keeps each row's largest products
        raise RuntimeError("a row kept fewer entries than its list holds")
    K = _entries(plans, int(counts.min()))
    cand = c[starts[:, None] + torch.arange(K)[None, :]]
    cos64 = _exact_scores(corpus64, None, blk.q64, cand, "cosine")
    rows = torch.arange(s, s + m)
    for state in csls.values():
        state.limit_block(s, cand, cos64, p[starts + K - 1], blk.bound)
    for (k, rescore), limit, zrows in zip(plans, limits, zs):
        if isinstance(rescore, SweptCsls):
            continue
        if rescore is None:
            limit[s:s + m] = torch.topk(cos64, k, dim=1).values[:, -1]
            continue
        tau = torch.topk(rescore.exact(rows[:, None], cand, cos64), k, dim=1).values[:, -1]
        # τ at most minus the smallest double: 1 - Φ(z) = -expm1(τ) at least that (z ≈ 37.5), finite
        z = rescore.column_z(tau.clamp_max(-torch.finfo(torch.float64).tiny))
        limit[s:s + m] = rescore.cosine_at(rows, z) - MP_MARGIN
        zrows[s:s + m] = z


def _keep(tile: torch.Tensor, s: int, t: int, limit32: torch.Tensor, kept: dict, csls=None) -> None:
    """The entries of tile (s, t) of the upper triangle at or above their row's limit: from the tile (rows of block
    s) and, off the diagonal, from its transpose (rows of block t), with rows counted from their block's start.
    Read through the maxima of groups of :data:`~.candidates.GROUP` entries, one pass over contiguous memory per
    direction (a tile's group g: columns, or rows, g, g + G, ..., g + 31 G); only the groups whose maximum reaches
    the limit are read entry by entry, and the last columns (rows), fewer than a group, directly. With swept CSLS
    (``csls``: :func:`_keep_thresholds`) an entry's limit is the lower of its row's and ``a32[row] + h32[column]``,
    and a group's the lower of its row's and ``a32[row]`` plus the least ``h32`` of its columns (:class:`_Floors`)."""
    m, w = tile.shape
    G = w // GROUP
    groups = tile[:, :G * GROUP].view(m, GROUP, G)
    f = _Floors(limit32, csls, s, m, t, G)
    r, g = mask_indices(groups.amax(1) >= f.groups())
    vals = groups[r, :, g]
    i, b = mask_indices(vals >= f.entries(r, g))
    kept[s].append((r[i], t + g[i] + b * G, vals[i, b]))
    if G * GROUP < w:
        r, c = mask_indices(tile[:, G * GROUP:] >= f.rest(t + G * GROUP, t + w))
        kept[s].append((r, t + G * GROUP + c, tile[r, G * GROUP + c]))
    if t == s:
        return
    G = m // GROUP
    groups = tile[:G * GROUP].view(GROUP, G, w)
    f = _Floors(limit32, csls, t, w, s, G)
    g, c = mask_indices(groups.amax(0) >= f.groups().T)
    vals = groups[:, g, c].T
    i, b = mask_indices(vals >= f.entries(c, g))
    kept[t].append((c[i], s + g[i] + b * G, vals[i, b]))
    if G * GROUP < m:
        r, c = mask_indices(tile[G * GROUP:] >= f.rest(s + G * GROUP, s + m).T)
        kept[t].append((c, s + G * GROUP + r, tile[G * GROUP + r, c]))


class _Floors:
    """What :func:`_keep` compares the entries of rows ``row0:row0 + m`` with, their columns from ``col0`` in groups of
    :data:`~.candidates.GROUP` (group g: columns g, g + G, ...): the rows' limits, or with swept CSLS the lower of
    those and ``a32[row] + h32[column]`` (float32 sums, as :meth:`~.swept_csls.CslsInSweep.kept` makes them)."""

    def __init__(self, limit32: torch.Tensor, csls, row0: int, m: int, col0: int, G: int):
        self.lim = limit32[row0:row0 + m]
        self.csls = csls is not None
        if self.csls:
            self.a, self.h32 = csls[1][row0:row0 + m], csls[2]
            self.hT = self.h32[col0:col0 + G * GROUP].view(GROUP, G).T.contiguous()  # group g's h in row g

    def groups(self) -> torch.Tensor:
        """(rows, groups): the least floor of each row's entries in each group."""
        if not self.csls:
            return self.lim[:, None]
        return torch.minimum(self.lim[:, None], self.a[:, None] + self.hT.amin(1)[None, :])

    def entries(self, r: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """(len(r), GROUP): the floors of the entries of group g[i] of row r[i]."""
        if not self.csls:
            return self.lim[r, None]
        floor = self.hT[g]
        floor += self.a[r, None]
        return torch.minimum(floor, self.lim[r, None], out=floor)

    def rest(self, c0: int, c1: int) -> torch.Tensor:
        """(rows, c1 - c0): the floors of columns c0:c1, past the groups."""
        if not self.csls:
            return self.lim[:, None]
        return torch.minimum(self.lim[:, None], self.h32[None, c0:c1] + self.a[:, None])


def _lists_block(s: int, q64: torch.Tensor, entries: list, plans: list, limits: list, bound32: float, corpus64,
                 out: list, zs: list, limit32: torch.Tensor, csls: dict) -> None:
    """The float64 lists of the rows of block ``s`` from their float32 kept entries (see the module, step 3); swept
    CSLS plans take the entries they kept (:meth:`~.swept_csls.CslsInSweep.block`), the other lists those at or above
    the rows' limits only."""
    m = len(q64)
    r, c, p = (torch.cat(x) for x in zip(*entries))
    for state in csls.values():
        state.block(s, q64, r, c, p, corpus64)
    if csls:
        at = true_indices(p >= limit32[s + r])
        r, c, p = r[at], c[at], p[at]
    r, c, p, counts, starts = _grouped(r, c, p, m)
    for (k, rescore), limit, zrows, (idx, val) in zip(plans, limits, zs, out):
        if isinstance(rescore, SweptCsls):
            continue
        if rescore is None:  # within 2 B32 of the row's k-th float32 product
            keep = p >= (p[starts + k - 1] - 2 * bound32)[r]
        else:  # above the row's limit and the column's (log Φ(z_y) ≥ τ: the same z), and the score interval of
            # cosines within B32 reaches the k-th lower score
            keep = true_indices(p >= limit[s:s + m][r] - bound32)
            rk, ck, pk = r[keep], c[keep], p[keep]
            col = true_indices(pk >= rescore.cosine_at(ck, zrows[s:s + m][rk]) - MP_MARGIN - bound32)
            keep, rk, ck, pk = keep[col], rk[col], ck[col], pk[col]
            n_keep = torch.bincount(rk, minlength=m)
            lo = rescore.exact(rk + s, ck, pk - bound32)
            kth = _kth(rk, lo, n_keep, torch.cumsum(n_keep, 0) - n_keep, k)
            keep = keep[rescore.exact(rk + s, ck, pk + bound32) >= kth[rk]]
        i, v = _best_of(k, r[keep], c[keep], q64, corpus64, None if rescore is None else (rescore, s))
        idx[s:s + m], val[s:s + m] = i.numpy(), v.float().numpy()


def _best_of(k: int, r: torch.Tensor, c: torch.Tensor, q64: torch.Tensor, corpus64, rescore) -> tuple:
    """Per row of ``q64`` (``r`` grouped; at least k entries each) the k best of its columns ``c`` by float64 score
    (the cosine, or for ``rescore = (MutualProximity, first row)`` its score of it); exact ties: the lower index."""
    cand, score, valid = _padded_cosines(r, c, q64, corpus64)
    if rescore is not None:
        score = rescore[0].exact(torch.arange(rescore[1], rescore[1] + len(q64))[:, None], cand, score)
    cand = torch.where(valid, cand, torch.iinfo(torch.int64).max)  # padding sorts after every real column
    return _top_k(cand, score.masked_fill(~valid, -torch.inf), k)
