"""The MLX plugin's structure, checked from its source (no imports run): its modules form layers.

The layers are the module map of the plugin's README (the table after ``<!-- module map``), lowest
first. A module may import only modules listed above it, whether the import runs when the module is
imported, inside a function (deferred, to keep ``import torchdevice_mlx`` working where MLX is not
installed) or only for annotations (``if TYPE_CHECKING:``); so the import graph has no cycle. No
module imports a private name (a leading underscore) of another module, nor reads one as an attribute
of an imported module: what another layer uses is public in the module whose job it is.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1]
PACKAGE = PLUGIN / "torchdevice_mlx"
ROOT = PACKAGE.name


def modules(package_dir: Path) -> dict[str, Path]:
    """Module name relative to the package (``"__init__"`` for the package itself) -> file."""
    return {path.stem: path for path in sorted(package_dir.glob("*.py"))}


def _imported(node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> list[tuple[str, str | None]]:
    """``(module, name)`` for each of the package's modules one import statement reaches; ``name``: the name
    it takes from that module (None for a whole module)."""
    found: list[tuple[str, str | None]] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == ROOT:
                found.append((parts[1] if len(parts) > 1 else "__init__", None))
        return found
    if node.level == 0 and not (node.module or "").startswith(ROOT):
        return found
    source = (node.module or "") if node.level else (node.module or "").partition(".")[2]
    for alias in node.names:
        if not source and alias.name in known:  # from . import views
            found.append((alias.name, None))
        else:
            found.append((source.split(".")[0] or "__init__", alias.name))
    return found


def imports(package_dir: Path) -> dict[str, list[tuple[str, str | None, int]]]:
    """module -> ``(imported module, name or None, line)`` for every import of the package's own modules, at
    any depth (module body, functions, ``if TYPE_CHECKING:`` blocks)."""
    known = modules(package_dir)
    found: dict[str, list[tuple[str, str | None, int]]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found[module] = [(target, name, node.lineno) for node in ast.walk(tree)
                         if isinstance(node, (ast.Import, ast.ImportFrom))
                         for target, name in _imported(node, known) if target != module]
    return found


def private_uses(package_dir: Path) -> list[str]:
    """``module:line: what`` for each private name of another module imported, or read as an attribute of an
    imported module (``views._init()``), and each import of a private module."""
    known = modules(package_dir)
    found: list[str] = []
    for module, edges in imports(package_dir).items():
        for target, name, line in edges:
            if target.startswith("_") and target != "__init__":
                found.append(f"{module}:{line}: imports private module {target}")
            elif name is not None and name.startswith("_") and not name.startswith("__"):
                found.append(f"{module}:{line}: imports {target}.{name}")
        tree = ast.parse(known[module].read_text(encoding="utf-8"))
        bound = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.level == 1 and not node.module for alias in node.names if alias.name in known}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{module}:{node.lineno}: reads {node.value.id}.{node.attr}")
    return sorted(set(found))


def layer_order(readme: Path) -> list[str]:
    """The modules of the README's module map, lowest layer first."""
    lines = readme.read_text(encoding="utf-8").split("<!-- module map", 1)[1].splitlines()[1:]
    order = []
    for line in lines:
        if not line.startswith("|"):
            if order:
                break
            continue
        cell = line.strip("|").split("|")[0]
        order += re.findall(r"`([^`]+)`", cell)
    return order


def climbing(order: list[str], edges: dict[str, list[tuple[str, str | None, int]]]) -> list[str]:
    """``module:line -> target`` for each import of a module that is not below the importing one."""
    rank = {m: i for i, m in enumerate(order)}
    return sorted({f"{module}:{line} -> {target}" for module, found in edges.items() for target, _, line in found
                   if module in rank and target in rank and rank[target] >= rank[module]})


def test_every_module_is_in_the_readme_module_map_once():
    order = layer_order(PLUGIN / "README.md")
    assert len(order) == len(set(order)), f"listed twice: {sorted({m for m in order if order.count(m) > 1})}"
    assert sorted(order) == sorted(modules(PACKAGE)), "the README's module map and the package's modules differ"


def test_imports_only_go_down_the_layers():
    found = climbing(layer_order(PLUGIN / "README.md"), imports(PACKAGE))
    assert not found, ("imports of a module not below the importer in the README's module map (inside functions and "
                       "TYPE_CHECKING blocks included):\n    " + "\n    ".join(found))


def test_no_private_name_crosses_modules():
    found = private_uses(PACKAGE)
    assert not found, "private names used across modules:\n    " + "\n    ".join(found)


def test_the_checker_sees_climbing_and_private_imports(tmp_path):
    pkg = tmp_path / ROOT
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .b import f\n")
    (pkg / "a.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from .b import T\n")
    (pkg / "b.py").write_text(f"from . import a\n\ndef f():\n    from {ROOT}.a import _x\n    return a._y\n")
    (pkg / "_c.py").write_text("from .a import z\n")
    edges = imports(pkg)
    assert climbing(["a", "_c", "b", "__init__"], edges) == ["a:3 -> b"]
    assert climbing(["b", "a", "_c", "__init__"], edges) == ["b:1 -> a", "b:4 -> a"]
    assert sorted(private_uses(pkg)) == ["b:4: imports a._x", "b:5: reads a._y"]
    (pkg / "d.py").write_text("from ._c import w\n")
    assert "d:1: imports private module _c" in private_uses(pkg)
