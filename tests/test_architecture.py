"""The package's layers, checked on every import it makes (module level, inside functions, ``__import__`` and
``importlib.import_module`` with a literal name; ``if TYPE_CHECKING:`` blocks are not imports at run time):
each module imports only from its own layer or the layers below it, and no modules import each other in a
cycle. The layers, bottom to top, are listed in docs/architecture.md."""
import ast
import functools
from pathlib import Path

import pytest

import embeval_report

PACKAGE = Path(embeval_report.__file__).parent
ROOT = PACKAGE.name

#: bottom (0) to top: a module may import from its own layer and the layers below
LAYERS = {
    "errors": 0, "progress": 0, "resources": 0, "version": 0, "context": 0, "safe_files": 0, "threads": 0,
    "io": 1,
    "kernels": 2,
    "stats": 3, "metrics": 3, "monitoring": 3,
    "present": 4,
    "settings": 5, "chapters": 5,
    "report": 6,
    "demo": 7, "api": 7, "cli": 7, "__init__": 8,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS["__init__"] if len(parts) == 1 else LAYERS[parts[1]]


def _type_checking_nodes(tree) -> set:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _target(base: str, name: str) -> str:
    """``base.name`` when that is a module of the package, else ``base``."""
    candidate = f"{base}.{name}"
    path = PACKAGE.parent / candidate.replace(".", "/")
    return candidate if path.with_suffix(".py").exists() or path.is_dir() else base


@functools.cache
def imports() -> dict[str, set[str]]:
    """Every package module -> the package modules it imports (parsed once per test process: four tests read it;
    none changes it)."""
    edges: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        found = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up) + (f".{node.module}" if node.module else "")
                if base.split(".")[0] == ROOT:
                    found.update(_target(base, a.name) for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == ROOT)
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("__import__", "import_module")
                  and str(node.args[0].value).split(".")[0] == ROOT):
                found.add(node.args[0].value)
        edges[module] = found - {module}
    return edges


def test_no_module_imports_from_a_layer_above_its_own():
    upward = sorted(f"{a} -> {b}" for a, targets in imports().items() for b in targets if _layer(b) > _layer(a))
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    edges = imports()
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_every_layer_is_known():
    unknown = sorted({m.split(".")[1] for m in imports() if "." in m} - set(LAYERS))
    assert not unknown, f"add these to LAYERS (and docs/architecture.md): {unknown}"


@pytest.mark.parametrize("source, target, allowed", [
    ("embeval_report.io.vectors", "embeval_report.kernels.device", False),
    ("embeval_report.chapters.isotropy", "embeval_report.present.display", True),
    ("embeval_report.metrics.spec", "embeval_report.present.format", False),
])
def test_the_layer_rule_itself(source, target, allowed):
    assert (_layer(target) <= _layer(source)) == allowed


def test_no_chapter_imports_another_chapter():
    """A chapter shares with another chapter only through a helper module (declaration, labelled, findings, ...)
    or a lower layer, never by importing that chapter's module (issue 41)."""
    from embeval_report.chapters.registry import discover

    chapters = {c.module for c in discover()}
    crossing = sorted(f"{a} -> {b}" for a, targets in imports().items() if a in chapters
                      for b in targets if b in chapters)
    assert not crossing, "\n".join(crossing)


#: calls that read a file: a bare name, or ``module.attr`` / ``anything.attr`` for the attributes listed
FILE_READING_NAMES = {"open"}
FILE_READING_MODULE_CALLS = {("np", "load"), ("np", "loadtxt"), ("np", "genfromtxt"), ("np", "fromfile"),
                             ("np", "memmap"), ("json", "load"), ("pickle", "load"), ("io", "open")}
FILE_READING_METHODS = {"read_text", "read_bytes", "read_csv", "read_table", "read_parquet", "read_json",
                        "read_feather", "read_hdf", "read_excel"}


def _metrics_trees():
    for path in sorted((PACKAGE / "metrics").rglob("*.py")):
        yield path.relative_to(PACKAGE.parent), ast.parse(path.read_text())


def test_metrics_import_no_torch():
    """``metrics/`` holds pure functions over loaded data; the torch kernels they call are in ``kernels/``
    (issue 41 item 4)."""
    found = []
    for path, tree in _metrics_trees():
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [node.id] if isinstance(node, ast.Name) else [])
            if any(n.split(".")[0] == "torch" for n in names):
                found.append(f"{path}:{node.lineno}")
    assert not found, "torch in metrics/ (move the kernel to kernels/):\n" + "\n".join(sorted(set(found)))


def test_metrics_read_no_files():
    """No ``metrics/`` module reads a file, itself or through an ``io`` reader (``read_*``, ``load_*``, ``LOADERS``):
    the readers are in ``io/`` and the metrics take what they read (issue 41 item 4)."""
    found = []
    for path, tree in _metrics_trees():
        for node in ast.walk(tree):
            where = f"{path}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in FILE_READING_NAMES:
                    found.append(f"{where} {f.id}()")
                elif isinstance(f, ast.Attribute):
                    owner = f.value.id if isinstance(f.value, ast.Name) else None
                    if (owner, f.attr) in FILE_READING_MODULE_CALLS or f.attr in FILE_READING_METHODS:
                        found.append(f"{where} .{f.attr}()")
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if (node.level == 2 and module.split(".")[0] == "io") or module.startswith(f"{ROOT}.io"):
                    readers = [a.name for a in node.names if a.name.startswith(("read_", "load_"))
                               or a.name == "LOADERS"]
                    if readers:
                        found.append(f"{where} imports {', '.join(readers)}")
    assert not found, "file reading in metrics/ (move the reader to io/):\n" + "\n".join(found)
