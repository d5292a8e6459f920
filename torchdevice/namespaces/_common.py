"""What every family module shares: the status constants, how a backend looks to the fronts
(:class:`View`), the rules that derive a function's status, and the specification table
(:data:`SPECS`, :func:`_spec`) the family modules fill.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch

from ..backend import STATUS_ATTR, Status, status_of
from ..errors import InvalidDeviceError
from ..streams import HostEvent, HostStream, index_in, parse_index
from ..vocabulary import SOURCE_FAMILIES

NATIVE, TRANSLATED, EMULATED, NOOP, UNSUPPORTED = (
    Status.NATIVE, Status.TRANSLATED, Status.EMULATED, Status.NOOP, Status.UNSUPPORTED,
)

#: The namespaces torchdevice fronts, by device type.
NAMESPACES = SOURCE_FAMILIES

#: Submodules that re-export namespace functions; patched alongside the namespace.
SUBMODULES = {
    "cuda": ("memory", "random", "streams", "graphs"),
    "mps": ("event",),
    "xpu": ("memory", "random", "streams"),
    "mtia": ("memory",),
}

_DeviceClass = torch.device  # bound at import, before any translation patch


# -- a backend as the facade sees it -----------------------------------------------------


class View:
    """One backend's name, device type and operation objects (no hardware needed).

    :func:`install` builds it from the resolved active backend;
    :mod:`torchdevice.matrix` builds one for every installed backend from its
    plugin's family hooks, whether or not the hardware is present.
    """

    def __init__(self, name: str, device_type: str, memory, streams, rng, collectives=None):
        self.name = name
        self.device_type = device_type
        self.memory = memory
        self.streams = streams
        self.rng = rng
        self.collectives = collectives

    @classmethod
    def of_active(cls, active) -> "View":
        return cls(active.name, active.device_type, active.memory, active.streams, active.rng, active.collectives)

    def op(self, family: str, name: str) -> tuple[Status, str]:
        """``(Status, note)`` of operation ``name`` of ``family``, as the backend tags it."""
        ops = getattr(self, family)
        if ops is None:
            return UNSUPPORTED, f"the backend provides no {family} operations"
        return status_of(ops, name)

    def __repr__(self) -> str:
        return f"<View {self.name} ({self.device_type})>"


# -- the rules: how a status is derived ------------------------------------------------------

Rule = Callable[[View, str], "tuple[Status, str]"]


def _fmt(text: str, view: View, ns: str) -> str:
    return text.format(ns=ns, backend=view.name, device_type=view.device_type)


def op_rule(family: str, op: str, how: str = "") -> Rule:
    """The status of one backend operation, as tagged (``how`` prefixes the note)."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        status, note = view.op(family, op)
        if status is UNSUPPORTED or not how:
            return status, note
        return status, f"{_fmt(how, view, ns)}; {family}.{op}: {note}" if note else _fmt(how, view, ns)

    rule.uses = ((family, op),)
    return rule


def all_of(*pairs: tuple[str, str], how: str = "") -> Rule:
    """Unsupported if any of the operations is; otherwise the status of the first."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        for family, op in pairs:
            status, note = view.op(family, op)
            if status is UNSUPPORTED:
                return status, note
        status, note = view.op(*pairs[0])
        text = _fmt(how, view, ns) if how else ""
        return status, f"{text}; {pairs[0][0]}.{pairs[0][1]}: {note}" if text and note else (text or note)

    rule.uses = pairs
    return rule


def declared(status: Status, note: str) -> Rule:
    """A facade-level function that maps to no backend operation: its kind is declared."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        return status, _fmt(note, view, ns)

    rule.uses = ()
    return rule


def when_op(family: str, op: str, expect: Status, then: tuple[Status, str], otherwise: str) -> Rule:
    """``then`` if the backend tags ``family.op`` as ``expect``, else unsupported (``otherwise``)."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        status, _ = view.op(family, op)
        if status is expect:
            return then[0], _fmt(then[1], view, ns)
        return UNSUPPORTED, _fmt(otherwise, view, ns)

    rule.uses = ((family, op),)
    return rule


def stream_class_rule(attr: str) -> Rule:
    """Status of the backend's ``Stream``/``Event`` class."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        cls = getattr(type(view.streams), attr, None) if view.streams is not None else None
        if cls is None:
            return UNSUPPORTED, f"the backend has no {attr} class"
        tag = getattr(cls, STATUS_ATTR, None)
        if tag is not None:
            return tag
        base = HostStream if attr == "Stream" else HostEvent
        if isinstance(cls, type) and issubclass(cls, base):
            return EMULATED, (
                f"{cls.__qualname__}: host-synchronous {attr.lower()} implemented by torchdevice "
                "(work is complete when its call returns; timing by the host clock)"
            )
        return TRANSLATED, f"the backend's own {attr} class ({cls.__module__}.{cls.__qualname__})"

    rule.uses = ()
    return rule


# -- the specification table ---------------------------------------------------------------


class Spec(NamedTuple):
    """How one namespace function behaves: its status rule and, unless native, its builder.

    ``build(fx, ns, name)`` returns the implementation, called only when the
    rule's status is not unsupported; unsupported functions raise
    :class:`~torchdevice.UnsupportedError` built from the rule's note.
    """

    rule: Rule
    build: Callable | None = None
    kind: str = "function"  #: "function", "class", or "value"


SPECS: dict[str, Spec] = {}
NVTX_SPECS: dict[str, Spec] = {}


def _spec(names, rule: Rule, kind: str = "function", table: dict | None = None):
    def register(build):
        for name in (names,) if isinstance(names, str) else names:
            (SPECS if table is None else table)[name] = Spec(rule, build, kind)
        return build

    return register


def _unsupported(names, instead: str) -> None:
    for name in (names,) if isinstance(names, str) else names:
        SPECS[name] = Spec(declared(UNSUPPORTED, instead), None)


def _native(names, note: str) -> None:
    for name in (names,) if isinstance(names, str) else names:
        SPECS[name] = Spec(declared(NATIVE, note), None)


def _has_op(view: View, family: str, op: str) -> bool:
    ops = getattr(view, family)
    return ops is not None and callable(getattr(type(ops), op, None))


def optional_op(family: str, op: str, fallback: Rule) -> Rule:
    """The backend's own ``family.op`` when its Ops define one (tagged); else ``fallback``.

    These are the *optional operations*: not part of the base families, a
    plugin adds them to its Ops subclass to give the function a real answer
    (see :data:`OPTIONAL_OPS`).
    """

    def rule(view: View, ns: str) -> tuple[Status, str]:
        if _has_op(view, family, op):
            return view.op(family, op)
        return fallback(view, ns)

    rule.uses = ((family, op),)
    rule.optional = (family, op)
    return rule


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


def _build_optional(fx, name: str, build: Callable | None):
    """Builder: the backend's optional op when it has one, else ``build`` (the fallback's builder)."""
    family, call = OPTIONAL_OPS[name]
    op = getattr(getattr(fx, family), name)
    index = fx.index
    if call == "device":
        def impl(device=None):
            return op(index(device))
    elif call == "pair":
        def impl(device, peer_device):
            return op(index(device), index(peer_device))
    else:
        def impl():
            return op()
    impl.__name__ = impl.__qualname__ = name
    return impl


class _Facade:
    """What the builders of one install close over: bound operations and the target."""

    def __init__(self, active, target):
        self.active = active
        self.target = target
        self.backend = active.name
        self.memory, self.streams, self.rng = active.memory, active.streams, active.rng
        self.count = count = active.device_count
        #: whether the target claims devices at all (before the source-family rule)
        self.available = bool(target.report_available or target.indexed) and count > 0
        self.source = target.source
        backend = active.name
        current = active.streams.current_device
        self.current = current

        def index(device=None) -> int:
            if device is None:
                return current()
            if type(device) is int:
                if device < 0:
                    return current()
                if device < count:
                    return device
                raise InvalidDeviceError(device, count, backend)
            return parse_index(device, current(), count, backend)

        self.index = index
        self.sync_debug_mode = 0
        self.state: dict[str, Any] = {}

    def available_for(self, ns: str) -> bool:
        """What ``torch.<ns>.is_available()`` answers: only the source family claims a device."""
        return self.available and ns == self.source


def _optional_index(fx: _Facade, device) -> int:
    """CUDA's ``_get_device_index(device, optional=True)``: -1 for None/negative, else the index."""
    if device is None:
        return -1
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str) or isinstance(device, _DeviceClass) or hasattr(device, "index"):
        named = index_in(device)
        return fx.current() if named is None else named
    raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device!r}")
