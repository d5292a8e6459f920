"""The declaration table: :data:`SPECS` (``torch.<ns>.<name>`` -> :class:`Spec`), :data:`NVTX_SPECS`,
the helpers the family modules declare with, :data:`OPTIONAL_OPS`, and :class:`_Facade` (what a builder
closes over)."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from ..errors import InvalidDeviceError
from ..vocabulary import SOURCE_FAMILIES, parse_index
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


def _optional_builder(name: str, fallback: Callable | None):
    def build(fx, ns, short):
        family, _ = OPTIONAL_OPS[name]
        ops = getattr(fx, family)
        if ops is not None and callable(getattr(type(ops), name, None)):
            return _build_optional(fx, name, None)
        return fallback(fx, ns, short)

    return build


def _wrap_optional_ops() -> None:
    """Give every optional operation's spec its rule and builder (run once, after the families declared them)."""
    for _name, (_family, _call) in OPTIONAL_OPS.items():
        _old = SPECS[_name]
        SPECS[_name] = Spec(optional_op(_family, _name, _old.rule), _optional_builder(_name, _old.build) if _old.build
                            else _optional_builder(_name, lambda fx, ns, short: None), _old.kind)
