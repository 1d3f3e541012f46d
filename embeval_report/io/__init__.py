"""Input: everything the user gives, loaded and validated before any chapter runs.

* :mod:`.manifest` — the manifest schema (every field) and its validation;
* :mod:`.vectors` — vectors files in every supported format, validated;
* :mod:`.embedding_set` — the :class:`EmbeddingSet` (vectors, ids, metadata) and id matching;
* :mod:`.side_data` — every other manifest field (runs, snapshots, edges, pairs, ...), loaded
  through one registry so that a bad file is reported before any chapter runs;
* :mod:`.prepared` — the validated cache the chapters read.

Bad input raises :class:`~embeval_report.errors.InputError` naming the file, the row or field,
and what was expected.
"""
from .embedding_set import (GROUP_COLUMNS, KIND_COLUMNS, EmbeddingSet, MatchedVectors, category_column, group_column,
                            iter_groups, kind_column, load_matched, load_source)
from .manifest import CORE_FIELDS, FIELD_KINDS, MANIFEST_FIELDS, MANIFEST_SUFFIXES, ManifestField, read_manifest
from .prepared import load_prepared, save_prepared
from .vectors import VECTOR_FORMATS, load_vectors

__all__ = ["CORE_FIELDS", "FIELD_KINDS", "MANIFEST_FIELDS", "MANIFEST_SUFFIXES", "VECTOR_FORMATS", "EmbeddingSet",
           "GROUP_COLUMNS", "KIND_COLUMNS", "ManifestField", "MatchedVectors", "category_column", "group_column", "iter_groups", "kind_column", "load_matched", "load_prepared",
           "load_source", "load_vectors", "read_manifest", "save_prepared"]
