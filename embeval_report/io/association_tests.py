r"""Fairness inputs: the protected-attribute columns (``fairness:``) and WEAT-style association tests
(``association_tests:``).

**``fairness: {attributes: [gender, region], label: label}``** names metadata columns that hold a
protected attribute of each entity (entities without a value are left out of that attribute's
groups and counted); ``label`` (default ``label``) is the column the node-classification probe and
the neighbourhood label agreement use. :func:`read_fairness_spec` checks the columns exist.

**``association_tests:``** a file of WEAT tests (Caliskan, Bryson & Narayanan 2017). Each test has a
name, exactly two *target* sets (e.g. two genres' titles) and two *attribute* sets (e.g. two groups
of users); a "word" is an id of the embedding set. Two formats, told apart by the suffix:

* YAML (``.yaml`` / ``.yml``) — a list of tests, or a mapping with key ``tests`` holding that list::

      - name: animation vs documentary titles ~ younger vs older viewers
        targets:
          animation: [item_00001, item_00017]
          documentary: [item_00003, item_00042]
        attributes:
          younger viewers: [user_00001, user_00008]
          older viewers: [user_00002, user_00005]

* CSV / TSV with a header row ``test, role, set, word`` (``role`` is ``target`` or ``attribute``), one
  word per row.

Words absent from the embedding set are *not* an error: the chapter counts and reports them (and
runs a test only when each target set keeps at least :data:`MIN_WORDS` words and each attribute set one).
Malformed files raise
:class:`~embeval_report.errors.InputError` naming the file, the test (or row) and the field: a test
without a name or with a repeated name, not exactly two target or two attribute sets, an empty set,
a word listed twice in one set, a word in both target sets.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .files import describe, existing_file, read_text
from .limits import load_yaml

#: words (in the vocabulary) each target set of a test needs for the test to run
MIN_WORDS = 2
ROLES = ("target", "attribute")
CSV_COLUMNS = ("test", "role", "set", "word")


@dataclass(frozen=True)
class WordSet:
    """A named set of words (ids of the embedding set), in file order."""

    name: str
    words: tuple[str, ...]


@dataclass(frozen=True)
class AssociationTest:
    """One WEAT test: target sets X, Y and attribute sets A, B."""

    name: str
    targets: tuple[WordSet, WordSet]
    attributes: tuple[WordSet, WordSet]

    @property
    def sets(self) -> tuple[WordSet, ...]:
        return (*self.targets, *self.attributes)


@dataclass(frozen=True)
class FairnessSpec:
    """The ``fairness:`` manifest field, checked against the metadata."""

    attributes: tuple[str, ...]
    label: str = "label"


def read_fairness_spec(es, value: dict) -> FairnessSpec:
    """The ``fairness`` mapping, its attribute columns checked against ``es.metadata``."""
    attrs = tuple(value.get("attributes") or ())
    label = value.get("label") or "label"
    where = "manifest field 'fairness', key 'attributes'"
    if es.metadata is None:
        raise InputError(f"{where}: names metadata columns ({', '.join(attrs)}) but the manifest has no `metadata` "
                         "table; expected a metadata table with an 'id' column and those columns")
    cols = [str(c) for c in es.metadata.columns]
    for a in attrs:
        if a not in cols:
            raise InputError(f"{where}: column {a!r} is not in the metadata table (columns: {', '.join(cols)}); "
                             "expected the name of a metadata column holding a protected attribute")
    dup = [a for i, a in enumerate(attrs) if a in attrs[:i]]
    if dup:
        raise InputError(f"{where}: column {dup[0]!r} is named twice; expected distinct columns")
    return FairnessSpec(attrs, str(label))


def read_association_tests(path, *, label: str | None = None) -> list[AssociationTest]:
    """Read a file of WEAT tests (YAML or CSV/TSV, see the module docstring)."""
    path = existing_file(path, label)
    label = label or path.name
    text = read_text(path, label)
    if path.suffix.lower() in (".yaml", ".yml"):
        tests = _from_yaml(text, label)
    elif path.suffix.lower() in (".csv", ".tsv", ".txt"):
        tests = _from_csv(text, label, "\t" if path.suffix.lower() == ".tsv" or "\t" in text.split("\n", 1)[0] else ",")
    else:
        raise InputError(f"{label}: unknown format {path.suffix or '(no extension)'!r}; expected a YAML file "
                         "(.yaml/.yml) or a table (.csv/.tsv) with columns test, role, set, word")
    if not tests:
        raise InputError(f"{label}: no association test; expected at least one test with two target and two "
                         "attribute sets")
    return tests


def _from_yaml(text: str, label: str) -> list[AssociationTest]:
    raw = load_yaml(text, label)
    if isinstance(raw, dict) and "tests" in raw:
        raw = raw["tests"]
    if not isinstance(raw, list):
        raise InputError(f"{label}: expected a list of tests (or a mapping with key 'tests'), found {describe(raw)}")
    tests = []
    for i, item in enumerate(raw, 1):
        where = f"{label}, test {i}"
        if not isinstance(item, dict):
            raise InputError(f"{where}: expected a mapping with keys name, targets, attributes, found {describe(item)}")
        unknown = [k for k in item if k not in ("name", "targets", "attributes")]
        if unknown:
            raise InputError(f"{where}: unknown key {unknown[0]!r}; expected keys name, targets, attributes")
        name = item.get("name")
        if not isinstance(name, (str, int, float)) or not str(name).strip():
            raise InputError(f"{where}, key 'name': expected a non-empty name, found {describe(name)}")
        name = str(name).strip()
        where = f"{label}, test {name!r}"
        sets = {}
        for role in ("targets", "attributes"):
            block = item.get(role)
            if not isinstance(block, dict):
                raise InputError(f"{where}, key {role!r}: expected a mapping of two named word lists, "
                                 f"found {describe(block)}")
            sets[role] = []
            for set_name, words in block.items():
                if isinstance(words, str):
                    words = words.split()
                if not isinstance(words, list):
                    raise InputError(f"{where}, {role[:-1]} set {str(set_name)!r}: expected a list of words (ids), "
                                     f"found {describe(words)}")
                nested = next((i for i, w in enumerate(words, 1) if isinstance(w, (list, dict))), None)
                if nested is not None:
                    raise InputError(f"{where}, {role[:-1]} set {str(set_name)!r}, item {nested}: expected a word "
                                     f"(an id), found {describe(words[nested - 1])}")
                sets[role].append((str(set_name), [str(w).strip() for w in words if w is not None and str(w).strip()]))
        tests.append(_make_test(name, sets["targets"], sets["attributes"], where))
    return _check_names(tests, label)


def _from_csv(text: str, label: str, sep: str) -> list[AssociationTest]:
    lines = [line for line in text.splitlines()]
    first = next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")), None)
    if first is None:
        raise InputError(f"{label}: empty file; expected a header row test, role, set, word and one word per row")
    reader = csv.reader(io.StringIO("\n".join(lines[first:])), delimiter=sep)
    header = [h.strip().lower() for h in next(reader)]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{label}, line {first + 1}: the header row has no {' or '.join(missing)} column; "
                         f"expected columns {', '.join(CSV_COLUMNS)}")
    pos = {c: header.index(c) for c in CSV_COLUMNS}
    order: dict[str, dict[str, dict[str, list[str]]]] = {}
    for r, fields in enumerate(reader, 1):
        if not any(f.strip() for f in fields):
            continue
        where = f"{label}, row {r} (line {first + 1 + r})"
        if len(fields) < len(header):
            raise InputError(f"{where}: found {len(fields)} field(s); expected {len(header)} as in the header row")
        test, role, set_name, word = (fields[pos[c]].strip() for c in CSV_COLUMNS)
        for col, v in (("test", test), ("set", set_name), ("word", word)):
            if not v:
                raise InputError(f"{where}, column {col!r}: empty value; expected a {col} name")
        if role.lower() not in ROLES:
            raise InputError(f"{where}, column 'role': {role!r}; expected 'target' or 'attribute'")
        order.setdefault(test, {"target": {}, "attribute": {}})[role.lower()].setdefault(set_name, []).append(word)
    tests = [_make_test(name, list(parts["target"].items()), list(parts["attribute"].items()),
                        f"{label}, test {name!r}") for name, parts in order.items()]
    return _check_names(tests, label)


def _make_test(name: str, targets: list, attributes: list, where: str) -> AssociationTest:
    out = {}
    for role, sets in (("target", targets), ("attribute", attributes)):
        if len(sets) != 2:
            raise InputError(f"{where}: found {len(sets)} {role} set(s) ({', '.join(repr(s) for s, _ in sets)}); "
                             f"expected exactly two {role} sets")
        for set_name, words in sets:
            if not words:
                raise InputError(f"{where}, {role} set {set_name!r}: no words; expected at least one id")
            dup = [w for i, w in enumerate(words) if w in words[:i]]
            if dup:
                raise InputError(f"{where}, {role} set {set_name!r}: word {dup[0]!r} is listed twice; expected "
                                 "each word once per set")
        if sets[0][0] == sets[1][0]:
            raise InputError(f"{where}: both {role} sets are named {sets[0][0]!r}; expected two different names")
        out[role] = tuple(WordSet(s, tuple(w)) for s, w in sets)
    both = sorted(set(out["target"][0].words) & set(out["target"][1].words))
    if both:
        raise InputError(f"{where}: word {both[0]!r} is in both target sets; expected disjoint target sets")
    return AssociationTest(name, out["target"], out["attribute"])


def _check_names(tests: list[AssociationTest], label: str) -> list[AssociationTest]:
    names = [t.name for t in tests]
    dup = [n for i, n in enumerate(names) if n in names[:i]]
    if dup:
        raise InputError(f"{label}: test name {dup[0]!r} is used twice; expected one name per test")
    return tests


def vocabulary_rows(test: AssociationTest, ids) -> list[tuple[np.ndarray, tuple[str, ...]]]:
    """For the sets X, Y, A, B in order: the rows of the in-vocabulary words and the out-of-vocabulary words
    (counted and reported, never dropped silently)."""
    import pandas as pd

    index = pd.Index(np.asarray([str(i) for i in ids], dtype=object))
    out = []
    for ws in test.sets:
        rows = index.get_indexer(np.asarray(ws.words, dtype=object))
        out.append((rows[rows >= 0].astype(np.int64), tuple(w for w, r in zip(ws.words, rows) if r < 0)))
    return out
