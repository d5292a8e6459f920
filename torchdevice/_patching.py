"""Reversible attribute patching: every change is recorded and undone exactly.

``unpatch()`` must give torch back *the same objects* it had (identity, not
equality), including attributes that did not exist before.

Changes can be staged: between :meth:`Patcher.stage` and :meth:`Patcher.commit`
nothing is changed, and the commit applies every change in one loop while other
Python threads wait (a raised switch interval), so a thread running torch code
while translation turns on or off sees torch either wholly patched or not at all.
"""
from __future__ import annotations

import contextlib
import sys
import types
from typing import Any, Iterator

_MISSING = object()


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Keep other Python threads from running inside the block (unless it blocks on I/O): the
    interpreter switches threads only every ``sys.getswitchinterval()`` seconds."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(max(previous, 0.5))
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _looking_like(value: Any, current: Any) -> Any:
    """``value``, given ``current``'s ``__wrapped__`` when ``current`` is a function that wraps another
    (``functools.wraps``, ``contextlib.contextmanager``) and ``value`` is one that wraps nothing.

    Code reads ``f.__wrapped__`` of torch's functions as it finds them: dynamo's tables of context
    managers and constant-folded functions (torch 2.14's ``torch.cuda.use_mem_pool.__wrapped__``, read
    at trace time), ``inspect.signature``. A stand-in without one failed there with AttributeError.
    """
    if (isinstance(value, types.FunctionType) and isinstance(current, types.FunctionType)
            and "__wrapped__" in vars(current) and "__wrapped__" not in vars(value)):
        value.__wrapped__ = current.__wrapped__  # type: ignore[attr-defined]
    return value


class Patcher:
    """Set attributes and remember the originals; :meth:`restore` undoes all, newest first."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []
        self._applied: list[Any] = []  # the value set by each entry of _saved, for resume()
        self._staged: dict[tuple[int, str], tuple[Any, str, Any]] | None = None

    def set(self, obj: Any, name: str, value: Any) -> Any:
        """Replace ``obj.name`` with ``value``; return what ``obj.name`` gave before (or None).

        Only the object's own attribute is saved: an inherited one (a method
        of a base class) is restored by deleting the override. While staging,
        the change waits for :meth:`commit` (and "before" is the last staged value).
        """
        if self._staged is not None:
            current = self.get(obj, name)
            self._staged[id(obj), name] = (obj, name, _looking_like(value, current))
            return current
        current = getattr(obj, name, None)
        value = _looking_like(value, current)
        self._saved.append((obj, name, vars(obj).get(name, _MISSING)))
        self._applied.append(value)
        setattr(obj, name, value)
        return current

    def get(self, obj: Any, name: str, default: Any = None) -> Any:
        """What ``obj.name`` is once the staged changes are applied: read what you wrap here."""
        if self._staged is not None and (id(obj), name) in self._staged:
            return self._staged[id(obj), name][2]
        return getattr(obj, name, default)

    def stage(self) -> None:
        """Collect the following :meth:`set` calls instead of applying them."""
        self._staged = {}

    def commit(self) -> None:
        """Apply every staged change at once (see the module docstring)."""
        staged, self._staged = self._staged or {}, None
        with uninterrupted():
            for obj, name, value in staged.values():
                self._saved.append((obj, name, vars(obj).get(name, _MISSING)))
                self._applied.append(value)
                setattr(obj, name, value)

    def discard(self) -> None:
        """Drop the staged changes unapplied."""
        self._staged = None

    def original(self, obj: Any, name: str) -> Any:
        """The value ``obj.name`` had before the first patch of it (raises KeyError if unpatched)."""
        for saved_obj, saved_name, value in self._saved:
            if saved_obj is obj and saved_name == name:
                return value
        raise KeyError(f"{obj!r}.{name} was not patched")

    def restore(self) -> None:
        """Undo every applied change, newest first, in one uninterrupted loop."""
        with uninterrupted():
            self._put_back()
            self._saved.clear()
            self._applied.clear()

    def _put_back(self) -> None:
        for obj, name, original in reversed(self._saved):
            if original is _MISSING:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
            else:
                setattr(obj, name, original)

    def suspend(self) -> None:
        """Give torch its own attributes back while keeping every change for :meth:`resume`.

        For code that must see torch unpatched while translation stays on: torch's own
        modules being imported (:class:`torchdevice.boundary.TorchImports`).
        """
        with uninterrupted():
            self._put_back()

    def resume(self) -> None:
        """Re-apply every change after :meth:`suspend`."""
        with uninterrupted():
            for (obj, name, _), value in zip(self._saved, self._applied):
                setattr(obj, name, value)

    def __len__(self) -> int:
        return len(self._saved)
