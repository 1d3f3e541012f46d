"""Where and how the kernels run: device choice, chunking, row transforms.

Every pairwise or Gram computation in the package goes through :mod:`embeval_report.kernels`,
so memory stays bounded (rows are processed in chunks; no n x n matrix is ever built) and the
same code runs on ``cpu`` and ``cuda``.
"""
from __future__ import annotations

import functools
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from ..context import current, resolve_device  # noqa: F401  (re-exported: kernels.resolve_device)
from ..progress import progress

#: bytes a single chunk of work may use under the default memory budget (256 MiB); a budget the user sets
#: (``--memory-budget``) gives a sixteenth of it instead (:func:`chunk_budget`)
CHUNK_BYTES = 256 * 2**20
#: bytes of temporaries per piece of a gather-then-reduce loop on the CPU (:func:`cache_rows`): small enough to
#: stay in cache from the gather to the reduction (1M pair cosines of 100,000 x 384: 3.4 s in pieces of the
#: memory budget, 1.1 s in these; the float64 distances of 20,000 rows to 50 neighbours: 2.2 s, 0.56 s)
CACHE_PIECE_BYTES = 4 * 2**20

#: devices where ``"fast"`` precision takes bfloat16 candidates (the CPU has no fast bfloat16 product here)
FAST_DEVICES = ("cuda",)


def candidate_dtype(device: torch.device) -> torch.dtype:
    """The dtype of the products that choose k-NN candidates on ``device``: bfloat16 under the ``"fast"`` precision
    of the compute context on a GPU (cosine graphs, then re-ranked exactly; their recall is measured by
    :func:`~.neighbours.fast_recall}`), float32 otherwise."""
    return torch.bfloat16 if current().precision == "fast" and device.type in FAST_DEVICES else torch.float32


@dataclass(frozen=True)
class Product:
    r"""How the candidate products of an exact k-NN search are computed, and how far they can be from the
    float64 products they stand for.

    ``bits``: significand bits (with the implicit one) the inputs are rounded to before the product —
    24 (float32 as is), 8 (bfloat16) or 11 (TF32); the rounded values are held in float32 tensors, so the
    hardware's own conversion to the narrower format is exact whatever its rounding mode. ``unit``: a bound
    on the relative error of one addition of the float32 accumulation (IEEE round to nearest: 2^-24; GPU
    tensor cores, which truncate and align blocks of products: 2^-21, a margin of 8 over round to nearest,
    after Fasi et al. 2021, *Numerical behavior of NVIDIA tensor cores*, PeerJ CS 7:e330).
    ``products_exact``: whether each elementwise product of two rounded inputs is exact in float32
    (8 + 8 and 11 + 11 significand bits fit 24; two float32 inputs do not). ``out_bits``: significand bits of
    the products as returned: 24 (float32), or 8 (bfloat16: the float32 accumulation rounded once, a
    monotone rounding, which :func:`round_down` thresholds account for).
    """

    name: str
    bits: int
    unit: float
    products_exact: bool
    out_bits: int = 24
    #: TF32 split (``tf32x3``): the inputs are rounded to 22 bits, :math:`\tilde x = h + l` with
    #: :math:`h = \mathrm{TF32}(\tilde x)` and :math:`l = \tilde x - h` (exactly TF32), and the product is
    #: :math:`h\cdot l' + l\cdot h' + h\cdot h'` in three TF32 passes (:meth:`mm`; :meth:`accumulation`)
    split: bool = False

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the tensors multiplied and of the products."""
        return torch.bfloat16 if self.out_bits == 8 else torch.float32

    def rounded(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (float32 or float64) rounded to nearest (ties to even) to ``bits`` significand bits, as
        float32; subnormal results are flushed to zero (as DAZ/FTZ hardware reads them)."""
        x = x.float()
        if self.split:  # 22 bits, then h + l with both halves normal (a subnormal half is flushed, as FTZ reads it)
            hi, lo = _split(_flushed(_round_bits(x, 22)))
            return hi + lo
        if self.bits == 8:
            x = x.to(torch.bfloat16).float()
        elif self.bits == 11:  # TF32: 10 stored fraction bits of float32's 23
            x = _round_bits(x, 11)
        elif self.bits != 24:
            raise ValueError(f"no rounding to {self.bits} significand bits")
        return x if self.bits == 24 else _flushed(x)

    def accumulation(self, d: int) -> float:
        r"""The coefficient :math:`A_d` of :math:`\lVert\tilde x\rVert\lVert\tilde y\rVert` in
        :func:`product_bound`: how far the computed product of two rounded inputs of d elements can be from their
        exact dot product :math:`\tilde x\cdot\tilde y`.

        One pass: :math:`\gamma_{d+1}` (the float32 accumulation, Higham 2002 §3.1; each product exact or
        rounded once). The split (:attr:`split`, :meth:`mm`): with :math:`\tilde x = h + l`,
        :math:`|l_i| \le 2^{-11}|h_i|` (half an ulp of :math:`h_i`), so :math:`|h_i| \le \kappa|\tilde x_i|`,
        :math:`\kappa = 1/(1 - 2^{-11})`, and :math:`T_{hh} = \sum|h_i h'_i| \le \kappa^2\lVert\tilde x\rVert
        \lVert\tilde y\rVert`, :math:`T_{hl} + T_{lh} \le 2^{-10}\kappa^2\lVert\tilde x\rVert\lVert\tilde y\rVert`.
        The passes :math:`S_1 = fl(h\cdot l')`, :math:`S_2 = fl(S_1 + l\cdot h')`, :math:`S_3 = fl(S_2 + h\cdot h')`
        are sums of at most d + 1 exact terms each, so with :math:`g = \gamma_{d+1}`:
        :math:`|S_3 - (h\cdot h' + h\cdot l' + l\cdot h')| \le g\,T_{hh} + 3g(1 + g)^2 (T_{hl} + T_{lh})`;
        the omitted :math:`l\cdot l'` adds :math:`\le 2^{-22}\kappa^2\lVert\tilde x\rVert\lVert\tilde y\rVert`.
        So :math:`A_d = \kappa^2 (g + 3g(1 + g)^2 2^{-10} + 2^{-22})`: about :math:`\gamma_{d+1}`, while the inputs'
        rounding residuals shrink from :math:`2^{-11}` to :math:`2^{-22}` of their norms."""
        m = d + 1
        g = m * self.unit / (1 - m * self.unit)
        if not self.split:
            return g
        kappa2 = 1 / (1 - 2.0**-11) ** 2
        return kappa2 * (g + 3 * g * (1 + g) ** 2 * 2.0**-10 + 2.0**-22)

    def mm(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The candidate products ``a @ b`` of rounded inputs (:meth:`rounded`), inside :meth:`matmul`: one product,
        or for the split three TF32 passes, the small cross terms first (:meth:`accumulation`)."""
        if not self.split:
            return torch.matmul(a, b, out=out)
        a_hi, a_lo = _split(a)
        b_hi, b_lo = _split(b)
        with _tf32():
            out = torch.matmul(a_hi, b_lo, out=out)
            out.addmm_(a_lo, b_hi)
            return out.addmm_(a_hi, b_hi)

    @contextmanager
    def matmul(self) -> Iterator[None]:
        """Products of float32 tensors inside the block computed with this product's inputs: IEEE float32
        for ``fp32``; bfloat16 (oneDNN) or TF32 (cuBLAS) arithmetic with float32 accumulation and output
        for the others, whose inputs :meth:`rounded` already holds exactly. :func:`candidate_mm` inside the block
        computes this product's candidates (:meth:`mm`)."""
        _ACTIVE.append(self)
        try:
            with self._precision():
                yield
        finally:
            _ACTIVE.pop()

    @contextmanager
    def _precision(self) -> Iterator[None]:
        with exact_matmul():
            if self.dtype == torch.bfloat16:  # bfloat16 tensors: float32 accumulation, also across split-K parts
                with _setting(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False):
                    yield
                return
            if self.bits == 24 or self.split:  # the split's passes set TF32 themselves (:meth:`mm`); a plain
                yield  # product of its 22-bit inputs stays IEEE float32, well within its bound
                return
            backend = torch.backends.mkldnn.matmul if self.bits == 8 else torch.backends.cuda.matmul
            if not hasattr(backend, "fp32_precision"):  # torch < 2.9: the legacy switches
                saved = torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32
                torch.set_float32_matmul_precision("medium")
                torch.backends.cuda.matmul.allow_tf32 = True
                try:
                    yield
                finally:
                    torch.set_float32_matmul_precision(saved[0])
                    torch.backends.cuda.matmul.allow_tf32 = saved[1]
                return
            backend.fp32_precision = "bf16" if self.bits == 8 else "tf32"
            yield  # exact_matmul restores the caller's setting


#: the products whose :meth:`Product.matmul` blocks are open (the innermost last; worker threads see them too)
_ACTIVE: list[Product] = []


def candidate_mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b`` of candidate inputs as the innermost open :meth:`Product.matmul` block computes them
    (:meth:`Product.mm`: the split's three TF32 passes), a plain product outside one."""
    return _ACTIVE[-1].mm(a, b, out=out) if _ACTIVE else torch.matmul(a, b, out=out)


def _round_bits(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Float32 ``x`` rounded to nearest, ties to even, to ``bits`` significand bits (by its bit pattern)."""
    drop = 24 - bits
    i = x.view(torch.int32)
    return ((i + ((1 << (drop - 1)) - 1) + ((i >> drop) & 1)) & ~((1 << drop) - 1)).view(torch.float32)


def _flushed(x: torch.Tensor) -> torch.Tensor:
    """Subnormal values of float32 ``x`` flushed to zero (as DAZ/FTZ hardware reads them)."""
    return torch.where(x.abs() < torch.finfo(torch.float32).tiny, torch.zeros_like(x), x)


def _split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, l)`` of float32 values of at most 22 significand bits: :math:`h` = TF32 of x, :math:`l = x - h`, both
    exactly TF32 (l is a multiple of x's 22nd bit at most half an ulp of h: 11 bits), a subnormal l flushed."""
    hi = _round_bits(x, 11)
    return hi, _flushed(x - hi)


@contextmanager
def _setting(owner, name: str, value) -> Iterator[None]:
    """``owner.name = value`` inside the block, the previous value restored after it (also after an error)."""
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


@contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """Torch's CPU operations on one thread inside the block (the count restored after it): for loops of small
    operations, whose every call the pool's threads would otherwise synchronise on; the same results."""
    if device.type != "cpu":
        yield
        return
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _tf32():
    """TF32 products of float32 tensors on a GPU inside the block (the CPU multiplies them in IEEE float32)."""
    backend = torch.backends.cuda.matmul
    if not hasattr(backend, "fp32_precision"):  # torch < 2.9: the legacy switch
        return _setting(backend, "allow_tf32", True)
    return _setting(backend, "fp32_precision", "tf32")


#: candidate products of exact searches: float32; bfloat16 inputs (CPUs with AVX-512 BF16 or AMX);
#: TF32 inputs (GPUs of compute capability 8.0 and later); 22-bit inputs in three TF32 passes (the split)
FP32 = Product("fp32", 24, 2.0**-24, False)
BF16 = Product("bf16", 8, 2.0**-24, True, out_bits=8)
TF32 = Product("tf32", 11, 2.0**-21, True)
TF32X3 = Product("tf32x3", 22, 2.0**-21, True, split=True)
PRODUCTS = {p.name: p for p in (FP32, BF16, TF32, TF32X3)}
#: the candidate product of exact searches: None (the fastest this device has: :func:`exact_product`) or
#: one of ``"fp32"``, ``"bf16"``, ``"tf32"``, ``"tf32x3"`` (tests and benchmarks force a path with it)
CANDIDATES: str | None = None


def product_bound(q_norm: torch.Tensor, q_err: torch.Tensor, c_norm: float, c_err: float, c_rounded_norm: float,
                  d: int, product: Product, offset: torch.Tensor | float = 0.0) -> torch.Tensor:
    r"""A bound :math:`B_i` on :math:`|\tilde p_{ij} - \hat s_{ij}|` for every corpus row j: the candidate
    product of query row i against the float64 score the lists are ordered by.

    With :math:`x` and :math:`y` the float64 query and corpus rows (unit rows for cosine; the augmented
    rows for euclidean), :math:`\tilde x, \tilde y` their rounded inputs (:meth:`Product.rounded`) and
    :math:`e_x = \lVert\tilde x - x\rVert_2`, :math:`e_y = \lVert\tilde y - y\rVert_2` the rounding
    residuals, measured in float64:

    * rounding of the inputs, by Cauchy–Schwarz on
      :math:`\tilde x\cdot\tilde y - x\cdot y = \tilde x\cdot(\tilde y - y) + (\tilde x - x)\cdot y`:
      :math:`\le \lVert\tilde x\rVert e_y + e_x \lVert y\rVert`;
    * the float32 accumulation of the d products (each exact for bf16/TF32 inputs, else rounded once): in any
      summation order :math:`|fl(\sum a_l) - \sum a_l| \le \gamma_m \sum |a_l|` with
      :math:`\gamma_m = m u/(1 - m u)`, m = d + 1 and u = ``product.unit`` (Higham 2002, *Accuracy and
      Stability of Numerical Algorithms*, §3.1), and :math:`\sum|\tilde x_l \tilde y_l| \le
      \lVert\tilde x\rVert\lVert\tilde y\rVert`; the split's three passes: :meth:`Product.accumulation`;
    * flushed subnormal products and partial sums: at most :math:`2(d + 1)\,2^{-126}` a pass;
    * the float64 score itself (unit roundoff :math:`2^{-53}`, at most d + 3 operations, whose operands are at
      most :math:`\lVert x\rVert\lVert y\rVert` plus the row's ``offset``, :math:`\lVert q\rVert^2` for
      euclidean): :math:`4\gamma^{(64)}_{d+3}(\lVert x\rVert\lVert y\rVert + \text{offset})`, with
      :math:`\lVert x\rVert \le \lVert\tilde x\rVert + e_x`.

    For the whole corpus the corpus terms are their maxima: ``c_norm`` :math:`=\max_j\lVert y_j\rVert`,
    ``c_err`` :math:`=\max_j e_{y_j}`, ``c_rounded_norm`` :math:`=\max_j\lVert\tilde y_j\rVert`;
    ``q_norm`` and ``q_err`` are the query rows' :math:`\lVert\tilde x\rVert` and :math:`e_x`. Unit rows in
    bfloat16 (u = 2^-8 per element) give :math:`B \le 2^{-7}` and in practice about
    :math:`3\cdot10^{-3}`; float32 inputs about :math:`(d + 3)\,2^{-24}`.
    """
    m = d + 1
    gamma = product.accumulation(d)
    gamma64 = (d + 3) * 2.0**-53 / (1 - (d + 3) * 2.0**-53)
    q_norm64 = q_norm.double()
    return (q_norm64 * c_err + q_err.double() * c_norm + gamma * q_norm64 * c_rounded_norm
            + 2 * m * 2.0**-126 * (3 if product.split else 1) + 4 * gamma64 * ((q_norm64 + q_err.double()) * c_norm + offset))


def round_down(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The largest value of ``dtype`` (float32 or bfloat16) at or below each element of the float64 ``x``: a
    threshold that keeps every product a faithful rounding of a value at or above ``x`` can give."""
    y = x.float()
    y = torch.where(y.double() > x, torch.nextafter(y, torch.full_like(y, -torch.inf)), y)
    if dtype == torch.float32:
        return y
    z = y.to(torch.bfloat16)
    bits = z.view(torch.int16)
    lower = torch.where(z > 0, bits - 1, torch.where(z < 0, bits + 1, torch.full_like(bits, -32767)))
    return torch.where(z.float() > y, lower.view(torch.bfloat16), z)


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX-BF16 in ``/proc/cpuinfo``) and torch's
    oneDNN backend can use it: then a bfloat16 product runs at about twice the float32 rate or more."""
    return bool(_cpu_flags() & {"avx512_bf16", "amx_bf16"})


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> frozenset:
    if not torch.backends.mkldnn.is_available():
        return frozenset()
    try:
        with open("/proc/cpuinfo") as f:
            line = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.split(":", 1)[-1].split())


def exact_product(device: torch.device, metric: str = "cosine") -> Product:
    r"""The fastest candidate product of exact searches on ``device`` (:data:`CANDIDATES` overrides):
    TF32 on a GPU of compute capability 8.0 or later, bfloat16 on a CPU with native bfloat16
    (:func:`cpu_has_bf16`), else float32.

    Euclidean searches on the CPU take float32: their candidate scores :math:`2q\cdot x - \lVert x\rVert^2`
    are of the size of the squared norms, which a bfloat16 output resolves only to :math:`2^{-8}` of them, far
    coarser than the gaps between neighbours, so nearly every row would be re-scored (20,000 x 384, k = 50:
    14.6 s in bfloat16 against 2.1 s in float32).

    A GPU keeps one TF32 pass rather than the split (:data:`TF32X3`, three passes): the split pays only when it
    spares more re-scored entries a row than its two extra passes cost, :math:`4nd` flops against :math:`8d` bytes
    gathered an entry, about n/240 entries on an H100 (3.35 TB/s, ~400 TFLOP/s TF32). Its bound at 768 dimensions
    is 2.2 times tighter (3.7e-4 against 8.1e-4, both mostly the accumulation allowance), and emulated on 100,000
    clustered rows (64 centres, k = 10) it spares 0.85 entries a row within B (11.51 against 10.66; tight clusters
    19.05 against 13.42): 75 to 500 times too few at any n, since both counts grow with n."""
    if CANDIDATES is not None:
        return PRODUCTS[CANDIDATES]
    if device.type == "cuda":
        return TF32 if torch.cuda.get_device_capability(device)[0] >= 8 else FP32
    return BF16 if cpu_has_bf16() and metric != "euclidean" else FP32


def mask_indices(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``mask.nonzero(as_tuple=True)`` of a 2-D boolean mask: its (rows, columns) in row-major order. On the CPU by
    NumPy's ``flatnonzero``, six times faster than torch's ``nonzero`` on the sparse masks of the sweeps' merges
    (1,024 x 128: 0.02 against 0.13 ms)."""
    if mask.device.type != "cpu":
        return mask.nonzero(as_tuple=True)
    rows, cols = np.divmod(np.flatnonzero(mask.numpy()), max(mask.shape[1], 1))
    return torch.from_numpy(rows), torch.from_numpy(cols)


def true_indices(mask: torch.Tensor) -> torch.Tensor:
    """``mask.nonzero().squeeze(1)`` of a 1-D boolean mask (on the CPU by NumPy, as :func:`mask_indices`)."""
    return torch.from_numpy(np.flatnonzero(mask.numpy())) if mask.device.type == "cpu" else mask.nonzero().squeeze(1)


def chunk_budget() -> int:
    """Bytes one chunk of work may use: a sixteenth of the context's memory budget when one was set, else
    :data:`CHUNK_BYTES` (read at call time: tests shrink it to force many chunks)."""
    import sys

    return int(current().share("chunk") or sys.modules[__name__].CHUNK_BYTES)


class RowMap:
    """The rows of ``base`` through a row-wise torch ``transform``, computed where they are read.

    What :func:`~embeval_report.kernels.transforms.apply_rows` returns instead of a float32 copy when the copy
    would not fit in the memory budget (:mod:`.budget`): indexing rows (a slice or an index array) reads those
    rows of ``base`` (float64, on ``device``), transforms them and returns float32, as the copy holds them,
    so chunked kernels stream over it like over a memory map. Nothing else of an array is supported.
    """

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(self, base, transform, device):
        self.base, self.transform, self.device = as_numpy(base), transform, torch.device(device)
        self.shape = (int(self.base.shape[0]), int(self.base.shape[1]))

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * 4

    def __getitem__(self, rows) -> np.ndarray:
        if isinstance(rows, tuple):
            raise TypeError("a RowMap is indexed by rows only (a slice or an index array)")
        x = to_tensor(np.atleast_2d(self.base[rows]), dtype=torch.float64, device=self.device)
        out = self.transform(x).to(torch.float32).cpu().numpy()
        return out[0] if np.ndim(rows) == 0 and not isinstance(rows, slice) else out


def as_numpy(X) -> np.ndarray:
    """Return a 2-D float array view of a numpy array or torch tensor (no copy when possible); a
    :class:`RowMap` is returned as it is."""
    if isinstance(X, RowMap):
        return X
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu().numpy()
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array of shape (n, d), got shape {X.shape}")
    return X


#: share of the free GPU memory one batched step of the re-scoring may take (:func:`step_budget`)
GPU_STEP_SHARE = 0.1


def free_memory(device: torch.device) -> int:
    """Bytes free on a GPU (``torch.cuda.mem_get_info``; tests give a fake size by replacing it)."""
    return int(torch.cuda.mem_get_info(device)[0])


def step_budget(device: torch.device) -> int:
    """Bytes one batched step of work whose calls each wait for the device may use: on a GPU
    :data:`GPU_STEP_SHARE` of its free memory (at least :func:`chunk_budget`), so that the re-scoring of a query
    block takes a few large calls instead of one per chunk of a CPU budget (256 MiB: about 1,000 rows of 14
    candidates of 768 dimensions, 30 calls for a block of 30,000 rows); elsewhere :func:`chunk_budget`."""
    if torch.device(device).type != "cuda":
        return chunk_budget()
    return max(chunk_budget(), int(GPU_STEP_SHARE * free_memory(torch.device(device))))


def chunk_rows(n_rows: int, row_bytes: int, budget: int | None = None) -> int:
    """Number of rows per chunk so that one chunk uses at most ``budget`` bytes (default :func:`chunk_budget`)."""
    budget = chunk_budget() if budget is None else budget
    return int(max(1, min(n_rows, budget // max(row_bytes, 1))))


def cache_rows(n_rows: int, row_bytes: int, device: torch.device) -> int:
    """Rows per piece of a gather-then-reduce loop with ``row_bytes`` of temporaries a row: a chunk of the budget
    (:func:`chunk_rows`), on the CPU at most :data:`CACHE_PIECE_BYTES`, so that the gathered rows are still in
    cache for the reduction. Each row is reduced alone: the values do not depend on the piece size."""
    rows = chunk_rows(n_rows, row_bytes)
    return min(rows, max(1, CACHE_PIECE_BYTES // max(row_bytes, 1))) if device.type == "cpu" else rows


def iter_chunks(X, *, device: torch.device, dtype=torch.float64, rows: int | None = None,
                desc: str | None = None) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, chunk)`` with ``chunk = X[start:start+rows]`` as a tensor on ``device`` (read from the
    device copy of ``X`` inside :func:`resident`: the same chunks, the same values)."""
    X = as_numpy(X)
    n, d = X.shape
    rows = rows or chunk_rows(n, d * 8 * 4)
    starts = range(0, n, rows)
    if desc:
        starts = progress(starts, desc=desc, total=len(starts))
    held = _resident_copy(X, torch.device(device))
    for s in starts:
        yield s, (to_tensor(X[s:s + rows], dtype=dtype, device=device) if held is None
                  else held[s:s + rows].to(dtype, copy=True))  # a chunk of its own, as an upload gives


#: arrays with a device copy (:func:`resident`): id -> (array, device tensor)
_RESIDENT: dict[int, tuple[np.ndarray, torch.Tensor]] = {}
#: share of the free GPU memory a resident copy may take
RESIDENT_SHARE = 0.25


def _resident_copy(X, device: torch.device) -> torch.Tensor | None:
    """The device copy of ``X`` made by :func:`resident` when it is on ``device`` (``cuda`` is ``cuda:0``'s name
    when no index is given), else None."""
    held = _RESIDENT.get(id(X))
    if held is None or held[0] is not X or held[1].device.type != device.type:
        return None
    return held[1] if device.index is None or held[1].device.index == device.index else None


def _resident_rows(a, device: torch.device) -> torch.Tensor | None:
    """The rows of the device copy (:func:`resident`) that ``a`` is: the held array itself, or whole consecutive
    rows of it (``X[s:e]``, what a search's query blocks and a pass's chunks are, found by their address); else
    None."""
    if not _RESIDENT or not isinstance(a, np.ndarray) or a.ndim != 2:
        return None
    for base, _ in list(_RESIDENT.values()):
        if a is base:
            return _resident_copy(base, device)
        step = base.strides[0]
        offset = a.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        if (a.shape[1:] != base.shape[1:] or a.dtype != base.dtype or step <= 0 or offset % step
                or (len(a) > 1 and a.strides[0] != step) or a.strides[1:] != base.strides[1:]
                or not 0 <= offset // step <= len(base) - len(a)):
            continue
        held = _resident_copy(base, device)
        return None if held is None else held[offset // step:offset // step + len(a)]
    return None


@contextmanager
def resident(X, device) -> Iterator[None]:
    """Inside the block, every :func:`iter_chunks` pass over ``X`` on a GPU reads one device copy of it, uploaded
    once (in its own dtype, :func:`upload`), instead of uploading the rows again for each pass (isotropy of
    1M x 768 makes three passes); so does every :func:`to_tensor` of ``X`` or of a slice of its rows (a search's
    corpus and query blocks: one upload for the whole search). Nothing changes on the CPU, for a set that is not
    a numpy array, or when the copy would take more than :data:`RESIDENT_SHARE` of the free device memory."""
    device = torch.device(device)
    X = as_numpy(X)
    if (device.type != "cuda" or not isinstance(X, np.ndarray) or id(X) in _RESIDENT
            or X.nbytes > RESIDENT_SHARE * free_memory(device)):
        yield
        return
    _RESIDENT[id(X)] = (X, to_tensor(X, dtype=None, device=device))
    try:
        yield
    finally:
        del _RESIDENT[id(X)]


def to_tensor(a, *, dtype: torch.dtype | None = torch.float32, device="cpu") -> torch.Tensor:
    """``a`` (numpy, possibly a read-only memory map) as a contiguous tensor; kernels never write into it.
    ``dtype`` None: its own dtype (on the CPU a contiguous array is then a view, not a copy).

    To a GPU the rows travel in the narrower of their own and the target dtype (a float32 set asked
    for as float64 is uploaded as float32 and widened on the device, exactly; :func:`upload`).
    """
    held = _resident_rows(a, torch.device(device))
    if held is not None:  # rows of a set held on the device (:func:`resident`): no upload
        return held if dtype is None else held.to(dtype)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        if torch.device(device).type != "cuda":
            return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=device)
        host = torch.as_tensor(np.ascontiguousarray(a))
    return upload(host, dtype=host.dtype if dtype is None else dtype, device=device)


def upload(host: torch.Tensor, *, dtype: torch.dtype, device, pin: bool | None = None) -> torch.Tensor:
    """A host tensor on ``device`` as ``dtype``: narrowed on the host first when ``dtype`` is the narrower
    float (fewer bytes to move), widened on the device otherwise (exactly).

    ``pin`` (None: for a GPU, when the tensor is at most one chunk, :func:`chunk_budget`): through pinned memory,
    else a plain (pageable) copy. Measured on an H200: chunks of a pass moved twice as fast pinned (the allocator
    reuses the pinned buffers), while pinning a whole set took longer than its copy (1.2 GB pinned at 2.8 GB/s;
    a pageable copy of 3 GB took about 0.35 s)."""
    if host.dtype.is_floating_point and dtype.is_floating_point and dtype.itemsize < host.dtype.itemsize:
        host = host.to(dtype)  # narrowing: on the host
    if pin is None:
        pin = torch.device(device).type == "cuda" and host.numel() * host.element_size() <= chunk_budget()
    if pin:
        host = host.pin_memory()
    return host.to(device, non_blocking=pin).to(dtype)


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """L2-normalise rows (zero rows stay zero)."""
    return x / x.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


@contextmanager
def exact_matmul():
    """Full float32 products inside the block, whatever the caller set globally.

    ``torch.set_float32_matmul_precision("high")`` (or ``allow_tf32``) would silently let float32
    products run in TF32/bf16 and change neighbour lists; the kernels compute under this guard
    (IEEE float32 on the CUDA and oneDNN backends) and restore the caller's settings afterwards.
    """
    backends = [torch.backends.cuda.matmul, torch.backends.mkldnn.matmul]
    if not all(hasattr(b, "fp32_precision") for b in backends):  # torch < 2.9: the legacy switches
        precision, tf32 = torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(precision)
            torch.backends.cuda.matmul.allow_tf32 = tf32
        return
    saved = [b.fp32_precision for b in backends]
    for b in backends:
        b.fp32_precision = "ieee"
    try:
        yield
    finally:
        for b, value in zip(backends, saved):
            b.fp32_precision = value
