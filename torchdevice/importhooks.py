"""Running code around a module's import: a ``sys.meta_path`` finder that finds nothing itself.

:class:`WrappingFinder` is the one shape of both of torchdevice's import hooks: for a module it
watches (:meth:`WrappingFinder.watches`), it asks the other finders of ``sys.meta_path`` for the
module's spec, then wraps that spec's loader (:meth:`WrappingFinder.wrap`) in a
:class:`WrappedLoader`, whose :meth:`~WrappedLoader.execute` runs the module's code with something
around or after it. Used by :class:`torchdevice.boundary.TorchImports` (torch's modules imported
with torch unpatched); :class:`AfterImport` runs a function once a module is imported, for the
framework integrations' watcher (:mod:`torchdevice.integrations`: a framework adapted once its module
is imported) and for plugins (sim patches inductor's flex_attention lowering once it is imported).

The module keeps its real loader (``module.__loader__`` and ``module.__spec__.loader`` are put
back before it executes: ``inspect`` and ``importlib.resources`` read them), and a finder asked
again for a module it is already looking up, in the same thread (another finder calling
``importlib.util.find_spec``), steps aside instead of recursing.
"""
from __future__ import annotations

import importlib.abc
import sys
import threading
import types
from importlib.machinery import ModuleSpec
from typing import Any, Callable, Collection, Sequence, cast


class WrappedLoader:
    """A module's real loader (:attr:`loader`), executing the module through :meth:`execute`.

    Everything else (``get_source``, ``is_package`` ...) is the real loader's.
    """

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        # the module keeps its own loader, not this wrapper (inspect, importlib.resources)
        try:
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader
            module.__loader__ = self.loader
        except AttributeError:  # a module type refusing the attributes: it runs all the same
            pass
        self.execute(module)

    def execute(self, module: types.ModuleType) -> None:
        """Run the module's code (the real loader's ``exec_module``); a subclass adds what goes around it."""
        self.loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class WrappingFinder(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that asks the other finders, then wraps the loader of a module it watches.

    A subclass says which modules (:meth:`watches`) and how to wrap (:meth:`wrap`). A spec without a
    loader, or whose loader has no ``exec_module`` (a namespace package, a legacy loader), is
    returned as found.
    """

    def __init__(self) -> None:
        self._busy = threading.local()  # names this thread is looking up: asked again, step aside

    def watches(self, fullname: str) -> bool:
        """Whether the import of ``fullname`` is wrapped."""
        raise NotImplementedError

    def wrap(self, loader: Any) -> WrappedLoader:
        """The loader that executes a watched module instead of ``loader``, its real one."""
        raise NotImplementedError

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> ModuleSpec | None:
        if not self.watches(fullname):
            return None
        spec = self._others_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = cast(importlib.abc.Loader, self.wrap(spec.loader))  # a loader by its methods, not its class
        return spec

    def _others_spec(self, fullname: str, path: Sequence[str] | None,
                     target: types.ModuleType | None) -> ModuleSpec | None:
        """The spec the first other finder of ``sys.meta_path`` gives (None: no finder has it)."""
        busy = getattr(self._busy, "names", None)
        if busy is None:
            busy = self._busy.names = set()
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    return spec
            return None
        finally:
            busy.discard(fullname)


class AfterImport(WrappingFinder):
    """Runs ``then(module)`` once a module named in ``names`` has been imported (its code executed)."""

    def __init__(self, names: Collection[str], then: Callable[[types.ModuleType], None]) -> None:
        super().__init__()
        self.names, self.then = names, then

    def watches(self, fullname: str) -> bool:
        return fullname in self.names

    def wrap(self, loader: Any) -> WrappedLoader:
        return _ThenLoader(loader, self.then)


class _ThenLoader(WrappedLoader):
    """The real loader, then :attr:`then` with the module."""

    def __init__(self, loader: Any, then: Callable[[types.ModuleType], None]) -> None:
        super().__init__(loader)
        self.then = then

    def execute(self, module: types.ModuleType) -> None:
        super().execute(module)
        self.then(module)
