"""The shared base of the plugins that wrap a torch device namespace.

``torch.cuda``, ``torch.xpu``, ``torch.mtia`` and ``torch.mps`` have the same
shape, with holes. :class:`TorchNamespaceBackend` implements every hook over
such a namespace; the ``torchdevice-cuda``, ``-xpu``, ``-mtia`` and ``-mps``
plugins subclass it and override only what their namespace lacks or spells
differently.

How it is built:

* **The namespace is passed in.** ``CudaBackend()`` wraps ``torch.cuda``;
  ``CudaBackend(stand_in)`` wraps anything with the same attributes, which is
  how the contract tests run without hardware (see
  :class:`torchdevice.testing.StandIn`).
* **The namespace is snapshotted** (:class:`NamespaceView`) when the plugin is
  constructed, i.e. when its entry point loads, before translation ever
  patches ``torch.cuda`` to front the active backend. A plugin therefore always
  reaches the real torch functions, never a patched one that would route back
  into torchdevice.
* **Operations are declared, not written.** :func:`calls` builds an operation
  that calls one namespace function and converts its result (``int`` for
  byte counts, ``dict`` for statistics ...). Its status tag says whether it is
  the same-named function (``native``) or another one (``translated``).
* **The tags are honest by construction.** The family objects are built by
  :func:`bind_ops`, which replaces every declared call whose namespace
  function does not exist with an operation that raises
  :class:`~torchdevice.errors.UnsupportedError` and is tagged unsupported. A
  torch version that drops a function shows up in ``torchdevice matrix``
  instead of an ``AttributeError`` at run time; the tag notes name the real
  namespace (``torch.cuda.memory_allocated``).
* **Availability never raises**: not built into torch / no device / a raising
  check each give ``Availability(False, reason)``.

Device arguments reach the operations as validated ``int`` indices (the
router resolves ``None``, ``"cuda:1"`` and ``torch.device`` first), and are
passed on to torch as such.
"""
from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, SupportsInt, TypeVar, cast

from .backend import (
    CUDA_PROPERTY_FIELDS,
    DEFAULT_CLOCK_KHZ,
    STATUS_ATTR,
    Availability,
    Backend,
    CollectiveOps,
    DeviceProperties,
    MemoryOps,
    Ops,
    RNGOps,
    Status,
    StreamInterface,
    StreamOps,
    emulated,
    translated,
    unsupported,
)
from .collectives import DeviceComm
from .errors import UnsupportedError

__all__ = [
    "NAMESPACE_NAMES",
    "NamespaceView",
    "calls",
    "uses",
    "discard",
    "int_pair",
    "bind_ops",
    "TorchOps",
    "TorchMemory",
    "TorchStreams",
    "TorchRNG",
    "TorchCollectives",
    "TorchNamespaceBackend",
    "FirstThreadDefaultStream",
    "first_thread_stream",
    "NamespaceSleep",
    "DEFAULT_CLOCK_KHZ",
]

#: The namespace attributes the base and the shipped plugins use; only these are snapshotted.
NAMESPACE_NAMES: tuple[str, ...] = (
    # discovery and properties
    "is_available", "_is_compiled", "device_count", "get_device_properties", "get_device_name",
    "get_device_capability", "is_bf16_supported", "device",
    # memory
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "reset_accumulated_memory_stats", "memory_stats", "mem_get_info",
    "empty_cache", "set_per_process_memory_fraction", "get_per_process_memory_fraction",
    "current_allocated_memory", "driver_allocated_memory", "recommended_max_memory",
    # streams and events
    "Stream", "Event", "current_device", "set_device", "synchronize", "current_stream",
    "default_stream", "set_stream",
    # random numbers
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "default_generators", "_get_default_mps_generator",
)

if TYPE_CHECKING:
    import torch

_Fn = TypeVar("_Fn", bound=Callable[..., Any])

CALLS_ATTR = "__torchdevice_calls__"
_NS_PLACEHOLDER = "<namespace>"


class NamespaceView:
    """A frozen copy of the attributes ``names`` of a torch namespace (or of a stand-in).

    ``view.memory_allocated`` is the function the namespace had when the view
    was made; a name the namespace lacked raises ``AttributeError`` naming the
    namespace. ``label`` (``"torch.cuda"``) is used in messages and tags.
    """

    def __init__(self, module: Any, names: Iterable[str] = NAMESPACE_NAMES, label: str | None = None) -> None:
        self.label = label or getattr(module, "__name__", None) or type(module).__name__
        self.module = module
        attrs = {}
        for name in dict.fromkeys(names):
            try:
                attrs[name] = getattr(module, name)
            except AttributeError:
                continue
        self._attrs = attrs
        #: derived objects a plugin keeps per namespace (bound classes ...)
        self.cache: dict = {}

    def has(self, name: str) -> bool:
        return name in self._attrs

    @property
    def names(self) -> frozenset:
        return frozenset(self._attrs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self.__dict__["_attrs"][name]
        except KeyError:
            raise AttributeError(f"{self.__dict__.get('label', 'namespace')} has no attribute {name!r}") from None

    def __repr__(self) -> str:
        return f"<NamespaceView of {self.label}: {len(self._attrs)} names>"


def discard(_result: object) -> None:
    """Converter for :func:`calls`: the API returns ``None`` whatever torch returned."""
    return None


def int_pair(result: Iterable[SupportsInt]) -> tuple[int, int]:
    """Converter for :func:`calls`: a pair of ``int`` (``mem_get_info``)."""
    first, second = result
    return int(first), int(second)


def calls(
    function: str,
    convert: Callable[[Any], Any] | None = None,
    *,
    device_arg: bool = True,
    status: Status | None = None,
    note: str = "",
) -> Callable:
    """Build an operation that calls ``<namespace>.function`` and converts its result.

    The operation passes its arguments on positionally; with
    ``device_arg=False`` it drops the last one, the device index (for a
    single-device namespace such as ``torch.mps`` whose functions take none).
    Tagged ``native`` when ``function`` has the operation's name and the
    arguments pass through, ``translated`` otherwise (or ``status``); ``note``
    defaults to ``torch.<ns>.function``.
    """

    def operation(self: TorchOps, *args: Any) -> Any:
        fn = getattr(self.ns, function, None)
        if fn is None:
            raise UnsupportedError(operation.__name__, self.backend, f"{self.ns.label} has no {function}")
        if not device_arg:
            args = args[:-1]
        result = fn(*args)
        return convert(result) if convert is not None else result

    operation.__doc__ = f"Call {_NS_PLACEHOLDER}.{function}" + ("" if device_arg else " (no device argument)")
    setattr(operation, CALLS_ATTR, function)
    vars(operation).update(__torchdevice_calls_status__=status, __torchdevice_calls_note__=note or
                           f"{_NS_PLACEHOLDER}.{function}", __torchdevice_calls_device__=device_arg)
    return operation


def uses(function: str) -> Callable:
    """Mark a hand-written operation as needing ``<namespace>.function``.

    :func:`bind_ops` then treats it like a :func:`calls` operation: replaced
    by an unsupported one where the namespace lacks ``function``, and its tag
    note gets the namespace's real name in place of ``<namespace>``.
    """

    def mark(fn: _Fn) -> _Fn:
        setattr(fn, CALLS_ATTR, function)
        return fn

    return mark


def _finish_calls(cls: type) -> None:
    """Give each ``calls`` operation of ``cls`` its name and default status tag."""
    for name, fn in list(vars(cls).items()):
        if callable(fn) and hasattr(fn, CALLS_ATTR) and getattr(fn, STATUS_ATTR, None) is None:
            fn.__name__ = fn.__qualname__ = name
            status = fn.__torchdevice_calls_status__
            if status is None:
                same = getattr(fn, CALLS_ATTR) == name and fn.__torchdevice_calls_device__
                status = Status.NATIVE if same else Status.TRANSLATED
            setattr(fn, STATUS_ATTR, (status, fn.__torchdevice_calls_note__))


class TorchOps(Ops):
    """Mixin for family objects over a namespace: holds ``ns``, the :class:`NamespaceView`."""

    def __init__(self, backend: str, ns: NamespaceView) -> None:
        self.ns = ns
        super().__init__(backend)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _finish_calls(cls)


_bound: dict[tuple, type] = {}
_bound_lock = threading.Lock()


def bind_ops(cls: type[TorchOps], ns: NamespaceView) -> type[TorchOps]:
    """Return ``cls`` specialised to namespace ``ns``: honest tags, real namespace names in notes.

    Every ``calls`` operation is re-tagged with ``ns.label`` in its note, or
    replaced by an ``unsupported`` operation when ``ns`` lacks its function.
    Cached per (class, namespace label, names present).
    """
    key = (cls, ns.label, ns.names)
    with _bound_lock:
        bound = _bound.get(key)
        if bound is not None:
            return bound
        attrs: dict[str, Any] = {"__module__": cls.__module__, "__doc__": cls.__doc__}
        for op in cls.operations():
            fn = getattr(cls, op)
            function = getattr(fn, CALLS_ATTR, None)
            if function is None:
                continue
            if not ns.has(function):
                attrs[op] = unsupported(op, f"{ns.label} has no {function}")
                continue
            status, note = getattr(fn, STATUS_ATTR)

            def copy(self: TorchOps, *args: Any, _fn: Callable[..., Any] = fn, **kwargs: Any) -> Any:
                return _fn(self, *args, **kwargs)

            copy.__name__ = copy.__qualname__ = op
            copy.__doc__ = (fn.__doc__ or "").replace(_NS_PLACEHOLDER, ns.label)
            setattr(copy, CALLS_ATTR, function)
            setattr(copy, STATUS_ATTR, (status, note.replace(_NS_PLACEHOLDER, ns.label)))
            attrs[op] = copy
        bound = _bound[key] = type(cls.__name__, (cls,), attrs)
        bound.__qualname__ = f"{cls.__qualname__}[{ns.label}]"
        return bound


# -- the four families ------------------------------------------------------------------------


class TorchMemory(TorchOps, MemoryOps):
    """Memory family: the namespace's caching-allocator figures, in bytes."""

    memory_allocated = calls("memory_allocated", int)
    max_memory_allocated = calls("max_memory_allocated", int)
    memory_reserved = calls("memory_reserved", int)
    max_memory_reserved = calls("max_memory_reserved", int)
    reset_peak_memory_stats = calls("reset_peak_memory_stats", discard)
    reset_accumulated_memory_stats = calls("reset_accumulated_memory_stats", discard)
    memory_stats = calls("memory_stats", dict)
    mem_get_info = calls("mem_get_info", int_pair)
    empty_cache = calls("empty_cache", discard)
    set_per_process_memory_fraction = calls("set_per_process_memory_fraction", discard)
    get_per_process_memory_fraction = calls("get_per_process_memory_fraction", float)


class TorchStreams(TorchOps, StreamOps):
    """Streams family: the namespace's own ``Stream``/``Event`` classes and current-stream state."""

    def __init__(self, backend: str, ns: NamespaceView) -> None:
        super().__init__(backend, ns)
        self.Stream = getattr(ns, "Stream", None)  # type: ignore[misc]  # (the namespace's own classes)
        self.Event = getattr(ns, "Event", None)  # type: ignore[misc]

    current_device = calls("current_device", int)
    set_device = calls("set_device", discard)
    synchronize = calls("synchronize", discard)
    current_stream = calls("current_stream")
    default_stream = calls("default_stream")
    set_stream = calls("set_stream", discard)


class TorchRNG(TorchOps, RNGOps):
    """RNG family: the namespace's per-device generators."""

    manual_seed = calls("manual_seed", discard)
    manual_seed_all = calls("manual_seed_all", discard)
    seed = calls("seed", discard)
    seed_all = calls("seed_all", discard)
    initial_seed = calls("initial_seed", int)
    get_rng_state = calls("get_rng_state")
    set_rng_state = calls("set_rng_state", discard)

    @uses("default_generators")
    @translated("<namespace>.default_generators[index]")
    def default_generator(self, index: int) -> torch.Generator:
        # Read live, not from the view's snapshot: torch.cuda's tuple is empty until CUDA
        # initialises, and its own functions (manual_seed ...) initialise it the same way.
        module = self.ns.module
        generators = module.default_generators
        if index >= len(generators) and hasattr(module, "_lazy_init"):
            module._lazy_init()
            generators = module.default_generators
        return generators[index]


class TorchCollectives(DeviceComm):
    """Collectives family: ``torch.cuda.comm``'s six done with torch operations on the
    namespace's device type (:class:`torchdevice.collectives.DeviceComm`), and the
    ``torch.distributed`` engine that carries its tensors."""

    def __init__(self, backend: str, device_type: str, dist_backend: str | None) -> None:
        super().__init__(backend)
        self.device_type = device_type  # type: ignore[misc]  # (one class, every namespace's device type)
        self.dist_backend = dist_backend


# -- the backend ------------------------------------------------------------------------------


class TorchNamespaceBackend(Backend):
    """A backend over ``torch.<namespace>``; subclasses set the class attributes below.

    * ``namespace``: the torch attribute (``"cuda"``); ``label``: the name in
      messages (``"CUDA"``); ``dist_backend``: the ``torch.distributed``
      engine for its tensors (``"nccl"``), or ``None``;
    * ``memory_class``, ``streams_class``, ``rng_class``: the family classes
      (override them to fill holes; they are specialised by :func:`bind_ops`);
      ``collectives_class`` is called with ``(name, device_type, dist_backend)``;
    * ``extra_names``: more namespace attributes to snapshot.

    ``namespace_module`` (constructor argument) replaces ``torch.<namespace>``,
    e.g. with a :class:`torchdevice.testing.StandIn`.
    """

    namespace: ClassVar[str] = ""
    label: ClassVar[str] = ""
    dist_backend: ClassVar[str | None] = None
    memory_class: ClassVar[type] = TorchMemory
    streams_class: ClassVar[type] = TorchStreams
    rng_class: ClassVar[type] = TorchRNG
    collectives_class: ClassVar[type] = TorchCollectives
    extra_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, namespace_module: Any = None) -> None:
        if namespace_module is None:
            namespace_module = importlib.import_module(f"torch.{self.namespace}")
            label = f"torch.{self.namespace}"
        else:
            label = getattr(namespace_module, "__name__", None) or f"torch.{self.namespace}"
        self.ns = NamespaceView(namespace_module, NAMESPACE_NAMES + tuple(self.extra_names), label)

    # -- discovery -----------------------------------------------------------------------------
    def is_built(self) -> bool:
        """Whether this torch binary has the backend compiled in (``<namespace>._is_compiled()``)."""
        check = getattr(self.ns, "_is_compiled", None)
        return True if check is None else bool(check())

    def availability(self) -> Availability:
        """From the namespace's own checks; never raises."""
        label = self.label or self.namespace
        try:
            if not self.is_built():
                return Availability(False, f"torch {_torch_version()} was built without {label} support")
            if not self.ns.is_available():
                return Availability(
                    False, f"no {label} device found ({self.ns.label}.is_available() is False)"
                )
            count = int(self.ns.device_count())
        except Exception as exc:  # a broken driver must not break discovery
            return Availability(False, f"{self.ns.label} availability check raised {type(exc).__name__}: {exc}")
        return Availability(True, f"{count} {label} device{'s' if count != 1 else ''}")

    def device_count(self) -> int:
        return int(self.ns.device_count())

    def device_properties(self, index: int) -> DeviceProperties:
        """From ``get_device_properties`` (CUDA field names); bf16 from :meth:`bf16_supported`."""
        raw = self.ns.get_device_properties(index)
        return DeviceProperties(
            name=str(raw.name),
            total_memory=int(raw.total_memory),
            major=_opt_int(getattr(raw, "major", None)),
            minor=_opt_int(getattr(raw, "minor", None)),
            multi_processor_count=int(getattr(raw, "multi_processor_count", 0) or 0),
            bf16_supported=self.bf16_supported(index),
            type=self.name,
            raw=raw,
            **_other_cuda_fields(raw),
        )

    def bf16_supported(self, index: int) -> bool:
        """``<namespace>.is_bf16_supported()`` asked with device ``index`` current."""
        with self.ns.device(index):
            return bool(self.ns.is_bf16_supported())

    # -- families ------------------------------------------------------------------------------
    def make_ops(self, cls: type[TorchOps]) -> Ops:
        """Instantiate family class ``cls`` (a :class:`TorchOps`) bound to this namespace."""
        return bind_ops(cls, self.ns)(self.name, self.ns)

    def memory(self) -> MemoryOps:
        return cast(MemoryOps, self.make_ops(self.memory_class))

    def streams(self) -> StreamOps:
        return cast(StreamOps, self.make_ops(self.streams_class))

    def rng(self) -> RNGOps:
        return cast(RNGOps, self.make_ops(self.rng_class))

    def collectives(self) -> CollectiveOps:
        return self.collectives_class(self.name, self.device_type, self.dist_backend)


def _other_cuda_fields(raw: object) -> dict:
    """The CUDA property fields besides the ones read above that ``raw`` has under CUDA's names."""
    found: dict[str, object] = {}
    for name in CUDA_PROPERTY_FIELDS:
        if name in ("name", "total_memory", "major", "minor", "multi_processor_count"):
            continue
        value = getattr(raw, name, None)
        if value is None:
            continue
        if name in ("uuid", "gcnArchName"):
            found[name] = str(value)
        else:
            try:
                found[name] = int(value)
            except (TypeError, ValueError):  # a field of another meaning under the same name: not taken
                pass
    return found


def _opt_int(value: SupportsInt | None) -> int | None:
    return None if value is None else int(value)


def _torch_version() -> str:
    import torch

    return torch.__version__


def first_thread_stream(streams: TorchStreams, index: int) -> StreamInterface:
    """The current stream of a thread that never set one: what that thread starts on.

    Used as the default stream by namespaces that have no ``default_stream``
    (``torch.xpu``): in CUDA and XPU the current stream is per thread and
    starts at the device's default stream.
    """
    box: dict[str, Any] = {}

    def probe() -> None:
        try:
            box["stream"] = streams.ns.current_stream(index)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=probe, name=f"torchdevice-{streams.backend}-default-stream")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["stream"]


class FirstThreadDefaultStream:
    """Streams mixin: ``default_stream`` emulated by :func:`first_thread_stream`, cached per device."""

    @uses("current_stream")
    @emulated("the stream a thread starts on (<namespace>.current_stream in a fresh thread)")
    def default_stream(self, index: int) -> StreamInterface:
        cache = self.__dict__.setdefault("_default_streams", {})
        stream = cache.get(index)
        if stream is None:
            stream = cache[index] = first_thread_stream(cast(TorchStreams, self), index)
        return stream


class NamespaceSleep:
    """Streams mixin: ``sleep`` over ``<namespace>._sleep(cycles)`` (``torch.cuda._sleep``'s shape).

    The milliseconds become cycles at the device's ``clock_rate`` (kHz, from
    ``<namespace>.get_device_properties``), and ``_sleep`` is called with the
    device current, as it queues on the current device's current stream. Add
    ``"_sleep"`` to the backend's ``extra_names`` and put this class before
    :class:`TorchStreams` in the streams class's bases.
    """

    @uses("_sleep")
    @translated("<namespace>._sleep(ms x clock_rate cycles) with the device current")
    def sleep(self, ms: float, index: int) -> None:
        ns = cast(TorchStreams, self).ns
        khz = int(getattr(ns.get_device_properties(index), "clock_rate", 0) or 0) or DEFAULT_CLOCK_KHZ
        with ns.device(index):
            ns._sleep(round(ms * khz))
