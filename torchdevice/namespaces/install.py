"""Installing the fronts: wrappers generated per signature shape, built per namespace, set through
the patcher; ``torch.backends`` flags, ``get_device_module``, nvtx and comm.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import types
from typing import Any, Callable

import torch

from .. import boundary, router
from .. import trace as _trace
from ..backend import STATUS_ATTR, Status
from ..errors import UnsupportedError
from ._common import NAMESPACES, NATIVE, NVTX_SPECS, SPECS, SUBMODULES, TRANSLATED, UNSUPPORTED, Spec, View, _Facade
from .nvtx import _nvtx_state
from .statuses import _ORIGINAL_NAMES, COMM_FUNCTIONS, api_status, comm_status

# -- install --------------------------------------------------------------------------------------

_installed: dict | None = None


_FACTORY = """\
def factory(_trace, api, how, impl, UnsupportedError, {defaults}):
    def wrapper({params}):
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl({args})
        except UnsupportedError as exc:
            if exc.function.startswith("torch."):
                raise
            raise UnsupportedError(api, exc.backend, exc.instead) from exc
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
    shape = [(names[i], P.POSITIONAL_ONLY if i < code.co_posonlyargcount else P.POSITIONAL_OR_KEYWORD,
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
    params, args, defaults = [], [], []
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
    """``impl`` with a trace note and UnsupportedError renamed to ``api``.

    The wrapper is generated with ``impl``'s own parameter list, so a call
    forwards its arguments as they are (no ``*args``/``**kwargs`` packing: half
    the cost of a generic wrapper) and ``inspect.signature`` shows the real one.
    """
    how = f"{status_}: {note}" if note else str(status_)
    shape, defaults = _shape(impl)
    wrapper = _factory(shape)(_trace, api, how, impl, UnsupportedError, *defaults)
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
    init = cls.__init__
    how = f"{status_}: {note}" if note else str(status_)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if _trace.active:
            _trace.note(api, how)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    setattr(cls, STATUS_ATTR, (status_, note))
    return cls


def _build(fx: _Facade, view: View, ns: str, name: str, spec: Spec) -> Any:
    """The object ``torch.<ns>.<name>`` becomes; None for a native one (left untouched)."""
    api = f"torch.{ns}.{name}"
    status_, note = spec.rule(view, ns)
    if status_ is NATIVE and spec.build is None:
        return None
    if status_ is UNSUPPORTED or spec.build is None:
        if spec.kind == "value":
            return None  # an unsupported value attribute is left as torch has it
        if spec.kind == "class":
            return _unsupported_class(api, view.name, note, name)
        return _raiser(api, view.name, note, name.rpartition(".")[2])
    built = spec.build(fx, ns, name.rpartition(".")[2])
    if spec.kind == "class":
        if name in ("Stream", "Event"):
            return built  # the backend's own classes, as they are
        return _traced_class(built, api, status_, note)
    if spec.kind == "value":
        return built
    return _wrap(api, status_, note, built, name.rpartition(".")[2])


def _install_backends_flags(patcher, fx: _Facade, view: View, ns: str, objects: dict) -> None:
    """``torch.backends.<ns>.is_built`` (and MPS's ``is_available``) agree with the fronted namespace.

    A program never sees ``is_available()`` True with ``is_built()`` False, a pair real torch
    never reports; torch's own code keeps the real flags (:mod:`torchdevice.boundary`).
    """
    flags = getattr(torch.backends, ns, None)
    if flags is None or "is_available" not in objects:
        return
    if ns == "mps" and hasattr(flags, "is_available"):
        # MPS-written code asks torch.backends.mps.is_available() before choosing "mps"
        status_, note = SPECS["is_available"].rule(view, ns)
        built = _wrap(f"torch.backends.{ns}.is_available", status_, note,
                      SPECS["is_available"].build(fx, ns, "is_available"), "is_available")
        patcher.set(flags, "is_available", boundary.split(built, patcher.get(flags, "is_available")))
    real_is_built = patcher.get(flags, "is_built", None)
    if real_is_built is None:
        return
    available = fx.available_for(ns)

    def is_built() -> bool:
        return available or bool(real_is_built())

    note = "True while the fronted is_available() is True (a build that reports a device is built for it); " \
        "otherwise torch's own answer; torch's own code always gets torch's answer"
    patcher.set(flags, "is_built", boundary.split(
        _wrap(f"torch.backends.{ns}.is_built", TRANSLATED, note, is_built, "is_built"), real_is_built))


def install(patcher, target) -> None:
    """Make every namespace in ``target.sources`` front the active backend (see the module docstring)."""
    global _installed
    active = router.active()
    view = View.of_active(active)
    fx = _Facade(active, target)
    installed: dict[str, dict[str, Any]] = {}
    for ns in NAMESPACES:
        if ns not in target.sources:
            continue
        module = getattr(torch, ns)
        submodules = [m for m in (getattr(module, s, None) for s in SUBMODULES[ns]) if m is not None]
        objects: dict[str, Any] = {}
        # classes first: the builders of stream() and device_of close over them
        order = sorted(SPECS, key=lambda n: (SPECS[n].kind != "class", n != "device", n))
        for name in order:
            if name not in _ORIGINAL_NAMES[ns]:
                continue
            # The target's own namespace (cuda on CUDA): torch rewrites value attributes such as
            # default_generators when the device initialises, so they stay torch's own.
            native_value = SPECS[name].kind == "value" and getattr(getattr(active.rng, "ns", None), "module", None) is module
            obj = None if native_value else _build(fx, view, ns, name, SPECS[name])
            fx.state[f"{ns}.{name}"] = obj if obj is not None else getattr(module, name, None)
            if obj is not None:
                objects[name] = obj
        if ns == "mtia" and "classproperty" not in vars(module):
            # the catalog lists torch.mtia.classproperty, which torch 2.13 dropped: supply torch.cuda's helper
            from torch._utils import classproperty

            objects["classproperty"] = classproperty
        for name, obj in objects.items():
            if name in boundary.MACHINE_QUERIES and callable(obj):
                obj = objects[name] = boundary.split(obj, patcher.get(module, name))
            patcher.set(module, name, obj)
            for sub in submodules:
                if name in vars(sub):
                    patcher.set(sub, name, obj)
        _install_backends_flags(patcher, fx, view, ns, objects)
        if ns == "cuda":
            _install_nvtx(patcher, fx, view)
            _install_comm(patcher, fx, view)
        installed[ns] = objects
    if target.sources:
        _install_get_device_module(patcher, target, view)
    _installed = installed
    _trace.quiet = frozenset(  # the other families answer "not here", as on the source machine: not listed
        api for ns in target.sources if ns != fx.source
        for api in (f"torch.{ns}.is_available", f"torch.{ns}.device_count", f"torch.{ns}.is_initialized",
                    f"torch.backends.{ns}.is_available", f"torch.backends.{ns}.is_built"))






def _install_get_device_module(patcher, target, view: View) -> None:
    """``torch.get_device_module("cuda")`` -> the fronted ``torch.cuda``, not the target's module.

    torch resolves the string through ``torch.device``, which translation maps
    to the target (``torch.cpu``, lacking RNG functions): ``torch.random.fork_rng()``
    (whose default device type is ``"cuda"``) would break.
    """
    original = torch.get_device_module
    sources = target.sources
    api = "torch.get_device_module"
    how = "{}: {}".format(*api_status(view, api))

    def get_device_module(device=None):
        if device.__class__ is str:
            kind = device.partition(":")[0]
            if kind in sources:
                if _trace.active:
                    _trace.note(api, how)
                return getattr(torch, kind)
        return original(device)

    functools.update_wrapper(get_device_module, original)
    patcher.set(torch, "get_device_module", get_device_module)


def _install_nvtx(patcher, fx: _Facade, view: View) -> None:
    nvtx = torch.cuda.nvtx
    for name in ("range_push", "range_pop", "range_start", "range_end", "mark", "range"):
        spec = NVTX_SPECS[name]
        status_, note = spec.rule(view, "cuda")
        built = spec.build(fx, "cuda", name)
        fx.state[f"nvtx.{name}"] = built
        obj = _wrap(f"torch.cuda.nvtx.{name}", status_, note, built, name)
        patcher.set(nvtx, name, obj)






def _install_comm(patcher, fx: _Facade, view: View) -> None:
    """``torch.cuda.comm.<fn>`` -> :mod:`torchdevice.comm`'s function over the backend's collectives."""
    try:
        comm = importlib.import_module("torchdevice.comm")
        import torch.cuda.comm as cuda_comm
    except ImportError:
        return
    for name in COMM_FUNCTIONS:
        impl = getattr(comm, name, None)
        if not callable(impl) or name not in vars(cuda_comm):
            continue
        api = f"torch.cuda.comm.{name}"
        status_, note = comm_status(view, name)
        if status_ is UNSUPPORTED:
            obj = _raiser(api, view.name, note, name)
        else:
            obj = _wrap(api, status_, note, impl, name)
        patcher.set(cuda_comm, name, obj)


def uninstall() -> None:
    """Forget the installed objects (the Patcher has already restored torch)."""
    global _installed
    _installed = None
    try:
        del _nvtx_state.stack
    except AttributeError:
        pass


def installed() -> dict | None:
    """What :func:`install` put in place, per namespace (None when not installed)."""
    return _installed
