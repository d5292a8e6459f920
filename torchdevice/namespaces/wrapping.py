"""The wrappers :func:`~torchdevice.namespaces.install` puts in place: a generated function per signature
shape (trace note, ``UnsupportedError`` and ``SensorUnavailableError`` renamed to the API), the raiser of an
unsupported function, and the stand-ins for classes."""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable, NoReturn

from .. import trace as _trace
from ..backend import STATUS_ATTR, Status
from ..errors import SensorUnavailableError, UnsupportedError
from ..forwarding import maker, shape_of
from ..router import Target
from .rules import UNSUPPORTED
from .table import SPECS

#: the body of a generated wrapper (:func:`torchdevice.forwarding.maker`)
_WRAPPER = """\
    if _trace.active:
        _trace.note(api, how)
    try:
        return impl({args})
    except _RENAMED as exc:
        _rename(api, exc)
        raise
"""
_WRAPPER_NAMES = ("_trace", "api", "how", "impl", "_RENAMED", "_rename")
# a file name inside this package: trace's call-site search skips the wrapper's frame
_WRAPPER_FILE = f"{__file__}<wrapper>"
_RENAMED = (UnsupportedError, SensorUnavailableError)


def _rename(api: str, exc: UnsupportedError | SensorUnavailableError) -> None:
    """Raise ``exc`` again naming ``api`` (the function the program called), unless it names a torch API
    already (a fronted function calling another)."""
    if exc.function.startswith("torch."):
        return
    if isinstance(exc, SensorUnavailableError):
        raise SensorUnavailableError(api, exc.backend, exc.tried, exc.instead) from exc
    raise UnsupportedError(api, exc.backend, exc.instead) from exc


def _wrap(api: str, status_: Status, note: str, impl: Callable, name: str) -> Callable:
    """``impl`` with a trace note and UnsupportedError (SensorUnavailableError) renamed to ``api``.

    The wrapper is generated with ``impl``'s own parameter list, so a call
    forwards its arguments as they are (no ``*args``/``**kwargs`` packing: half
    the cost of a generic wrapper) and ``inspect.signature`` shows the real one.
    """
    how = f"{status_}: {note}" if note else str(status_)
    shape, defaults = shape_of(impl)
    make = maker(_WRAPPER, _WRAPPER_NAMES, shape, _WRAPPER_FILE)
    wrapper = make(_trace, api, how, impl, _RENAMED, _rename, *defaults)
    functools.update_wrapper(wrapper, impl)
    wrapper.__code__ = wrapper.__code__.replace(co_name=name, co_qualname=name)
    wrapper.__name__ = name
    wrapper.__qualname__ = name
    wrapper.__module__ = api.rpartition(".")[0]
    setattr(wrapper, STATUS_ATTR, (status_, note))
    return wrapper


def _raiser(api: str, backend: str, instead: str, name: str) -> Callable:
    def unsupported(*args: Any, **kwargs: Any) -> NoReturn:
        if _trace.active:
            _trace.note(api, "unsupported")
        raise UnsupportedError(api, backend, instead)

    unsupported.__name__ = unsupported.__qualname__ = name
    unsupported.__module__ = api.rpartition(".")[0]
    unsupported.__doc__ = f"Not supported on the {backend} backend: {instead}"
    setattr(unsupported, STATUS_ATTR, (UNSUPPORTED, instead))
    return unsupported


def _unsupported_class(api: str, backend: str, instead: str, name: str) -> type:
    """A class standing in for an unsupported one: ``isinstance`` works (False), construction raises."""

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        if _trace.active:
            _trace.note(api, "unsupported")
        raise UnsupportedError(api, backend, instead)

    cls = type(name, (), {
        "__init__": __init__,
        "__doc__": f"Not supported on the {backend} backend: {instead}",
        "__module__": api.rpartition(".")[0],
        STATUS_ATTR: (UNSUPPORTED, instead),
    })
    return cls


def _traced_class(cls: type, api: str, status_: Status, note: str) -> type:
    """Give a facade class a trace note at construction, without changing its identity."""
    init = cls.__init__  # type: ignore[misc]
    how = f"{status_}: {note}" if note else str(status_)

    @functools.wraps(init)
    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        if _trace.active:
            _trace.note(api, how)
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    setattr(cls, STATUS_ATTR, (status_, note))
    return cls


#: the methods of the backend's ``Stream`` / ``Event`` classes whose calls the trace notes (``__init__``: creation)
STREAM_METHODS = ("__init__", "synchronize", "query", "wait_event", "wait_stream", "record_event")
EVENT_METHODS = ("__init__", "record", "wait", "query", "synchronize", "elapsed_time")


#: the body of a generated stream/event method wrapper: only the program's own calls are noted
_METHOD = """\
    if _trace.active and not _trace.translation_code(_getframe(1).f_code.co_filename):
        _trace.note(api, how)
    return method({args})
"""
_METHOD_NAMES = ("_trace", "_getframe", "api", "how", "method")


def _traced_method(method: Callable, api: str, how: str) -> Callable:
    """``method`` noting the program's calls of it: generated with its own parameters (no packing: a method
    such as ``Event.query`` costs a few tens of nanoseconds more with tracing off); a method whose
    parameters cannot be read (a C one) gets a generic wrapper."""
    try:
        shape, defaults = shape_of(method)
    except (TypeError, ValueError):
        shape = None
    if shape is not None:
        make = maker(_METHOD, _METHOD_NAMES, shape, _WRAPPER_FILE)
        traced = make(_trace, sys._getframe, api, how, method, *defaults)
        functools.update_wrapper(traced, method)
        traced.__code__ = traced.__code__.replace(co_name=method.__name__, co_qualname=method.__qualname__)
        return traced

    @functools.wraps(method)
    def generic(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _trace.active and not _trace.translation_code(sys._getframe(1).f_code.co_filename):
            _trace.note(api, how)
        return method(self, *args, **kwargs)

    return generic


def _creation(cls: type) -> str | None:
    """``"__init__"`` or ``"__new__"``: the first Python-level one of ``cls``'s MRO (the one that makes its
    instances), None when both are C's (nothing to wrap without changing how instances are made)."""
    for klass in cls.__mro__:
        for name in ("__init__", "__new__"):
            found = vars(klass).get(name)
            if hasattr(getattr(found, "__func__", found), "__code__"):
                return name
    return None


def trace_stream_classes(patcher: Any, target: Target, ns: str) -> None:
    """Note the program's uses of the fronted ``torch.<ns>.Stream`` / ``Event`` (creation, ``record``,
    ``elapsed_time`` ...) for ``run --report`` and the log: their methods are wrapped through ``patcher`` (the
    backend's own classes keep their identity; ``unpatch()`` gives the methods back). The classes are those the
    install built (``target.state``); an unsupported class already notes its construction."""
    for kind, methods in (("Stream", STREAM_METHODS), ("Event", EVENT_METHODS)):
        cls = target.state.get(f"{ns}.{kind}")
        status_, note = SPECS[kind].rule(target, ns)
        if not isinstance(cls, type) or status_ is UNSUPPORTED:
            continue
        api, how = f"torch.{ns}.{kind}", f"{status_}: {note}" if note else str(status_)
        for name in methods:
            if name == "__init__":
                name = _creation(cls) or ""
            method = getattr(cls, name, None) if name else None
            if not callable(method):
                continue
            traced = _traced_method(method, api if name in ("__init__", "__new__") else f"{api}.{name}", how)
            patcher.set(cls, name, staticmethod(traced) if name == "__new__" else traced)
