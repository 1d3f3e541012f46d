"""Chapter notebooks show; the package computes. Every notebook has the same parameters cell, one
setup call, and code cells that only call the chapter module's functions."""
import ast
from pathlib import Path

import nbformat
import pytest

import embeval_report
from embeval_report.chapters.registry import discover
from embeval_report.chapters.setup import PARAMETERS_CELL
from embeval_report.resources import notebooks_dir

NOTEBOOKS = sorted(notebooks_dir().glob("*.ipynb"))
#: names a notebook may use without importing them
BUILTINS = {"len", "print", "str", "dict", "list", "bool", "int", "float", "source", "prepared", "results_dir",
            "settings"}


def code_cells(path):
    nb = nbformat.read(path, as_version=4)
    return nb, [c for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_parameters_cell_is_identical_in_every_notebook(path):
    _, cells = code_cells(path)
    params = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and params[0].source == PARAMETERS_CELL, path.name
    assert cells[0] is params[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_computes_nothing(path):
    """Only embeval_report imports; no arithmetic, comprehensions or lambdas; calls only of imported names."""
    nb, cells = code_cells(path)
    imported, assigned = set(BUILTINS), set()
    for cell in cells[1:]:
        tree = ast.parse(cell.source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                assert module and module.startswith("embeval_report"), (path.name, module)
                imported |= {a.asname or a.name for a in node.names}
            assert not isinstance(node, (ast.BinOp, ast.AugAssign, ast.ListComp, ast.DictComp, ast.SetComp,
                                         ast.GeneratorExp, ast.Lambda, ast.Subscript, ast.Compare)), \
                (path.name, ast.unparse(node))
            if isinstance(node, ast.Assign):
                assigned |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            if isinstance(node, ast.Call):
                root = node.func
                while isinstance(root, ast.Attribute):
                    root = root.value
                assert isinstance(root, ast.Name) and root.id in imported | assigned, (path.name, ast.unparse(node))


@pytest.mark.parametrize("chapter", [c for c in discover()], ids=lambda c: c.name)
def test_one_setup_call_names_the_chapter(chapter):
    _, cells = code_cells(chapter.notebook)
    setup = cells[1].source
    if chapter.name == "summary":
        assert "summary.load_run(results_dir)" in setup
        return
    assert f'open_chapter("{chapter.name}", source, prepared, results_dir, settings)' in setup
    assert sum("open_chapter(" in c.source for c in cells) == 1
    assert "remove-input" in cells[1].metadata.get("tags", [])


#: headings of a chapter's reference material: the appendix (PDF) or closed <details> (HTML) of the report
REFERENCE_HEADINGS = ("Method", "Protocol", "Hypothesis tests", "Every test of the report")


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if not p.name.startswith("00_")], ids=lambda p: p.name)
def test_reference_material_is_tagged_for_the_appendix(path):
    """Every chapter tags its Method, protocol and test cells (from their heading to the next one), and every
    cell that shows tests or the protocol, with the appendix tag; its body keeps the rest."""
    from embeval_report.present.display import APPENDIX_TAG

    nb = nbformat.read(path, as_version=4)
    tagged = [APPENDIX_TAG in c.metadata.get("tags", []) for c in nb.cells]
    headings = [c.source.splitlines()[0] if c.cell_type == "markdown" and c.source.startswith("#") else None
                for c in nb.cells]
    assert any(h == "## Method" for h in headings), f"{path.name}: no ## Method cell"
    inside = False
    for cell, heading, tag in zip(nb.cells, headings, tagged):
        if heading is not None:
            inside = heading.startswith("## ") and heading[3:].strip() in REFERENCE_HEADINGS
        calls_reference = cell.cell_type == "code" and any(f"{f}(" in cell.source for f in ("show_tests", "show_protocol"))
        expected = inside or calls_reference
        assert tag == expected, (path.name, cell.source[:60], "should" + ("" if expected else " not") + " be tagged")
    setup = [c for c in nb.cells if c.cell_type == "code"][:2]  # parameters and setup: never moved
    assert not any(APPENDIX_TAG in c.metadata.get("tags", []) for c in setup)
    assert sum(1 for h, t in zip(headings, tagged) if h and h.startswith("## ") and not t) >= 1  # a body remains


PACKAGE = Path(embeval_report.__file__).parent
METRIC_MODULES = sorted((PACKAGE / "metrics").glob("*.py"))


@pytest.mark.parametrize("path", METRIC_MODULES, ids=lambda p: p.name)
def test_metric_modules_import_nothing_from_presentation(path):
    """metrics/ is pure computation: no matplotlib, display, report or chapter imports at module level."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            level = getattr(node, "level", 0)
            for name in names:
                assert not name.startswith(("matplotlib", "seaborn", "IPython")), (path.name, name)
                assert not (level >= 2 and name.split(".")[0] in ("report", "chapters")), (path.name, name)


def test_no_package_module_is_over_650_lines():
    sizes = {p.relative_to(PACKAGE): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert max(sizes.values()) <= 650, sorted(sizes.items(), key=lambda t: -t[1])[:3]
