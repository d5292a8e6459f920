"""The declaration table: :data:`SPECS` (``torch.<ns>.<name>`` -> :class:`Spec`) and :data:`NVTX_SPECS`.

The family modules fill it when imported, one row per name, with three helpers:

* ``@fronts("name", rule)`` above a builder ``build_name(target: Target, ns: str, name: str)``, which
  returns the object ``torch.<ns>.<name>`` becomes (called by :func:`~torchdevice.namespaces.install`
  once per install, only when the rule's status is not unsupported);
* ``declare_unsupported("name", instead)``: raises :class:`~torchdevice.UnsupportedError` saying what
  to use instead;
* ``declare_native("name", note)``: torch's own object, left in place.

A name ``"<submodule>.<name>"`` (``"memory._snapshot"``, ``"nccl.version"``) is a function of that submodule of
``torch.<ns>`` that the namespace does not re-export: it is patched in the submodule only, where it exists.

Every row records where it was declared (:attr:`Spec.declared_at`); :func:`where` answers with it.
Also here: :data:`OPTIONAL_OPS` (operations a plugin may add to its Ops to give a function a real
answer). A builder closes over the install's :class:`~torchdevice.router.Target` (``target``): the
backend's bound operations, ``target.index(device)``, and ``target.state``, the objects built so far.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, NamedTuple, Union

from ..router import Target
from ..vocabulary import SOURCE_FAMILIES
from .rules import NATIVE, UNSUPPORTED, Rule, declared, optional_op

#: The namespaces torchdevice fronts, by device type: one per source family.
NAMESPACES = SOURCE_FAMILIES

#: Submodules that re-export namespace functions; patched alongside the namespace.
SUBMODULES = {
    "cuda": ("memory", "random", "streams", "graphs"),
    "mps": ("event",),
    "xpu": ("memory", "random", "streams"),
    "mtia": ("memory",),
}

#: ``build(target, ns, name)``: the object ``torch.<ns>.<name>`` becomes, given the install's
#: :class:`~torchdevice.router.Target`, the namespace (``"cuda"``) and the function's short name.
Builder = Callable[[Target, str, str], Any]

#: one name or several sharing a row
Names = Union[str, "tuple[str, ...]"]


class Spec(NamedTuple):
    """How one namespace function behaves: its status rule and, unless native, its builder.

    ``build(target, ns, name)`` returns the implementation, called only when the
    rule's status is not unsupported; unsupported functions raise
    :class:`~torchdevice.UnsupportedError` built from the rule's note.
    """

    rule: Rule
    build: Builder | None = None
    kind: str = "function"  #: "function", "class", or "value"
    declared_at: str = ""  #: ``"torchdevice/namespaces/memory.py:25"``: the line that declared the row


SPECS: dict[str, Spec] = {}
NVTX_SPECS: dict[str, Spec] = {}


_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_relative: dict[str, str] = {}  # one os.path.relpath per file: about a hundred rows are declared at import


def _caller() -> str:
    """``file:line`` of the declaration (the family module's line calling a helper below)."""
    frame = sys._getframe(2)
    filename = frame.f_code.co_filename
    path = _relative.get(filename)
    if path is None:
        path = _relative[filename] = os.path.relpath(filename, _PACKAGE_ROOT)
    return f"{path}:{frame.f_lineno}"


def _each(names: Names) -> tuple[str, ...]:
    return (names,) if isinstance(names, str) else tuple(names)


def fronts(names: Names, rule: Rule, kind: str = "function",
           table: dict[str, Spec] | None = None) -> Callable[[Builder], Builder]:
    """Decorator: the builder below makes ``torch.<ns>.<name>`` for each of ``names``, with status ``rule``."""
    site = _caller()

    def register(build: Builder) -> Builder:
        for name in _each(names):
            (SPECS if table is None else table)[name] = Spec(rule, build, kind, site)
        return build

    return register


def declare_unsupported(names: Names, instead: str, kind: str = "function") -> None:
    """``torch.<ns>.<name>`` raises :class:`~torchdevice.UnsupportedError` naming ``instead`` (a template:
    ``{ns}``, ``{backend}``, ``{device_type}``); a class is replaced by one whose construction raises."""
    site = _caller()
    for name in _each(names):
        SPECS[name] = Spec(declared(UNSUPPORTED, instead), None, kind, site)


def declare_native(names: Names, note: str) -> None:
    """``torch.<ns>.<name>`` stays torch's own object (a helper unrelated to the device, a build fact)."""
    site = _caller()
    for name in _each(names):
        SPECS[name] = Spec(declared(NATIVE, note), None, "function", site)


def where(api: str) -> str:
    """Where ``torch.<ns>.<name>`` is declared, and by which builder: ``where("torch.cuda.memory_allocated")``
    (also ``"memory_allocated"``, ``"torch.cuda.nvtx.range_push"``, ``"torch.cuda.nccl.version"``); KeyError for
    a name with no row."""
    parts = api.split(".")
    name = ".".join(parts[-2:]) if ".".join(parts[-2:]) in SPECS else parts[-1]  # a submodule's own row
    table = NVTX_SPECS if "nvtx" in parts[:-1] else SPECS
    spec = table.get(name)
    if spec is None:
        raise KeyError(f"{api!r} is not declared in torchdevice.namespaces (SPECS/NVTX_SPECS)")
    build = spec.build
    nothing = Target("?", "?", 0, None, None, None, None)  # type: ignore[arg-type]  # no operations: a declared row
    builder = "no builder: " + str(spec.rule(nothing, "cuda")[0]) if build is None else (
        f"{build.__module__}.{build.__qualname__}")
    return f"{spec.declared_at} ({builder})"


#: Optional operations a plugin may define on its Ops subclasses, and how they are called.
#: ``device``: ``op(index) -> value``; ``none``: ``op()``; ``pair``: ``op(index, peer_index) -> bool``.
OPTIONAL_OPS = {
    "device_memory_used": ("memory", "device"),
    "memory_usage": ("memory", "device"),
    "utilization": ("memory", "device"),
    "temperature": ("memory", "device"),
    "power_draw": ("memory", "device"),
    "clock_rate": ("memory", "device"),
    "list_gpu_processes": ("memory", "device"),
    "host_memory_stats": ("memory", "none"),
    "reset_accumulated_host_memory_stats": ("memory", "none"),
    "reset_peak_host_memory_stats": ("memory", "none"),
    "memory_snapshot": ("memory", "none"),
    "get_allocator_backend": ("memory", "none"),
    "can_device_access_peer": ("streams", "pair"),
}


def _build_optional(target: Target, name: str, build: Builder | None) -> Callable[..., Any]:
    """Builder: the backend's optional op when it has one, else ``build`` (the fallback's builder)."""
    family, call = OPTIONAL_OPS[name]
    op = getattr(getattr(target, family), name)
    index = target.index
    impl: Callable[..., Any]
    if call == "device":
        def device_impl(device: Any = None) -> Any:
            return op(index(device))
        impl = device_impl
    elif call == "pair":
        def pair_impl(device: Any, peer_device: Any) -> Any:
            return op(index(device), index(peer_device))
        impl = pair_impl
    else:
        def no_argument_impl() -> Any:
            return op()
        impl = no_argument_impl
    impl.__name__ = impl.__qualname__ = name
    return impl


def optional_op_builder(name: str, fallback: Builder | None) -> Builder:
    """Builder of an optional operation's function: the backend's own op when its Ops define one, else
    ``fallback`` (the builder declared in the family module; None where that row has none)."""

    def build(target: Target, ns: str, short: str) -> Any:
        family, _ = OPTIONAL_OPS[name]
        ops = getattr(target, family)
        if ops is not None and callable(getattr(type(ops), name, None)):
            return _build_optional(target, name, None)
        return None if fallback is None else fallback(target, ns, short)

    build.__qualname__ = f"optional_op_builder({name!r}, fallback={getattr(fallback, '__qualname__', None)})"
    return build


def _wrap_optional_ops() -> None:
    """Give every optional operation's row its rule and builder (run once, after the families declared them)."""
    for name, (family, _) in OPTIONAL_OPS.items():
        old = SPECS[name]
        SPECS[name] = Spec(optional_op(family, name, old.rule), optional_op_builder(name, old.build), old.kind,
                           old.declared_at)
