"""``torch.cuda`` (and ``torch.mps``, ``torch.xpu``, ``torch.mtia``) fronting the active backend.

While translation is on (:func:`torchdevice.patch`), every namespace in the
target's ``sources`` -- ``torch.cuda`` when the backend is not CUDA, and
likewise for mps, xpu and mtia -- answers from the active backend. The real
modules are patched *in place* through the shared
:class:`~torchdevice._patching.Patcher`, so ``from torch import cuda`` taken
before patching sees the translation too, and :func:`torchdevice.unpatch`
gives every attribute back (identity). Submodules that re-export the same
functions are patched alike: ``torch.cuda.memory``, ``torch.cuda.random``,
``torch.cuda.streams``, ``torch.cuda.graphs``, ``torch.cuda.nvtx``,
``torch.cuda.comm`` (to :mod:`torchdevice.comm` where it implements the
function), ``torch.xpu.memory``/``random``/``streams``, ``torch.mtia.memory``
and ``torch.mps.event``. ``torch.cuda.amp`` is left to :mod:`torchdevice.amp`.

Every function gets one defined behaviour (a :class:`~torchdevice.backend.Status`):

* **native** -- passed through untouched (helpers such as ``torch.cuda.cast``,
  build facts such as ``get_arch_list``; and the whole namespace when the
  backend *is* that device type, e.g. ``torch.cuda`` on the cuda backend);
* **translated** / **emulated** / **no-op** -- as the backend's operation is
  tagged (:func:`~torchdevice.backend.status_of` on its Ops objects), or as
  declared below for facade-level functions that map to no operation
  (``is_available``, ``get_device_properties`` ...);
* **unsupported** -- raises :class:`~torchdevice.UnsupportedError` naming the
  function (``torch.cuda.cudart``), the backend, and what to use instead.

The statuses are *derived*: :func:`status` reads the backend's Ops tags
through :data:`SPECS`, the same table :func:`install` builds the functions
from, so ``torchdevice matrix`` cannot disagree with what a call does.

``torch.cuda.is_available()`` while translating
    True when the target has devices of its own type (cuda/xpu/mps...), and
    also on an accelerator-less target (cpu, MLX's host tensors) as long as
    ``report_available`` is on -- the default, so CUDA-only programs take
    their GPU path and run on the target. Turn it off with
    ``TORCHDEVICE_REPORT_AVAILABLE=0`` or ``torchdevice.patch(report_available=False)``:
    then ``is_available()`` is False and ``device_count()`` is 0, so programs
    take their CPU path. ``device_count()`` always agrees with ``is_available()``.

Only the source family claims a device
    No real machine has CUDA, MPS, XPU and MTIA devices at once, and programs
    that probe several families take the first that answers True (transformers'
    Trainer its XPU branch, tutorials "You have mps device"). So only the
    family the program is written for -- the *source family*, ``cuda`` by
    default, ``TORCHDEVICE_SOURCE=mps|xpu|mtia`` / ``torchdevice run --source`` /
    ``torchdevice.patch(source=...)`` otherwise -- answers as above; the other
    fronted namespaces answer ``is_available()`` False and ``device_count()``
    0 (``torch.backends.mps.is_available()`` too unless the source is mps),
    while every other function of theirs still translates when called. The
    target's own namespace is never fronted: on the cuda backend ``torch.cuda``
    is torch's own and answers for the hardware, whatever the source family.

Optional operations: a plugin gives functions that no base family carries a
real answer by defining a tagged method of the same name on its Ops subclass
(see :data:`OPTIONAL_OPS`): ``device_memory_used``, ``memory_usage``,
``utilization``, ``temperature``, ``power_draw``, ``clock_rate``,
``list_gpu_processes`` (``op(index)``), ``host_memory_stats``,
``reset_accumulated_host_memory_stats``, ``reset_peak_host_memory_stats``,
``memory_snapshot``, ``get_allocator_backend`` (``op()``) on its MemoryOps,
``can_device_access_peer`` (``op(index, peer_index)``) on its StreamOps.
Without one they keep the behaviour declared here (mostly unsupported).

Also fronted while translating: ``torch.get_device_module("cuda")`` returns
the fronted ``torch.cuda`` (torch would resolve the string to the target's
module, e.g. ``torch.cpu``, which lacks the RNG functions
``torch.random.fork_rng`` needs), and ``torch.backends.mps.is_available()``
answers like ``torch.mps.is_available()``.

Costs: the backend's operations are resolved once per :func:`install` (the
target is rebuilt and everything reinstalled when :func:`torchdevice.use`
changes backend); a call is a closure over bound methods, with no pluggy hook
and no lookup. Each call does ``if trace.active: trace.note("torch.cuda.X", how)``.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import threading
import types
from collections.abc import Sequence
from typing import Any, Callable, NamedTuple

import torch

from . import boundary, router
from . import trace as _trace
from .backend import STATUS_ATTR, Status, status_of
from .errors import InvalidDeviceError, UnsupportedError
from .streams import HostEvent, HostStream, index_in, parse_index
from .vocabulary import SOURCE_FAMILIES

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


# ---- devices ----

@_spec("is_available", declared(
    TRANSLATED,
    "True only while {ns} is the source family (TORCHDEVICE_SOURCE / torchdevice run --source, default cuda), "
    "and then when the {backend} backend has devices, or is accelerator-less with report_available on "
    "(TORCHDEVICE_REPORT_AVAILABLE, default 1); False while another family is the source",
))
def _b_is_available(fx, ns, name):
    available = fx.available_for(ns)

    def is_available() -> bool:
        return available

    return is_available


@_spec("device_count", declared(
    TRANSLATED, "the {backend} backend's device count; 0 when is_available() is False ({ns} not the source "
    "family, or report_available off)",
))
def _b_device_count(fx, ns, name):
    count = fx.count if fx.available_for(ns) else 0

    def device_count() -> int:
        return count

    return device_count


@_spec("init", declared(TRANSLATED, "resolves the {backend} backend (torchdevice's lazy initialization)"))
def _b_init(fx, ns, name):
    def init() -> None:
        router.active()

    return init


@_spec("is_initialized", declared(TRANSLATED, "whether the {backend} backend has been resolved"))
def _b_is_initialized(fx, ns, name):
    def is_initialized() -> bool:
        return router._active is not None

    return is_initialized


@_spec("current_device", op_rule("streams", "current_device"))
def _b_current_device(fx, ns, name):
    current = fx.current

    def current_device() -> int:
        return current()

    return current_device


@_spec("set_device", op_rule("streams", "set_device"))
def _b_set_device(fx, ns, name):
    set_device_op, index = fx.streams.set_device, fx.index

    def set_device(device) -> None:
        if device is None or (isinstance(device, int) and device < 0):
            return  # a no-op, as torch.cuda.set_device(-1)
        set_device_op(index(device))

    return set_device


@_spec("synchronize", op_rule("streams", "synchronize"))
def _b_synchronize(fx, ns, name):
    sync, index = fx.streams.synchronize, fx.index

    def synchronize(device=None) -> None:
        sync(index(device))

    return synchronize


@_spec("device", all_of(("streams", "set_device"), ("streams", "current_device"),
                        how="context manager over the per-thread current device"), kind="class")
def _b_device(fx, ns, name):
    current, set_device_op, index = fx.current, fx.streams.set_device, fx.index

    class device:
        """Context manager that makes ``device`` current for this thread, then restores it.

        A negative index or None leaves everything unchanged, as ``torch.cuda.device``.
        """

        def __init__(self, device):
            self.idx = _optional_index(fx, device)
            self.prev_idx = -1

        def __enter__(self):
            if self.idx < 0:
                self.prev_idx = -1
                return
            target = index(self.idx)
            self.prev_idx = current()
            if target != self.prev_idx:
                set_device_op(target)

        def __exit__(self, *exc) -> bool:
            if self.prev_idx >= 0:
                self.idx = current()
                if self.idx != self.prev_idx:
                    set_device_op(self.prev_idx)
            return False

        def __repr__(self) -> str:
            return f"torch.{ns}.device({self.idx})"

    device.__module__ = f"torch.{ns}"
    device.__qualname__ = "device"
    return device


@_spec("device_of", all_of(("streams", "set_device"), ("streams", "current_device"),
                           how="makes the device of a tensor on the {backend} backend current"), kind="class")
def _b_device_of(fx, ns, name):
    device_cls = fx.state[f"{ns}.device"]
    device_type = fx.target.device_type

    class device_of(device_cls):
        """Context manager that makes the device of ``obj`` (a tensor or storage) current."""

        def __init__(self, obj):
            idx = obj.get_device() if obj.device.type == device_type else -1
            super().__init__(idx if idx is not None and idx >= 0 else -1)

    device_of.__module__ = f"torch.{ns}"
    device_of.__qualname__ = "device_of"
    return device_of


_PROPS = "from the {backend} backend's device properties ({what})"


@_spec("get_device_properties", declared(
    TRANSLATED, "torchdevice.DeviceProperties of the {backend} device (CUDA's field names: name, "
    "total_memory, major/minor (None without a compute capability), multi_processor_count)",
))
def _b_get_device_properties(fx, ns, name):
    props, index = fx.active.properties, fx.index

    def get_device_properties(device=None):
        return props(index(device))

    return get_device_properties


@_spec("get_device_name", declared(TRANSLATED, _PROPS.replace("{what}", "name")))
def _b_get_device_name(fx, ns, name):
    props, index = fx.active.properties, fx.index

    def get_device_name(device=None) -> str:
        return props(index(device)).name

    return get_device_name


@_spec("is_bf16_supported", declared(TRANSLATED, _PROPS.replace("{what}", "bf16_supported")))
def _b_is_bf16_supported(fx, ns, name):
    props, current = fx.active.properties, fx.current

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return bool(props(current()).bf16_supported)

    return is_bf16_supported


@_spec("recommended_max_memory", declared(
    TRANSLATED, "the {backend} device's total memory (get_device_properties().total_memory): the backend "
    "gives no smaller recommended working-set figure",
))
def _b_recommended_max_memory(fx, ns, name):
    props, current = fx.active.properties, fx.current

    def recommended_max_memory() -> int:
        return int(props(current()).total_memory)

    return recommended_max_memory


@_spec("get_device_capability", declared(
    TRANSLATED, "the {backend} device's capability, or where it has none the CUDA feature level it offers: "
    "(8, 0) with bfloat16, else (7, 0); TORCHDEVICE_CAPABILITY=MAJOR.MINOR overrides (torchdevice.capability)",
))
def _b_get_device_capability(fx, ns, name):
    props, index = fx.active.properties, fx.index

    def get_device_capability(device=None) -> tuple[int, int]:
        return props(index(device)).capability

    return get_device_capability



@_spec("is_tf32_supported", declared(
    TRANSLATED, "False: TF32 is a tensor-core format of NVIDIA (and some AMD) GPUs, which the {backend} backend "
    "does not compute in; torch.backends.cuda.matmul.allow_tf32 has no effect there",
))
def _b_is_tf32_supported(fx, ns, name):
    def is_tf32_supported() -> bool:
        return False

    return is_tf32_supported



@_spec("can_device_access_peer", declared(
    EMULATED, "validates both devices; a device is not its own peer (False, as CUDA answers); between two "
    "distinct devices it raises UnsupportedError (the backend reports no peer access)",
))
def _b_can_device_access_peer(fx, ns, name):
    index, backend = fx.index, fx.backend
    api = f"torch.{ns}.{name}"

    def can_device_access_peer(device, peer_device) -> bool:
        if index(device) == index(peer_device):
            return False
        raise UnsupportedError(api, backend, "the backend reports no peer-access information between devices")

    return can_device_access_peer


_native(("cast", "lru_cache"), "a Python helper (typing.cast / functools.lru_cache) re-exported by torch.{ns}; "
        "unrelated to the device")
_native("classproperty", "torch._utils.classproperty, a helper torch.{ns} re-exports; unrelated to the device")
_native(("get_arch_list", "get_gencode_flags"),
        "a fact about this torch build: the {ns} architectures it was compiled for (none on a build without {ns})")

# ---- memory ----


def _device_op(family: str, op: str):
    def build(fx, ns, name):
        fn, index = getattr(getattr(fx, family), op), fx.index

        def impl(device=None):
            return fn(index(device))

        impl.__name__ = impl.__qualname__ = name
        return impl

    return build


for _name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
              "reset_peak_memory_stats", "reset_accumulated_memory_stats", "memory_stats", "mem_get_info",
              "get_per_process_memory_fraction"):
    _spec(_name, op_rule("memory", _name))(_device_op("memory", _name))

_DEPRECATED = {
    "memory_cached": ("memory_reserved", "`torch.{ns}.memory_cached` has been renamed to `torch.{ns}.memory_reserved`"),
    "max_memory_cached": ("max_memory_reserved",
                          "`torch.{ns}.max_memory_cached` has been renamed to `torch.{ns}.max_memory_reserved`"),
    "reset_max_memory_allocated": ("reset_peak_memory_stats",
                                   "torch.{ns}.reset_max_memory_allocated now calls torch.{ns}.reset_peak_memory_stats, "
                                   "which resets /all/ peak memory stats."),
    "reset_max_memory_cached": ("reset_peak_memory_stats",
                                "torch.{ns}.reset_max_memory_cached now calls torch.{ns}.reset_peak_memory_stats, "
                                "which resets /all/ peak memory stats."),
}


def _deprecated_alias(target: str, message: str):
    def build(fx, ns, name):
        fn, index, text = getattr(fx.memory, target), fx.index, message.format(ns=ns)

        def impl(device=None):
            _trace.warn(text, FutureWarning)
            return fn(index(device))

        impl.__name__ = impl.__qualname__ = name
        return impl

    return build


for _name, (_target, _message) in _DEPRECATED.items():
    _spec(_name, op_rule("memory", _target, how=f"deprecated alias of {_target} (FutureWarning, as torch)"))(
        _deprecated_alias(_target, _message))


@_spec("empty_cache", op_rule("memory", "empty_cache"))
def _b_empty_cache(fx, ns, name):
    fn = fx.memory.empty_cache

    def empty_cache() -> None:
        fn()

    return empty_cache


@_spec("set_per_process_memory_fraction", op_rule("memory", "set_per_process_memory_fraction"))
def _b_set_fraction(fx, ns, name):
    fn, index = fx.memory.set_per_process_memory_fraction, fx.index

    def set_per_process_memory_fraction(fraction, device=None) -> None:
        if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        fn(float(fraction), index(device))

    return set_per_process_memory_fraction


def _mem_alias(target: str):
    def build(fx, ns, name):
        fn, current = getattr(fx.memory, target), fx.current

        def impl() -> int:
            return fn(current())

        impl.__name__ = impl.__qualname__ = name
        return impl

    return build


# torch.mps's names for the current device's figures
_spec("current_allocated_memory", op_rule("memory", "memory_allocated", how="memory_allocated() of the current device"))(
    _mem_alias("memory_allocated"))
_spec("driver_allocated_memory", op_rule("memory", "memory_reserved", how="memory_reserved() of the current device"))(
    _mem_alias("memory_reserved"))


def _nest(stats: dict) -> dict:
    result: dict = {}
    for key, value in stats.items():
        node = result
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # a key that is also a prefix: keep both
                child = node[part] = {"": child}
            node = child
        node[parts[-1]] = value
    return result


@_spec("memory_stats_as_nested_dict", op_rule("memory", "memory_stats", how="memory_stats() nested on '.'"))
def _b_nested(fx, ns, name):
    fn, index = fx.memory.memory_stats, fx.index

    def memory_stats_as_nested_dict(device=None) -> dict:
        return _nest(fn(index(device)))

    return memory_stats_as_nested_dict


@_spec("memory_summary", op_rule("memory", "memory_stats", how="CUDA's table layout, from memory_stats()"))
def _b_memory_summary(fx, ns, name):
    from . import memstats

    fn, index, backend = fx.memory.memory_stats, fx.index, fx.backend

    def memory_summary(device=None, abbreviated: bool = False) -> str:
        idx = index(device)
        return memstats.summary(fn(idx), idx, backend, abbreviated)

    return memory_summary


@_spec("device_memory_used", op_rule("memory", "mem_get_info", how="total minus free of mem_get_info()"))
def _b_device_memory_used(fx, ns, name):
    fn, index = fx.memory.mem_get_info, fx.index

    def device_memory_used(device=None) -> int:
        free, total = fn(index(device))
        return int(total - free)

    return device_memory_used


@_spec("caching_allocator_enable", when_op(
    "memory", "empty_cache", NOOP,
    (NOOP, "the {backend} backend's allocator keeps no cache (its empty_cache is a no-op), so there is no "
           "caching to enable or disable"),
    "the {backend} backend's caching allocator cannot be switched off from Python",
))
def _b_caching_allocator_enable(fx, ns, name):
    def caching_allocator_enable(value: bool = True) -> None:
        return None

    return caching_allocator_enable


_unsupported("caching_allocator_alloc",
             "allocate through a tensor: torch.empty(size, dtype=torch.uint8, device=...)")
_unsupported("caching_allocator_delete", "free the memory by dropping the tensor that owns it")
_unsupported("change_current_allocator", "the {backend} backend's allocator cannot be replaced from Python")
_unsupported("get_allocator_backend",
             "the {backend} backend has no configurable allocator backend (PYTORCH_CUDA_ALLOC_CONF is CUDA's)")


@_spec("memory_snapshot", declared(TRANSLATED, "the {backend} backend exposes no caching-allocator segments: an "
                                               "empty list, the snapshot CUDA gives before its first allocation (a "
                                               "question answered, not refused; a backend with segments defines "
                                               "MemoryOps.memory_snapshot)"))
def _b_memory_snapshot(fx, ns, name):
    def memory_snapshot(mempool_id=None, include_traces=True) -> list:
        return []

    return memory_snapshot


_unsupported(("host_memory_stats", "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats"),
             "the {backend} backend reports no pinned host-memory statistics; use torch.{ns}.memory_stats()")


@_spec("host_memory_stats_as_nested_dict", optional_op(
    "memory", "host_memory_stats",
    declared(UNSUPPORTED, "the {backend} backend reports no pinned host-memory statistics; use torch.{ns}.memory_stats()"),
))
def _b_host_nested(fx, ns, name):
    fn = fx.memory.host_memory_stats

    def host_memory_stats_as_nested_dict() -> dict:
        return _nest(fn())

    return host_memory_stats_as_nested_dict

_unsupported("use_mem_pool", "memory pools are a feature of CUDA's caching allocator; allocate normally")
_unsupported("list_gpu_processes",
             "needs NVML and an NVIDIA GPU; torch.{ns}.memory_stats() gives this process's figures")
_unsupported(("memory_usage", "utilization", "temperature", "power_draw", "clock_rate"),
             "device telemetry comes from NVML/amd-smi on NVIDIA/AMD GPUs only; read the {backend} "
             "machine's own monitoring tools")
_unsupported("record_memory_history",
             "allocator history is a feature of the {ns} allocator; use torch.{ns}.memory_stats()")


@_spec("snapshot", declared(TRANSLATED, "the {backend} backend exposes no allocator segments and records no "
                                        "history: {{'segments': [], 'device_traces': [[] per device]}}, the empty "
                                        "snapshot"))
def _b_snapshot(fx, ns, name):
    count = fx.count

    def snapshot() -> dict:
        return {"segments": [], "device_traces": [[] for _ in range(count)]}

    return snapshot


@_spec("ipc_collect", declared(NOOP, "no {ns} IPC handles exist on the {backend} backend: there is nothing to collect"))
def _b_ipc_collect(fx, ns, name):
    def ipc_collect() -> None:
        return None

    return ipc_collect


# ---- streams ----


@_spec(("current_stream", "default_stream"), op_rule("streams", "current_stream"))
def _b_stream_getter(fx, ns, name):
    fn, index = getattr(fx.streams, name), fx.index

    def impl(device=None):
        return fn(index(device))

    impl.__name__ = impl.__qualname__ = name
    return impl


SPECS["default_stream"] = Spec(op_rule("streams", "default_stream"), _b_stream_getter)


def _set_stream_impl(fx):
    set_stream_op, set_device_op, current = fx.streams.set_stream, fx.streams.set_device, fx.current

    def set_stream(stream) -> None:
        if stream is None:
            return  # a no-op, as torch.cuda.set_stream(None)
        index = getattr(stream, "device_index", None)
        if index is not None and index >= 0 and index != current():
            set_device_op(index)  # CUDA's set_stream also makes the stream's device current
        set_stream_op(stream)

    return set_stream


@_spec("set_stream", all_of(("streams", "set_stream"), ("streams", "set_device")))
def _b_set_stream(fx, ns, name):
    return _set_stream_impl(fx)


@_spec("StreamContext", all_of(("streams", "set_stream"), ("streams", "current_stream"), ("streams", "set_device"),
                               how="selects a stream (and its device) for its block, then restores both"),
       kind="class")
def _b_stream_context(fx, ns, name):
    set_stream = _set_stream_impl(fx)
    current_stream_op, index = fx.streams.current_stream, fx.index

    class StreamContext:
        """Context manager that selects ``stream`` (None: no-op), as ``torch.cuda.StreamContext``."""

        def __init__(self, stream):
            self.stream = stream
            self.src_prev_stream = None
            self.dst_prev_stream = None

        def __enter__(self):
            cur = self.stream
            if cur is None:
                return
            self.src_prev_stream = current_stream_op(index(None))
            if self.src_prev_stream.device_index != cur.device_index:
                self.dst_prev_stream = current_stream_op(index(cur.device_index))
            set_stream(cur)

        def __exit__(self, *exc):
            cur = self.stream
            if cur is None:
                return
            if self.src_prev_stream.device_index != cur.device_index:
                set_stream(self.dst_prev_stream)
            set_stream(self.src_prev_stream)

    StreamContext.__module__ = f"torch.{ns}"
    return StreamContext


@_spec("stream", all_of(("streams", "set_stream"), ("streams", "current_stream"), ("streams", "set_device"),
                        how="returns torch.{ns}.StreamContext(stream)"))
def _b_stream(fx, ns, name):
    context = fx.state[f"{ns}.StreamContext"]

    def stream(stream):
        return context(stream)

    return stream


@_spec("Stream", stream_class_rule("Stream"), kind="class")
def _b_stream_class(fx, ns, name):
    return fx.streams.Stream


@_spec("Event", stream_class_rule("Event"), kind="class")
def _b_event_class(fx, ns, name):
    return fx.streams.Event


@_spec("is_current_stream_capturing", declared(
    EMULATED, "always False: graph capture does not exist on the {backend} backend, so none can be underway",
))
def _b_capturing(fx, ns, name):
    def is_current_stream_capturing() -> bool:
        return False

    return is_current_stream_capturing


_SYNC_DEBUG = (
    EMULATED,
    "kept by torchdevice; it never fires because work on the {backend} backend is complete when its call "
    "returns, so no operation synchronizes with a device",
)
_SYNC_DEBUG_NO = "the {backend} backend cannot report which operations synchronize"
_MODES = {"default": 0, "warn": 1, "error": 2}


@_spec("set_sync_debug_mode", when_op("streams", "synchronize", NOOP, _SYNC_DEBUG, _SYNC_DEBUG_NO))
def _b_set_sync_debug_mode(fx, ns, name):
    def set_sync_debug_mode(debug_mode) -> None:
        if isinstance(debug_mode, str):
            if debug_mode not in _MODES:
                raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
            debug_mode = _MODES[debug_mode]
        if not isinstance(debug_mode, int) or debug_mode not in (0, 1, 2):
            raise RuntimeError(f"invalid value of debug_mode {debug_mode!r}, expected 0, 1 or 2")
        fx.sync_debug_mode = int(debug_mode)

    return set_sync_debug_mode


@_spec("get_sync_debug_mode", declared(
    EMULATED, "the mode set_sync_debug_mode kept (0, 'default', where it cannot be set on the {backend} backend): "
    "no operation on it is reported as synchronizing",
))
def _b_get_sync_debug_mode(fx, ns, name):
    def get_sync_debug_mode() -> int:
        return fx.sync_debug_mode

    return get_sync_debug_mode


_unsupported("get_stream_from_external",
             "external {ns} streams cannot be wrapped on the {backend} backend; create one with torch.{ns}.Stream()")
_unsupported("graph_pool_handle", "graphs do not exist on the {backend} backend; run the work eagerly")
_unsupported("cudart", "the CUDA runtime exists only on NVIDIA GPUs; use torch.profiler for profiling ranges and "
             "torch.cuda.synchronize()/Event for timing")
_unsupported("current_blas_handle", "cuBLAS handles exist only on CUDA")
_unsupported("compile_shader", "Metal shaders run only on MPS; write the kernel with torch operations")

for _name in ("CUDAGraph", "XPUGraph", "MTIAGraph", "graph"):
    SPECS[_name] = Spec(declared(UNSUPPORTED, "graphs do not exist on the {backend} backend; run the captured work "
                                              "eagerly"), None, "class")
for _name in ("MemPool", "CUDAPluggableAllocator", "XPUPluggableAllocator"):
    SPECS[_name] = Spec(declared(UNSUPPORTED, "memory pools and pluggable allocators belong to the {ns} caching "
                                              "allocator; allocate normally on the {backend} backend"), None, "class")
SPECS["ExternalStream"] = Spec(declared(UNSUPPORTED, "external {ns} streams cannot be wrapped on the {backend} "
                                                     "backend; create one with torch.{ns}.Stream()"), None, "class")


@_spec("make_graphed_callables", declared(
    NOOP, "graphs do not exist on the {backend} backend: the callables are returned as they are and run eagerly, "
    "computing the same results without graph replay",
))
def _b_make_graphed_callables(fx, ns, name):
    def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                               allow_unused_input: bool = False, pool=None):
        return callables

    return make_graphed_callables


@_spec("check_error", declared(
    EMULATED, "0 (cudaSuccess) passes; any other CUDA runtime result code raises torch.cuda.CudaError",
))
def _b_check_error(fx, ns, name):
    def check_error(res: int) -> None:
        if res != 0:
            error_class = getattr(torch.cuda, "CudaError", RuntimeError)
            error = error_class.__new__(error_class)
            RuntimeError.__init__(error, f"CUDA runtime error ({res})")
            raise error

    return check_error


# ---- random numbers ----


@_spec(("manual_seed", "manual_seed_all"), op_rule("rng", "manual_seed"))
def _b_manual_seed(fx, ns, name):
    fn = getattr(fx.rng, name)

    def impl(seed: int) -> None:
        fn(int(seed))

    impl.__name__ = impl.__qualname__ = name
    return impl


SPECS["manual_seed_all"] = Spec(op_rule("rng", "manual_seed_all"), _b_manual_seed)


def _noarg_op(family: str, op: str):
    def build(fx, ns, name):
        fn = getattr(getattr(fx, family), op)

        def impl():
            return fn()

        impl.__name__ = impl.__qualname__ = name
        return impl

    return build


for _name in ("seed", "seed_all", "initial_seed"):
    _spec(_name, op_rule("rng", _name))(_noarg_op("rng", _name))


@_spec("get_rng_state", op_rule("rng", "get_rng_state"))
def _b_get_rng_state(fx, ns, name):
    fn, index = fx.rng.get_rng_state, fx.index

    def get_rng_state(device=None) -> torch.Tensor:
        return fn(index(device))

    return get_rng_state


def _check_state(new_state) -> None:
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError(f"new_state must be a torch.ByteTensor, got {type(new_state).__name__}")


@_spec("set_rng_state", op_rule("rng", "set_rng_state"))
def _b_set_rng_state(fx, ns, name):
    fn, index = fx.rng.set_rng_state, fx.index

    def set_rng_state(new_state, device=None) -> None:
        _check_state(new_state)
        fn(new_state, index(device))

    return set_rng_state


@_spec("get_rng_state_all", op_rule("rng", "get_rng_state", how="get_rng_state() of every device"))
def _b_get_rng_state_all(fx, ns, name):
    fn, count = fx.rng.get_rng_state, fx.count

    def get_rng_state_all() -> list:
        return [fn(i) for i in range(count)]

    return get_rng_state_all


@_spec("set_rng_state_all", op_rule("rng", "set_rng_state", how="set_rng_state() of every device"))
def _b_set_rng_state_all(fx, ns, name):
    fn, index = fx.rng.set_rng_state, fx.index

    def set_rng_state_all(new_states) -> None:
        for i, state in enumerate(new_states):
            _check_state(state)
            fn(state, index(i))

    return set_rng_state_all


@_spec("default_generators", op_rule("rng", "default_generator", how="each device's default generator"), kind="value")
def _b_default_generators(fx, ns, name):
    return _DeviceGenerators(fx.rng.default_generator, fx.count)


class _DeviceGenerators(Sequence):
    """Each device's default generator, looked up when asked: a device namespace fills its
    own tuple only when the device initialises (torch.cuda's is empty until then)."""

    def __init__(self, get: Callable[[int], Any], count: int):
        self._get, self._count = get, count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self._get(i) for i in range(self._count)[index])
        return self._get(range(self._count)[index])

    def __iter__(self):
        return (self._get(i) for i in range(self._count))  # errors propagate (Sequence's would stop)

    def __eq__(self, other) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    __hash__ = None  # type: ignore[assignment]  # mutable view, like a list

    def __repr__(self) -> str:
        return repr(tuple(self))


# ---- nvtx (torch.cuda.nvtx) ----

_NVTX_NOTE = ("no NVTX profiler on the {backend} backend: the annotation is dropped; range depths and ids are "
              "tracked per thread so the values returned are the true ones")
_nvtx_state = threading.local()
_nvtx_ids = iter(range(1, 2**63))
_nvtx_lock = threading.Lock()


def _nvtx_depth() -> list:
    try:
        return _nvtx_state.stack
    except AttributeError:
        _nvtx_state.stack = []
        return _nvtx_state.stack


@_spec("range_push", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_range_push(fx, ns, name):
    def range_push(msg) -> int:
        stack = _nvtx_depth()
        stack.append(msg)
        return len(stack) - 1

    return range_push


@_spec("range_pop", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_range_pop(fx, ns, name):
    def range_pop() -> int:
        stack = _nvtx_depth()
        if not stack:
            return -1  # NVTX's answer for a pop without a push
        stack.pop()
        return len(stack)

    return range_pop


@_spec("range_start", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_range_start(fx, ns, name):
    def range_start(msg) -> int:
        with _nvtx_lock:
            return next(_nvtx_ids)

    return range_start


@_spec(("range_end", "mark"), declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_nvtx_none(fx, ns, name):
    def impl(arg) -> None:
        return None

    impl.__name__ = impl.__qualname__ = name
    return impl


@_spec("range", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_range(fx, ns, name):
    import contextlib

    push, pop = fx.state["nvtx.range_push"], fx.state["nvtx.range_pop"]

    @contextlib.contextmanager
    def range(msg, *args, **kwargs):
        push(msg.format(*args, **kwargs))
        try:
            yield
        finally:
            pop()

    return range


def _optional_builder(name: str, fallback: Callable | None):
    def build(fx, ns, short):
        family, _ = OPTIONAL_OPS[name]
        ops = getattr(fx, family)
        if ops is not None and callable(getattr(type(ops), name, None)):
            return _build_optional(fx, name, None)
        return fallback(fx, ns, short)

    return build


for _name, (_family, _call) in OPTIONAL_OPS.items():
    _old = SPECS[_name]
    SPECS[_name] = Spec(optional_op(_family, _name, _old.rule), _optional_builder(_name, _old.build) if _old.build
                        else _optional_builder(_name, lambda fx, ns, short: None), _old.kind)


# -- statuses ------------------------------------------------------------------------------------


def spec_for(ns: str, name: str) -> Spec | None:
    """The :class:`Spec` of ``torch.<ns>.<name>`` (``name`` may be ``"nvtx.range_push"``)."""
    if name.startswith("nvtx."):
        return NVTX_SPECS.get(name[5:]) if ns == "cuda" else None
    return SPECS.get(name)


def status(view: View, ns: str, name: str) -> tuple[Status, str] | None:
    """``(Status, note)`` of ``torch.<ns>.<name>`` on the backend ``view``; None if torchdevice has no spec for it.

    When the backend's device type *is* ``ns`` (``torch.cuda`` on the cuda
    backend), nothing is translated and every function is native.
    """
    spec = spec_for(ns, name)
    if spec is None:
        return None
    if ns == view.device_type:
        return NATIVE, f"torch.{ns} itself: code written for {ns} runs untranslated on the {view.name} backend"
    return spec.rule(view, ns)


def _original_names() -> dict[str, set[str]]:
    """The names each namespace really has (before any patch), plus its catalog names."""
    from . import catalog

    names = {}
    for ns in NAMESPACES:
        module = getattr(torch, ns)
        found = set(getattr(module, "__all__", ())) | {n for n in vars(module) if not n.startswith("_")}
        found |= {e.name for e in catalog.entries() if e.namespace == f"torch.{ns}"}
        names[ns] = found
    return names


_ORIGINAL_NAMES = _original_names()  # read at import: this module is imported before patching


def fronted(ns: str) -> list[str]:
    """Every API torchdevice gives a behaviour while fronting ``torch.<ns>`` (catalog or not), sorted."""
    apis = {f"torch.{ns}.{n}" for n in SPECS if n in _ORIGINAL_NAMES[ns]}
    if ns == "cuda":
        apis |= {f"torch.cuda.nvtx.{n}" for n in NVTX_SPECS}
        apis |= {f"torch.cuda.comm.{n}" for n in COMM_FUNCTIONS}
    if ns == "mps":
        apis.add("torch.backends.mps.is_available")
    if ns == "cuda":
        apis |= {"torch.get_device_module", "torch.Tensor.record_stream"}
    return sorted(apis)


def api_status(view: View, api: str) -> tuple[Status, str] | None:
    """``(Status, note)`` of any API :func:`install` fronts, on the backend ``view``; None if none.

    Accepts ``torch.cuda.X`` and the submodule spellings ``torch.cuda.memory.X``,
    ``torch.cuda.random.X``, ``torch.cuda.streams.X``, ``torch.cuda.graphs.X``,
    ``torch.cuda.nvtx.X``, ``torch.cuda.comm.X`` (likewise for mps, xpu, mtia),
    and ``torch.backends.mps.is_available``.
    """
    if api == "torch.backends.mps.is_available":
        return status(view, "mps", "is_available")
    if api in ("torch.Tensor.record_stream", ".record_stream()"):
        return record_stream_status(view)
    if api == "torch.get_device_module":
        return TRANSLATED, (
            f"a {', '.join(t for t in NAMESPACES if t != view.device_type)} device string gives the fronted "
            "torch.<type> namespace (which answers for the backend); anything else as torch"
        )
    parts = api.split(".")
    if len(parts) < 3 or parts[0] != "torch" or parts[1] not in NAMESPACES:
        return None
    ns, rest = parts[1], parts[2:]
    if len(rest) == 2 and rest[0] == "nvtx":
        return status(view, ns, "nvtx." + rest[1])
    if len(rest) == 2 and rest[0] == "comm":
        return comm_status(view, rest[1]) if ns == "cuda" and rest[1] in COMM_FUNCTIONS else None
    if len(rest) == 2 and rest[0] in SUBMODULES[ns]:
        rest = rest[1:]
    if len(rest) != 1:
        return None
    return status(view, ns, rest[0])


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


def _host_streams(view: View) -> bool:
    cls = getattr(type(view.streams), "Stream", None) if view.streams is not None else None
    return isinstance(cls, type) and issubclass(cls, HostStream)


def record_stream_status(view: View) -> tuple[Status, str]:
    """``Tensor.record_stream(s)`` for a stream of the backend ``view`` (patched by :mod:`torchdevice.devices`)."""
    if view.device_type == "cpu":
        return NOOP, (
            f"the {view.name} backend's tensors live in host memory and its streams are host-synchronous: work "
            "queued on one is complete when its call returns, so the memory may be reused at once"
        )
    return NATIVE, "torch's own Tensor.record_stream with the backend's stream"


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


COMM_FUNCTIONS = ("broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather")


def comm_status(view: View, name: str) -> tuple[Status, str]:
    """``torch.cuda.comm.<name>`` on ``view``: the backend's collectives operation, as tagged."""
    if view.device_type == "cuda":
        return NATIVE, f"torch.cuda itself: code written for cuda runs untranslated on the {view.name} backend"
    return view.op("collectives", name)


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


__all__ = ["install", "uninstall", "status", "spec_for", "fronted", "View", "Spec", "SPECS", "NVTX_SPECS",
           "NAMESPACES"]
