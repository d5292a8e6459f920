"""Reversible attribute patching: every change is recorded and undone exactly.

``unpatch()`` must give torch back *the same objects* it had (identity, not
equality), including attributes that did not exist before.
"""
from __future__ import annotations

from typing import Any

_MISSING = object()


class Patcher:
    """Set attributes and remember the originals; :meth:`restore` undoes all, newest first."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def set(self, obj: Any, name: str, value: Any) -> Any:
        """Replace ``obj.name`` with ``value``; return what ``obj.name`` gave before (or None).

        Only the object's own attribute is saved: an inherited one (a method
        of a base class) is restored by deleting the override.
        """
        current = getattr(obj, name, None)
        self._saved.append((obj, name, vars(obj).get(name, _MISSING)))
        setattr(obj, name, value)
        return current

    def original(self, obj: Any, name: str) -> Any:
        """The value ``obj.name`` had before the first patch of it (raises KeyError if unpatched)."""
        for saved_obj, saved_name, value in self._saved:
            if saved_obj is obj and saved_name == name:
                return value
        raise KeyError(f"{obj!r}.{name} was not patched")

    def restore(self) -> None:
        while self._saved:
            obj, name, original = self._saved.pop()
            if original is _MISSING:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
            else:
                setattr(obj, name, original)

    def __len__(self) -> int:
        return len(self._saved)
