"""The package's structure, checked from its source (no imports run): the import graph has no cycles,
and the project refers to nothing outside its repository.

The import graph is built from the AST of every module of ``torchdevice`` (and of each plugin package
under ``plugins/``). An edge ``a -> b`` is an ``import``/``from ... import`` in ``a`` that names
``b`` (``from . import trace`` names the module ``torchdevice.trace``; ``from .backend import X`` names
``torchdevice.backend``). Edges are of two kinds:

* **top-level**: executed when ``a`` is imported (module body, class bodies, ``if``/``try`` blocks;
  ``if TYPE_CHECKING:`` blocks are not executed and not counted);
* **deferred**: inside a function, executed only when it is called (used to keep ``import torchdevice``
  cheap, or to reach an optional dependency).

Checked:

1. the top-level graph of ``torchdevice`` and of every plugin package is acyclic: a cycle there means
   a module can be seen half-initialised depending on which one is imported first;
2. the graph of ``torchdevice`` with both kinds of edges is acyclic too, except for edges from a module
   to one of its own parent packages (``from .. import __version__``): Python has initialised every
   parent before the module runs, so such an edge never loads anything. A deferred import that closes
   a cycle is a layering mistake hidden by laziness (the old ``router -> plugins ⇢ cpu -> comm ->
   router``); break it by moving code or by a subscription (``plugins.on_change``), not by an import
   inside a function.

A failure names the modules of each cycle and the edges between them.

3. no module imports one of its own package's modules by a string (``importlib.import_module("torchdevice.amp")``,
   ``__import__``): such an import is no edge of the graph, so it would hide a cycle or a climbing import from
   the checks above. Optional third-party modules may still be imported by name.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "torchdevice"
PLUGIN_PACKAGES = sorted(p for p in (ROOT / "plugins").glob("torchdevice-*/torchdevice_*") if p.is_dir())


def _modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package rooted at ``package_dir``."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: dict) -> set[str]:
    """The modules of the package that one import statement names."""
    root = next(iter(known)).split(".")[0]
    named = []
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")
            if not is_package:
                base = base[:-1]
            base = base[:len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        named = [f"{source}.{alias.name}" for alias in node.names] or [source]
        named = [n if n in known else source for n in named]
    result = set()
    for name in named:
        if name.split(".")[0] != root:
            continue
        while name not in known and "." in name:  # `import torchdevice.x.y` where y is a name
            name = name.rpartition(".")[0]
        if name in known and name != module:
            result.add(name)
    return result


def import_graph(package_dir: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(top_level, deferred)``: module -> the package's modules it imports, by kind of edge."""
    known = _modules(package_dir)
    top: dict[str, set[str]] = {m: set() for m in known}
    deferred: dict[str, set[str]] = {m: set() for m in known}

    for module, path in known.items():
        is_package = path.name == "__init__.py"

        def visit(node: ast.AST, in_function: bool, module=module, is_package=is_package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    (deferred if in_function else top)[module] |= _targets(module, is_package, child, known)
                elif _is_type_checking(child):
                    continue
                else:
                    visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return top, deferred


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _explain(found: list[list[str]], top: dict[str, set[str]], deferred: dict[str, set[str]] | None = None) -> str:
    lines = []
    for component in found:
        members = set(component)
        edges = [f"{a} -> {b}" for a in component for b in sorted(top.get(a, ())) if b in members]
        edges += [f"{a} -> {b} (inside a function)" for a in component for b in sorted((deferred or {}).get(a, ()))
                  if b in members and b not in top.get(a, ())]
        lines.append("cycle among " + ", ".join(component) + ":\n    " + "\n    ".join(sorted(edges)))
    return "\n".join(lines)


def _without_parent_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {a: {b for b in targets if not a.startswith(b + ".")} for a, targets in graph.items()}


@pytest.mark.parametrize("package", [CORE, *PLUGIN_PACKAGES], ids=lambda p: p.name)
def test_top_level_imports_have_no_cycle(package):
    top, _ = import_graph(package)
    found = cycles(top)
    assert not found, _explain(found, top)


def test_no_cycle_even_through_imports_inside_functions():
    top, deferred = import_graph(CORE)
    both = {m: top[m] | deferred[m] for m in top}
    found = cycles(_without_parent_edges(both))
    assert not found, _explain(found, top, deferred)


def test_the_checker_sees_a_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from . import c\n\ndef f():\n    from .a import x\n")
    (pkg / "c.py").write_text("from .b import f\n")
    top, deferred = import_graph(pkg)
    assert top == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": set(), "pkg.c": {"pkg.b"}}
    assert deferred["pkg.b"] == {"pkg.a"}
    assert cycles(top) == []
    assert cycles({m: top[m] | deferred[m] for m in top}) == [["pkg.a", "pkg.b"]]


_IMPORT_BY_NAME = {"import_module", "__import__"}


def _string_head(node: ast.expr) -> str | None:
    """The text a string argument starts with (a literal, or an f-string's leading literal part), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
    return None


def imports_by_name(package_dir: Path) -> list[str]:
    """``file:line: call`` for every ``importlib.import_module``/``__import__`` call of the package's modules
    whose argument names one of the package's own modules (its root name, or a relative name ``".x"``); an
    f-string counts as naming one when its literal start does, or when it starts with a substitution."""
    root = package_dir.name
    found = []
    for path in _modules(package_dir).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            head = _string_head(node.args[0])
            if name not in _IMPORT_BY_NAME or head is None:
                continue
            if head == "" or head.startswith(".") or head == root or head.startswith(root + "."):
                found.append(f"{path.relative_to(package_dir.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("package", [CORE, *PLUGIN_PACKAGES], ids=lambda p: p.name)
def test_own_modules_are_imported_by_import_statements(package):
    found = imports_by_name(package)
    assert not found, ("import these with an import statement (inside the function if it must stay deferred), "
                       "so the import graph sees the edge:\n    " + "\n    ".join(found))


def test_the_checker_sees_an_import_by_name(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "import importlib\n"
        "def f(name):\n"
        "    importlib.import_module('pkg.b')\n"
        "    importlib.import_module(f'pkg.{name}')\n"
        "    __import__('pkg')\n"
        "    importlib.import_module('.b', 'pkg')\n"
        "    importlib.import_module('lightning')\n"  # a third-party module: allowed
        "    importlib.import_module(f'torch.{name}')\n"  # likewise
    )
    assert [line.split(": ", 1)[0] for line in imports_by_name(pkg)] == [f"pkg{os.sep}a.py:{n}" for n in (3, 4, 5, 6)]


# -- the layers of docs/architecture.md ---------------------------------------------------------------

DOC = ROOT / "docs" / "architecture.md"


def layer_map() -> list[tuple[str, list[str]]]:
    """``[(layer, [module patterns])]``, lowest first, from the table after the layer-map marker of
    docs/architecture.md: ``streams`` is ``torchdevice.streams`` (and its modules, were it to become a
    package), ``namespaces/`` the subpackage and its modules, ``__init__`` the package itself."""
    lines = DOC.read_text(encoding="utf-8").split("<!-- layer map:", 1)[1].splitlines()[1:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in ("layer", "") or set(cells[0]) <= {"-"}:
            continue
        rows.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    return rows


def _layer_of(module: str, layers: list[tuple[str, list[str]]]) -> int | None:
    relative = module.partition(".")[2]
    for index, (_, patterns) in enumerate(layers):
        for pattern in patterns:
            if pattern == "__init__" and not relative:
                return index
            name = pattern.rstrip("/").replace("/", ".")
            if relative == name or relative.startswith(name + "."):  # a module, or a package and its modules
                return index
    return None


def test_every_module_has_a_layer_in_docs_architecture():
    layers = layer_map()
    assert [name for name, _ in layers][:2] == ["foundation", "backend API"] and len(layers) >= 6
    unplaced = [m for m in _modules(CORE) if _layer_of(m, layers) is None]
    assert not unplaced, f"place these modules in a layer of the table in docs/architecture.md: {unplaced}"


def test_imports_never_climb_a_layer():
    layers = layer_map()
    top, deferred = import_graph(CORE)
    climbing = []
    for source in top:
        for target in sorted(top[source] | deferred[source]):
            if source.startswith(target + "."):
                continue  # a parent package: already initialised, reading a name from it loads nothing
            low, high = _layer_of(source, layers), _layer_of(target, layers)
            if low is not None and high is not None and high > low:
                where = "" if target in top[source] else " (inside a function)"
                climbing.append(f"{source} ({layers[low][0]}) -> {target} ({layers[high][0]}){where}")
    assert not climbing, "imports going up the layers of docs/architecture.md:\n    " + "\n    ".join(climbing)


def type_only_imports(package_dir: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports under ``if TYPE_CHECKING:`` (names for annotations)."""
    known = _modules(package_dir)
    found: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        for block in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if _is_type_checking(block):
                for node in ast.walk(block):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        found[module] |= _targets(module, path.name == "__init__.py", node, known)
    return found


def test_names_used_only_in_annotations_never_climb_a_layer():
    """A layer's API speaks of nothing above it, not even in a type annotation (the hooks once returned
    ``Integration``, a class of the translation layer)."""
    layers = layer_map()
    climbing = [f"{source} ({layers[low][0]}) -> {target} ({layers[high][0]})"
                for source, targets in type_only_imports(CORE).items() for target in sorted(targets)
                if (low := _layer_of(source, layers)) is not None and (high := _layer_of(target, layers)) is not None
                and high > low]
    assert not climbing, "TYPE_CHECKING imports going up the layers of docs/architecture.md:\n    " + "\n    ".join(climbing)


# -- the project stands on its own files ---------------------------------------------------------------

#: Things that lived outside the repository once; nothing may refer to them.
OUTSIDE = re.compile(r"FINDINGS\.md|design card|\.\./shared\b", re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".ini", ".txt", ".cfg", ".sh", ".yaml", ".yml", ".json"}


def _text_files():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("fixtures", "__pycache__", "build", "dist")]
        for name in files:
            if Path(name).suffix in TEXT_SUFFIXES:
                yield Path(folder, name)


def test_nothing_refers_to_files_outside_the_repository():
    this = Path(__file__).resolve()
    offenders = []
    for path in sorted(_text_files()):
        if path.resolve() == this:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


# -- one home for the device vocabulary (torchdevice/vocabulary.py) ---------------------------------

#: modules that still spell the vocabulary themselves, to be moved onto torchdevice.vocabulary
PENDING = {"scan.py"}  # its own work is under way on another branch: ACCEL_TYPES becomes SOURCE_FAMILIES
SPELLINGS = {
    "the source families": re.compile(r"""\(\s*["']cuda["'],\s*["']mps["'],\s*["']xpu["'],\s*["']mtia["']\s*\)"""),
    "a capture of the real torch.device class": re.compile(
        r"=\s*torch\.device\s*(#.*)?$|type\(torch\.empty\(0\)\.device\)|=\s*torch\._C\.device\b", re.MULTILINE),
}


@pytest.mark.parametrize("what", sorted(SPELLINGS))
def test_the_device_vocabulary_is_spelled_once(what):
    found = [str(path.relative_to(ROOT)) for path in sorted(CORE.rglob("*.py"))
             if path.name not in ("vocabulary.py", *PENDING) and SPELLINGS[what].search(path.read_text(encoding="utf-8"))]
    assert not found, f"{what} spelled outside torchdevice/vocabulary.py in: {', '.join(found)}"
    assert SPELLINGS[what].search((CORE / "vocabulary.py").read_text(encoding="utf-8"))


def test_the_vocabulary_does_not_import_torch():
    top, _ = import_graph(CORE)
    assert top["torchdevice.vocabulary"] <= set(), "vocabulary imports other torchdevice modules at import time"
    tree = ast.parse((CORE / "vocabulary.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in tree.body if isinstance(node, (ast.Import,))
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    assert "torch" not in imported


# -- finding where a fronted function is made ---------------------------------------------------------


def test_every_namespace_row_says_where_it_is_declared():
    from torchdevice import namespaces

    families = {"discovery", "memory", "streams", "rng", "nvtx", "nccl", "tunable", "legacy"}
    for table in (namespaces.SPECS, namespaces.NVTX_SPECS):
        for name, spec in table.items():
            path, _, line = spec.declared_at.rpartition(":")
            assert path.startswith("torchdevice/namespaces/") and Path(path).stem in families and int(line) > 0, name
            source = (ROOT / path).read_text(encoding="utf-8").splitlines()[int(line) - 1]
            assert "fronts(" in source or "declare_" in source, f"{name}: {spec.declared_at} is not a declaration"
    where = namespaces.where("torch.cuda.memory_allocated")
    assert where.startswith("torchdevice/namespaces/memory.py:") and "device_op_builder('memory', 'memory_allocated')" in where
    assert "discovery.build_is_available" in namespaces.where("torch.cuda.is_available")
    assert namespaces.where("torch.cuda.nccl.version").startswith("torchdevice/namespaces/nccl.py:")
    assert "memory.build_private_snapshot" in namespaces.where("torch.cuda.memory._snapshot")
    assert "nvtx.build_range_push" in namespaces.where("torch.cuda.nvtx.range_push")
    with pytest.raises(KeyError):
        namespaces.where("torch.cuda.no_such_function")


# -- the tests themselves ---------------------------------------------------------------------------------

_HISTORY = re.compile(r"\b[Ii]ssue\s*#?\d+|mutation testing|[Ff]ound blind")


def test_no_test_module_cites_an_issue_or_how_its_tests_were_found():
    """A test says what it guards in its name and docstring; the history of how it came (an issue number, a
    mutation run) belongs in commits, not in the tests a reader looks up by module."""
    folders = [ROOT / "tests", *sorted((ROOT / "plugins").glob("*/tests"))]
    cited = [f"{path.relative_to(ROOT)}:{number}" for folder in folders for path in sorted(folder.rglob("*.py"))
             if "fixtures" not in path.parts
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if _HISTORY.search(line) and "_HISTORY" not in line]
    assert not cited, "test modules citing an issue or how their tests were found:\n    " + "\n    ".join(cited)
