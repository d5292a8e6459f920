"""The status of an operation: how a backend honours one API function, and the tags that say it.

Every operation of a backend's families (:mod:`torchdevice.backend`) carries one
:class:`Status`, set by decorating it with :func:`native`, :func:`translated`,
:func:`emulated` or :func:`noop`, or by building it with :func:`unsupported`.
``torchdevice matrix`` and ``run --report`` read the tags back with :func:`status_of`, so the
compatibility table is read from the code, never kept by hand. Example::

    class MyMemory(MemoryOps):
        @translated("my runtime's live bytes")
        def memory_allocated(self, index: int) -> int: ...

        set_per_process_memory_fraction = unsupported(
            "set_per_process_memory_fraction", "limit memory with my runtime's own cap")

The names are re-exported by :mod:`torchdevice.backend`, where plugins import them from.
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Callable, NoReturn, TypeVar

from .errors import UnsupportedError

if TYPE_CHECKING:
    from .backend import Ops

_Fn = TypeVar("_Fn", bound=Callable[..., Any])


class Status(str, enum.Enum):
    """How a backend honours one API function."""

    NATIVE = "native"  #: the backend's own function with the same meaning, passed through
    TRANSLATED = "translated"  #: the backend's real equivalent under another name or shape
    EMULATED = "emulated"  #: real semantics implemented by torchdevice or the plugin
    NOOP = "no-op"  #: doing nothing is the correct semantics on this backend
    UNSUPPORTED = "unsupported"  #: raises UnsupportedError

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:  # f"{status}": the value, without Enum.__format__'s detour
        return format(self.value, spec)


STATUS_ATTR = "__torchdevice_status__"


def _tag(status: Status, note: str) -> Callable:
    def mark(fn: _Fn) -> _Fn:
        setattr(fn, STATUS_ATTR, (status, note))
        return fn

    return mark


def native(note: str = "") -> Callable:
    """Tag an operation as a pass-through to the backend's own function."""
    return _tag(Status.NATIVE, note)


def translated(note: str = "") -> Callable:
    """Tag an operation as the backend's real equivalent of the API function."""
    return _tag(Status.TRANSLATED, note)


def emulated(note: str = "") -> Callable:
    """Tag an operation whose semantics torchdevice implements itself."""
    return _tag(Status.EMULATED, note)


def noop(note: str = "") -> Callable:
    """Tag an operation for which doing nothing is the correct semantics."""
    return _tag(Status.NOOP, note)


def unsupported(op: str, instead: str = "") -> Callable:
    """Build an operation that raises UnsupportedError naming ``op`` and the backend."""

    def operation(self: Ops, *args: object, **kwargs: object) -> NoReturn:
        raise UnsupportedError(op, self.backend, instead)

    operation.__name__ = op
    operation.__doc__ = f"Not supported: {instead}" if instead else "Not supported."
    setattr(operation, STATUS_ATTR, (Status.UNSUPPORTED, instead))
    return operation


def status_of(ops: Any, op: str) -> tuple[Status, str]:
    """Return ``(Status, note)`` for operation ``op`` of an ops object.

    An operation that is missing, or not tagged, is reported as unsupported
    and untagged respectively, so a forgotten tag cannot pass as "native".
    """
    fn = getattr(type(ops), op, None)
    if fn is None:
        fn = getattr(ops, op, None)
    if fn is None:
        return Status.UNSUPPORTED, "not implemented by this backend"
    tag = getattr(fn, STATUS_ATTR, None)
    if tag is None:
        tag = getattr(getattr(fn, "__func__", None), STATUS_ATTR, None)
    if tag is None:
        return Status.TRANSLATED, "implemented by the backend (untagged)"
    return tag
