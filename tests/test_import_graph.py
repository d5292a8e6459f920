"""No import cycles among torchdevice's modules (issue 14).

The graph is built from the source (``ast``), not by importing: an edge ``a -> b`` for each
module-level ``import``/``from ... import`` in ``a`` (including those under a top-level ``if``/``try``)
that names module ``b`` of the package. Imports inside functions are left out on purpose: they run
after every module has finished initialising (the lazy pattern used to keep ``import torch`` cheap),
so they cannot observe a half-initialised module. A cycle of module-level imports can, depending on
which module a program imports first.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torchdevice"


def modules(package: Path) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _top_level(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, (ast.If, ast.Try)):
            yield from node.body
            if isinstance(node, ast.If):
                yield from node.orelse
        else:
            yield node


def import_graph(package: Path) -> dict[str, set[str]]:
    mods = modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        edges: set[str] = set()
        for node in _top_level(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    if f"{target}.{alias.name}" in mods:
                        edges.add(f"{target}.{alias.name}")
                    elif target in mods:
                        edges.add(target)
            elif isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in mods)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
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
            visit(v)
    return found


def test_torchdevice_has_no_module_level_import_cycle():
    graph = import_graph(PACKAGE)
    assert len(graph) > 20 and graph["torchdevice.translate"], "the graph was read"
    assert cycles(graph) == []


def test_the_check_finds_a_cycle(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("try:\n    from .sub import c\nexcept ImportError:\n    pass\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("from ..a import thing\n\ndef lazy():\n    from .. import d\n")
    (package / "d.py").write_text("import pkg.a\n")
    graph = import_graph(package)
    assert graph["pkg.sub.c"] == {"pkg.a"} and graph["pkg.d"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]  # d's lazy import is not an edge


def test_the_source_families_are_spelled_once():
    """The family tuple lives in torchdevice.vocabulary (torch-free); no module spells it again."""
    vocabulary = ast.parse((PACKAGE / "vocabulary.py").read_text())
    imported = {a.name for n in ast.walk(vocabulary) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    assert imported <= {"annotations"}  # nothing but `from __future__ import annotations`
    spelled = []
    for name, path in modules(PACKAGE).items():
        if name == "torchdevice.vocabulary":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Tuple) and len(node.elts) == 4
                    and [getattr(e, "value", None) for e in node.elts] == ["cuda", "mps", "xpu", "mtia"]):
                spelled.append(f"{name}:{node.lineno}")
    assert spelled == []
