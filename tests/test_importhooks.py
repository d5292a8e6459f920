"""torchdevice.importhooks: the sys.meta_path finder both import hooks are made of (boundary's
TorchImports, the integrations' watcher): it finds nothing itself, asks the other finders, and runs
a watched module's code through a wrapped loader that hands the module its real loader."""
from __future__ import annotations

import importlib.util
import sys
import types
from importlib.machinery import ModuleSpec
from typing import Any

import pytest

from torchdevice import boundary, integrations
from torchdevice.importhooks import WrappedLoader, WrappingFinder


class Around(WrappedLoader):
    def __init__(self, loader: Any, log: list[str]) -> None:
        super().__init__(loader)
        self.log = log

    def execute(self, module: types.ModuleType) -> None:
        self.log.append(f"before {module.__name__}: loader is the real one: {module.__loader__ is self.loader}")
        super().execute(module)
        self.log.append(f"after {module.__name__}: {module.VALUE}")


class Watching(WrappingFinder):
    def __init__(self, names: set[str], log: list[str]) -> None:
        super().__init__()
        self.names = names
        self.log = log

    def watches(self, fullname: str) -> bool:
        return fullname in self.names

    def wrap(self, loader: Any) -> WrappedLoader:
        return Around(loader, self.log)


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Two fresh importable modules, ``hooked_a`` and ``hooked_b``, forgotten afterwards."""
    for name in ("hooked_a", "hooked_b"):
        (tmp_path / f"{name}.py").write_text(f"VALUE = {name!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    for name in ("hooked_a", "hooked_b"):
        sys.modules.pop(name, None)


@pytest.fixture
def install():
    added: list[Any] = []

    def put(finder: Any) -> Any:
        sys.meta_path.insert(0, finder)
        added.append(finder)
        return finder

    yield put
    for finder in added:
        sys.meta_path.remove(finder)


def test_a_watched_module_runs_through_the_wrapper_and_keeps_its_real_loader(modules, install):
    log: list[str] = []
    install(Watching({"hooked_a"}, log))
    import hooked_a
    import hooked_b

    assert log == ["before hooked_a: loader is the real one: True", "after hooked_a: hooked_a"]
    assert hooked_b.VALUE == "hooked_b"  # not watched: found by the others, never wrapped
    assert not isinstance(hooked_a.__loader__, WrappedLoader) and hooked_a.__spec__.loader is hooked_a.__loader__
    assert hooked_a.__loader__.get_filename("hooked_a").endswith("hooked_a.py")


def test_the_wrapper_forwards_what_it_does_not_define_to_the_real_loader(modules):
    spec = Watching({"hooked_a"}, []).find_spec("hooked_a")
    assert isinstance(spec.loader, Around)
    assert spec.loader.get_source("hooked_a") == "VALUE = 'hooked_a'\n"
    assert spec.loader.is_package("hooked_a") is False


def test_an_unwatched_or_unknown_module_is_not_found_by_it(modules):
    finder = Watching({"hooked_a", "no_such_module_anywhere"}, [])
    assert finder.find_spec("hooked_b") is None
    assert finder.find_spec("no_such_module_anywhere") is None


def test_asked_again_for_the_same_module_by_another_finder_it_steps_aside(modules, install):
    """A finder after it that asks importlib for the same name would otherwise recurse forever."""
    asked: list[ModuleSpec | None] = []

    class Nosy:
        """Asks the whole of sys.meta_path (this finder steps aside when asked within that)."""

        asking = False

        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
            if fullname == "hooked_a" and not self.asking:
                self.asking = True
                try:
                    asked.append(importlib.util.find_spec(fullname))  # meta_path again, the watcher first
                finally:
                    self.asking = False
            return None

    install(Nosy())
    watching = install(Watching({"hooked_a"}, []))
    spec = watching.find_spec("hooked_a")
    assert isinstance(spec.loader, Around)
    assert len(asked) == 1 and asked[0] is not None and not isinstance(asked[0].loader, WrappedLoader)


def test_a_spec_without_an_executing_loader_is_returned_as_found(install):
    bare = ModuleSpec("hooked_bare", None)

    class Bare:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
            return bare if fullname == "hooked_bare" else None

    install(Bare())
    assert Watching({"hooked_bare"}, []).find_spec("hooked_bare") is bare and bare.loader is None


def test_both_import_hooks_are_made_of_it():
    assert issubclass(boundary.TorchImports, WrappingFinder) and issubclass(integrations._Watcher, WrappingFinder)
    assert boundary.TorchImports(patcher=None).watches("torch._dynamo")
    assert not boundary.TorchImports(patcher=None).watches("torchvision")
    assert integrations._Watcher({"lightning"}).watches("lightning")
    assert not integrations._Watcher({"lightning"}).watches("lightning.pytorch")
