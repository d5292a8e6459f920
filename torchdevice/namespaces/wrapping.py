"""The wrappers :func:`~torchdevice.namespaces.install` puts in place: a generated function per signature
shape (trace note, ``UnsupportedError`` and ``SensorUnavailableError`` renamed to the API), the raiser of an
unsupported function, and the stand-ins for classes."""
from __future__ import annotations

import functools
from typing import Any, Callable, NoReturn

from .. import trace as _trace
from ..backend import STATUS_ATTR, Status
from ..errors import SensorUnavailableError, UnsupportedError
from ..forwarding import maker, shape_of
from .rules import UNSUPPORTED

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
