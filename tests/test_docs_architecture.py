"""docs/architecture.md names only what exists: every module, class, function and attribute it writes in
backticks resolves in this checkout, and every path it names is a file or folder of the repository.

A backticked token is read as a name when it looks like one (``router.Target``, ``Patcher.set``,
``translate.make_target()``, ``@translated``, ``MemoryOps``); commands, code with spaces, device strings
and environment variables are prose, not names. A dotted name resolves from ``torchdevice`` (``router.X``
is ``torchdevice.router.X``), from ``torch``, or from a class of the package whose name is its first part
(``Target.translating``, a dataclass field included). A bare name is a module of the package, or a
module-level name, attribute or field of some module or class of it.
"""
from __future__ import annotations

import builtins
import importlib
import pkgutil
import re
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import torchdevice

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
NAME = re.compile(r"@?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\(.*\))?(\.[A-Za-z_][A-Za-z0-9_.]*(\(.*\))?)*")
#: device and backend names of the vocabulary, written in backticks as words, not as code names
WORDS = {"cuda", "mps", "xpu", "mtia", "mlx", "cpu", "sim", "torchdevice", "tests"}


def backticked() -> list[str]:
    return sorted(set(re.findall(r"`([^`\n]+)`", DOC.read_text(encoding="utf-8"))))


def is_path(token: str) -> bool:
    if " " in token or "<" in token or token.startswith("/"):
        return False
    return "/" in token or token.endswith((".py", ".md", ".toml", ".yaml", ".json"))


def is_name(token: str) -> bool:
    if token.startswith(("TORCHDEVICE_", "__")) or token in WORDS or is_path(token):
        return False
    return NAME.fullmatch(token) is not None and not token.startswith("torch.<")


@cache
def package_modules() -> tuple[ModuleType, ...]:
    mods = [torchdevice]
    for info in pkgutil.walk_packages(torchdevice.__path__, "torchdevice."):
        if info.name.endswith("__main__"):
            continue
        mods.append(importlib.import_module(info.name))
    return tuple(mods)


def has_attribute(owner: Any, name: str) -> bool:
    if hasattr(owner, name):
        return True
    fields = getattr(owner, "__dataclass_fields__", None)
    return bool(fields) and name in fields


@cache
def package_classes() -> dict[str, list[type]]:
    found: dict[str, list[type]] = {}
    for mod in package_modules():
        for value in vars(mod).values():
            if isinstance(value, type):
                found.setdefault(value.__name__, []).append(value)
    return found


def resolve_dotted(parts: list[str]) -> bool:
    """``parts`` from torchdevice, from torch, or from a class of the package named by its first part."""
    for root in ("torchdevice", ""):
        names = [root, *parts] if root else parts
        for cut in range(len(names), 0, -1):
            try:
                obj: Any = importlib.import_module(".".join(names[:cut]))
            except ImportError:
                continue
            if all_attributes(obj, names[cut:]):
                return True
            break
    return any(all_attributes(cls, parts[1:]) for cls in package_classes().get(parts[0], []))


def all_attributes(obj: Any, rest: list[str]) -> bool:
    for i, name in enumerate(rest):
        if not has_attribute(obj, name):
            return False
        if i + 1 < len(rest):
            obj = getattr(obj, name)
    return True


def resolve_bare(name: str) -> bool:
    if hasattr(builtins, name) or name in package_classes():
        return True
    if any(m.__name__.rsplit(".", 1)[-1] == name for m in package_modules()):
        return True
    holders = [*package_modules(), *(c for cs in package_classes().values() for c in cs)]
    return any(has_attribute(h, name) for h in holders)


def resolves(token: str) -> bool:
    # a call chain (``router.active().memory.x``) is checked up to its first call: what follows is a value's
    chain = token.lstrip("@").split("(", 1)[0]
    parts = chain.split(".")
    return resolve_bare(parts[0]) if len(parts) == 1 else resolve_dotted(parts)


def test_the_reader_sees_names_and_leaves_prose():
    assert is_name("router.Target") and is_name("@translated") and is_name("translate.make_target()")
    assert not is_name("torchdevice run") and not is_name('"cuda:1"') and not is_name("TORCHDEVICE_LOG")
    assert resolves("router.Target") and resolves("Target.translating") and resolves("torch.cuda.memory_allocated")
    assert not resolves("router.ActiveBackend") and not resolves("namespaces.View") and not resolves("translate.Facade")


@pytest.mark.parametrize("token", [t for t in backticked() if is_name(t)])
def test_every_name_in_docs_architecture_exists(token):
    assert resolves(token), f"docs/architecture.md names `{token}`, which does not exist in this checkout"


@pytest.mark.parametrize("token", [t for t in backticked() if is_path(t)])
def test_every_path_in_docs_architecture_exists(token):
    path = token.split(" ")[0]
    assert any((folder / path).exists() for folder in (ROOT, ROOT / "torchdevice", ROOT / "docs")), (
        f"docs/architecture.md names the path `{token}`, which is not in the repository")


def test_every_module_of_the_layer_map_exists():
    """The layer map (checked against the code's imports by tests/test_architecture.py) lists only modules
    and subpackages that exist: a module deleted or renamed leaves no row behind."""
    after = DOC.read_text(encoding="utf-8").split("<!-- layer map:", 1)[1].splitlines()[1:]
    rows = [line for line in after[: next(i for i, line in enumerate(after) if not line.startswith("|"))]]
    listed = [m for row in rows[2:] for m in re.findall(r"`([^`]+)`", row.split("|")[2])]
    assert len(listed) > 30, listed
    core = ROOT / "torchdevice"
    missing = [m for m in listed if m != "__init__" and not (core / f"{m.rstrip('/')}.py").exists()
               and not (core / m.rstrip("/") / "__init__.py").exists()]
    assert not missing, f"the layer map of docs/architecture.md lists modules that do not exist: {missing}"
