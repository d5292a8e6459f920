"""The wrappers :func:`~torchdevice.namespaces.install` puts in place: a generated function per signature
shape (trace note, ``UnsupportedError`` and ``SensorUnavailableError`` renamed to the API), the raiser of an
unsupported function, and the stand-ins for classes."""
from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable

from .. import trace as _trace
from ..backend import STATUS_ATTR, Status
from ..errors import SensorUnavailableError, UnsupportedError
from .rules import UNSUPPORTED

_FACTORY = """\
def factory(_trace, api, how, impl, UnsupportedError, SensorUnavailableError, {defaults}):
    def wrapper({params}):
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl({args})
        except UnsupportedError as exc:
            if exc.function.startswith("torch."):
                raise
            raise UnsupportedError(api, exc.backend, exc.instead) from exc
        except SensorUnavailableError as exc:
            if exc.function.startswith("torch."):
                raise
            raise SensorUnavailableError(api, exc.backend, exc.tried, exc.instead) from exc
    return wrapper
"""

# signature shape -> compiled factory: most wrapped functions share a handful of shapes
# (``(device=None)``, ``()``, ...), so activation compiles a few, not one per function
_factories: dict[tuple, Callable] = {}


def _shape(impl: Callable) -> tuple[tuple[tuple[str, Any, bool], ...], list[Any]]:
    """``impl``'s parameters as ``(name, kind, has_default)`` and its default values, in order."""
    if type(impl) is types.FunctionType and not hasattr(impl, "__wrapped__") and not hasattr(impl, "__signature__"):
        return _code_shape(impl)  # what inspect.signature would say, at a tenth of the cost
    params = inspect.signature(impl).parameters.values()
    shape = tuple((p.name, p.kind, p.default is not p.empty) for p in params)
    return shape, [p.default for p in params if p.default is not p.empty]


def _code_shape(fn: types.FunctionType) -> tuple[tuple[tuple[str, Any, bool], ...], list[Any]]:
    P = inspect.Parameter
    code = fn.__code__
    n_pos, n_kw = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    defaults = list(fn.__defaults__ or ())
    kwdefaults = fn.__kwdefaults__ or {}
    first_default = n_pos - len(defaults)
    shape: list[tuple[str, Any, bool]] = [(names[i], P.POSITIONAL_ONLY if i < code.co_posonlyargcount else P.POSITIONAL_OR_KEYWORD,
              i >= first_default) for i in range(n_pos)]
    at = n_pos + n_kw
    if code.co_flags & inspect.CO_VARARGS:
        shape.append((names[at], P.VAR_POSITIONAL, False))
        at += 1
    for name in names[n_pos:n_pos + n_kw]:
        shape.append((name, P.KEYWORD_ONLY, name in kwdefaults))
        if name in kwdefaults:
            defaults.append(kwdefaults[name])
    if code.co_flags & inspect.CO_VARKEYWORDS:
        shape.append((names[at], P.VAR_KEYWORD, False))
    return tuple(shape), defaults


def _factory(shape: tuple) -> Callable:
    factory = _factories.get(shape)
    if factory is not None:
        return factory
    P = inspect.Parameter
    params: list[str] = []
    args: list[str] = []
    defaults: list[str] = []
    for name, kind, has_default in shape:
        default = ""
        if has_default:
            default = f"=_d{len(defaults)}"
            defaults.append(f"_d{len(defaults)}")
        if kind is P.VAR_POSITIONAL:
            params.append(f"*{name}")
            args.append(f"*{name}")
        elif kind is P.VAR_KEYWORD:
            params.append(f"**{name}")
            args.append(f"**{name}")
        elif kind is P.KEYWORD_ONLY:
            if not any(p.startswith("*") for p in params):
                params.append("*")
            params.append(f"{name}{default}")
            args.append(f"{name}={name}")
        else:
            params.append(f"{name}{default}")
            args.append(name)
    positional_only = [i for i, (_, kind, _) in enumerate(shape) if kind is P.POSITIONAL_ONLY]
    if positional_only:
        params.insert(max(positional_only) + 1, "/")
    source = _FACTORY.format(defaults=", ".join(defaults), params=", ".join(params), args=", ".join(args))
    env: dict[str, Any] = {}
    # a file name inside this package: trace's call-site search skips the wrapper's frame
    exec(compile(source, f"{__file__}<wrapper>", "exec"), env)  # noqa: S102
    factory = _factories[shape] = env["factory"]
    return factory


def _wrap(api: str, status_: Status, note: str, impl: Callable, name: str) -> Callable:
    """``impl`` with a trace note and UnsupportedError (SensorUnavailableError) renamed to ``api``.

    The wrapper is generated with ``impl``'s own parameter list, so a call
    forwards its arguments as they are (no ``*args``/``**kwargs`` packing: half
    the cost of a generic wrapper) and ``inspect.signature`` shows the real one.
    """
    how = f"{status_}: {note}" if note else str(status_)
    shape, defaults = _shape(impl)
    wrapper = _factory(shape)(_trace, api, how, impl, UnsupportedError, SensorUnavailableError, *defaults)
    functools.update_wrapper(wrapper, impl)
    wrapper.__code__ = wrapper.__code__.replace(co_name=name, co_qualname=name)
    wrapper.__name__ = name
    wrapper.__qualname__ = name
    wrapper.__module__ = api.rpartition(".")[0]
    setattr(wrapper, STATUS_ATTR, (status_, note))
    return wrapper


def _raiser(api: str, backend: str, instead: str, name: str) -> Callable:
    def unsupported(*args, **kwargs):
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

    def __init__(self, *args, **kwargs):
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
    def __init__(self, *args, **kwargs):
        if _trace.active:
            _trace.note(api, how)
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    setattr(cls, STATUS_ATTR, (status_, note))
    return cls
