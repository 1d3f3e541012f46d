"""Chunked torch kernels: GPU when present, BLAS on the CPU otherwise.

* :mod:`.device` — device choice, chunk sizes, row iteration and normalisation;
* :mod:`.moments` — first and second moments of row sets (covariance, cosine Gram);
* :mod:`.pairs` — random pairs, pair cosines and the exact all-pairs Gaussian potential;
* :mod:`.neighbours` — exact k nearest neighbours: one sweep over the Gram tiles feeds the plain and re-scored top-k and the
  rows' Gaussian potential; neighbour-set overlap;
* :mod:`.graph_cache` — one k-NN graph (and the other products of its sweep) per vector space per run, shared by the chapters;
* :mod:`.moments_cache` — one pass per run for the column mean, row sums and block moments of the memory-mapped set;
* :mod:`.transforms` (row transforms, all-but-the-top passes), :mod:`.spectra` (batched replicate spectra),
  :mod:`.silhouette`, :mod:`.rescoring` (CSLS, mutual proximity), :mod:`.edge_ranks` (link prediction's ranks),
  :mod:`.analogies`, :mod:`.mmd`, :mod:`.procrustes`: the torch parts of the metric modules, which hold none.
"""
from .device import as_numpy, chunk_budget, chunk_rows, iter_chunks, resolve_device, unit_rows
from .moments import BlockMoments, block_moments, column_mean
from .neighbours import knn, neighbour_sets_overlap, self_sweep
from .pairs import gaussian_potential_rows, pair_cosines, random_pairs, swept_potential_rows

__all__ = ["as_numpy", "chunk_budget", "chunk_rows", "iter_chunks", "resolve_device", "unit_rows", "BlockMoments",
           "block_moments", "column_mean", "knn", "neighbour_sets_overlap", "self_sweep",
           "gaussian_potential_rows", "pair_cosines", "random_pairs", "swept_potential_rows"]
