"""The documentation keeps up with the code: every manifest field (in the schema's own wording), every
chapter, every command-line subcommand and option is documented, and every relative link resolves."""
import argparse
import re
from pathlib import Path

import pytest

from embeval_report.cli import build_parser
from embeval_report.io.manifest import MANIFEST_FIELDS
from embeval_report.chapters.registry import discover

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS, ROOT / "benchmarks" / "README.md"]
#: pages other branches of issue 25 write (comparing models, monitoring): links to them, and the options of
#: the subcommands they document, are checked once they exist
def _flat(text: str) -> str:
    return " ".join(text.split())


def _prose(text: str) -> str:
    """Markdown without fenced code blocks and inline code spans (links there are not links)."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _all_docs() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in PAGES if p.exists())


# ------------------------------------------------------------------ manifest


MANIFEST_DOC = ROOT / "docs" / "manifest.md"


@pytest.mark.parametrize("name", list(MANIFEST_FIELDS))
def test_every_manifest_field_is_documented_in_the_schemas_words(name):
    text = _flat(MANIFEST_DOC.read_text(encoding="utf-8"))
    field = MANIFEST_FIELDS[name]
    assert f"`{name}`" in text, f"docs/manifest.md does not document field {name!r}"
    assert _flat(field.description) in text, \
        f"docs/manifest.md: field {name!r} lacks the schema's description {field.description!r}"
    for key, sub in field.keys.items():
        assert f"`{key}`" in text, f"docs/manifest.md does not document key {key!r} of field {name!r}"
        assert _flat(sub.description) in text, \
            f"docs/manifest.md: key {key!r} of field {name!r} lacks the schema's description {sub.description!r}"


# ------------------------------------------------------------------ chapters


def _chapters() -> list[dict]:
    return [{"name": c.name, "title": c.title} for c in discover()]


@pytest.mark.parametrize("chapter", _chapters(), ids=lambda m: m["name"])
def test_every_chapter_has_a_row_and_a_section(chapter):
    text = (ROOT / "docs" / "chapters.md").read_text(encoding="utf-8")
    row = re.search(rf"^\| `{re.escape(chapter['name'])}` \| \[{re.escape(chapter['title'])}\]\(#", text, re.M)
    assert row, f"docs/chapters.md: no table row for chapter {chapter['name']!r} titled {chapter['title']!r}"
    assert re.search(rf"^## {re.escape(chapter['title'])}$", text, re.M), \
        f"docs/chapters.md: no section '## {chapter['title']}'"


# ------------------------------------------------------------------ command line


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the command line has no subcommands")


def test_every_subcommand_is_in_the_readme():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in _subcommands():
        assert f"embeval-report {name}" in text, f"README.md never shows `embeval-report {name}`"


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_option_is_documented(command):
    text = _all_docs()
    options = [o for a in _subcommands()[command]._actions for o in a.option_strings if o.startswith("--")]
    missing = [o for o in options if o != "--help" and not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text)]
    assert not missing, f"`embeval-report {command}` options not in README.md or docs/: {missing}"


# ------------------------------------------------------------------ links


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: links reduced to their text, lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    text = re.sub(r"^(```|~~~).*?^\1", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    for m in re.finditer(r"^#{1,6} +(.+?) *#*$", text, re.M):
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links():
    for page in PAGES:
        if not page.exists():
            continue
        for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)\)", _prose(page.read_text(encoding="utf-8"))):
            target = m.group(1)
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not checked
                yield pytest.param(page, target, id=f"{page.relative_to(ROOT)}->{target}")


@pytest.mark.parametrize("page, target", list(_links()))
def test_every_relative_link_resolves(page, target):
    file, _, anchor = target.partition("#")
    dest = (page.parent / file).resolve() if file else page
    assert dest.exists(), f"{page.relative_to(ROOT)}: link to {target!r}: no such file"
    if anchor:
        assert dest.suffix == ".md", f"{page.relative_to(ROOT)}: anchor {anchor!r} into a file that is not Markdown"
        assert anchor in _anchors(dest), \
            f"{page.relative_to(ROOT)}: link to {target!r}: no heading with that anchor in {dest.name}"


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"
    assert ".venv/bin/python -m pytest -q -n 2" in "\n".join(lines)
