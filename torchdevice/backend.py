"""What a backend is: its declaration, and the operation objects of its five families.

A plugin author subclasses :class:`Backend` (which implements every hook of
:mod:`torchdevice.hookspecs`) and returns, from its family methods, objects
deriving from :class:`MemoryOps`, :class:`StreamOps`, :class:`RNGOps` and
:class:`CollectiveOps`. Every operation a backend does not override raises
:class:`~torchdevice.errors.UnsupportedError`.

Each implemented operation is tagged with how it honours the API, using
:func:`native`, :func:`translated`, :func:`emulated` or :func:`noop`. The tags
are what ``torchdevice matrix`` reports: the compatibility table is read from
the code, never kept by hand.
"""
from __future__ import annotations

import abc
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, NoReturn, TypeVar, cast

import torch

from .errors import UnsupportedError
from .hookspecs import hookimpl
from .status import (  # noqa: F401  (the tags are defined in torchdevice.status; plugins import them from here)
    STATUS_ATTR,
    Status,
    _tag,
    emulated,
    native,
    noop,
    status_of,
    translated,
    unsupported,
)

# -- declarations ---------------------------------------------------------------


@dataclass(frozen=True)
class BackendSpec:
    """A backend as a plugin declares it (the answer to ``torchdevice_backends``).

    ``name`` is what users pass to :func:`torchdevice.use`; ``device_type`` is
    the torch device type tensors of this backend live on (``"cuda"``,
    ``"cpu"`` for MLX's host tensors ...); a higher ``priority`` wins automatic
    selection. ``privateuse1=True`` declares that the backend gives torch's
    PrivateUse1 device the name ``device_type`` when it loads
    (``torch.utils.rename_privateuse1_backend``), so torch does not know that
    name before (docs/plugins.md, "A backend with its own device type").
    """

    name: str
    device_type: str
    priority: int
    description: str = ""
    privateuse1: bool = False


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; ``reason`` says why not (or what it found).

    ``automatic=False`` marks a backend that works but should only run when
    asked for by name (MLX on a machine with no GPU, for instance): automatic
    selection skips it, ``torchdevice.use(name)`` still takes it.
    """

    available: bool
    reason: str = ""
    automatic: bool = True

    def __bool__(self) -> bool:
        return self.available


#: The fields of ``torch.cuda.get_device_properties()`` (torch's ``_CudaDeviceProperties``), in its order.
CUDA_PROPERTY_FIELDS = (
    "name", "major", "minor", "multi_processor_count", "total_memory", "is_integrated", "is_multi_gpu_board",
    "max_threads_per_multi_processor", "gcnArchName", "warp_size", "uuid", "L2_cache_size", "clock_rate",
    "memory_clock_rate", "memory_bus_width", "shared_memory_per_block", "shared_memory_per_multiprocessor",
)


# its own __repr__ (the dataclass would build one and drop it); compared by identity, as torch's
# _CudaDeviceProperties are (and no __eq__/__hash__ to generate at every activation)
@dataclass(frozen=True, repr=False, eq=False)
class DeviceProperties:
    """Properties of one device, with the field names of ``torch.cuda.get_device_properties``:
    every field of torch's ``_CudaDeviceProperties`` (:data:`CUDA_PROPERTY_FIELDS`).

    A backend leaves ``major``/``minor`` ``None`` where its devices have no
    compute capability (CPU, MPS, MLX); the router then fills in the CUDA
    feature level the device offers (:mod:`torchdevice.capability`), so the
    program's question is answered. Of the other CUDA fields a backend sets
    those its device has; ``0`` means "none, or not known" (``memory_bus_width``
    of a host), and the router fills ``gcnArchName``, ``uuid``, ``warp_size`` and
    ``max_threads_per_multi_processor`` where the backend left them empty
    (:func:`torchdevice.capability.complete`). ``raw`` is the backend's own
    property object or dict, when it has one.
    """

    name: str
    total_memory: int
    major: int | None = None
    minor: int | None = None
    multi_processor_count: int = 0
    bf16_supported: bool = False
    type: str = ""
    raw: Any = field(default=None, compare=False)
    is_integrated: int = 0  #: 1 where the device computes in host memory (CPU, unified-memory GPUs)
    is_multi_gpu_board: int = 0
    max_threads_per_multi_processor: int = 0
    gcnArchName: str = ""  # noqa: N815 - torch's spelling
    warp_size: int = 0
    uuid: str = ""
    L2_cache_size: int = 0  # noqa: N815 - torch's spelling
    clock_rate: int = 0  #: kHz, as CUDA's
    memory_clock_rate: int = 0  #: kHz
    memory_bus_width: int = 0  #: bits
    shared_memory_per_block: int = 0
    shared_memory_per_multiprocessor: int = 0

    @property
    def capability(self) -> tuple[int, int] | None:
        if self.major is None or self.minor is None:
            return None
        return (self.major, self.minor)

    def __repr__(self) -> str:
        mib = self.total_memory // (1024 * 1024)
        cap = f", major={self.major}, minor={self.minor}" if self.major is not None else ""
        return (
            f"DeviceProperties(name={self.name!r}{cap}, total_memory={mib}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


# -- the operation families ---------------------------------------------------------------

_Op = TypeVar("_Op", bound=Callable[..., Any])


def unsupported_by_default(fn: _Op) -> _Op:
    """Declare a family operation: documented signature, raising UnsupportedError until overridden.

    The body of the declaration is its docstring only. The operation keeps
    that signature and docstring (``inspect.signature``, ``help()`` and the
    hook reference of ``docs/plugins.md`` read them) but accepts any
    arguments, so an operation a backend does not implement reports itself
    unsupported however it is called, as :func:`unsupported` does. It is
    tagged :attr:`Status.UNSUPPORTED`.
    """
    op = fn.__name__

    @functools.wraps(fn)
    def operation(self: Ops, *args: object, **kwargs: object) -> NoReturn:
        raise UnsupportedError(op, self.backend)

    setattr(operation, STATUS_ATTR, (Status.UNSUPPORTED, ""))
    return cast(_Op, operation)


class Ops:
    """Base of the family objects; ``backend`` is the backend's name, for error messages.

    A family object is made once, when the backend is resolved, and its
    methods are then called directly on every API call. Device arguments
    reaching them are already resolved by the router to a valid ``int``
    index of this backend (``None``, ``"cuda:1"``, ``torch.device`` and
    out-of-range indices are handled before). Override an operation with the
    parameters documented here and tag it (``@native``, ``@translated``,
    ``@emulated``, ``@noop``). Every operation not overridden raises
    :class:`~torchdevice.errors.UnsupportedError` naming it and the backend,
    as does one built with :func:`unsupported`, which should name what to use
    instead; any operation raises it where the hardware cannot honour the call.
    """

    family: ClassVar[str] = ""
    #: Operations a backend implements only where its hardware has them (added to the family after 1.0):
    #: a plugin leaving one unsupported need not declare it among its holes (``NamespaceContract.unsupported_ops``).
    opt_in: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, backend: str) -> None:
        self.backend = backend

    @classmethod
    def operations(cls) -> list[str]:
        """The names of this family's operations, in declaration order."""
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if not name.startswith("_") and callable(value) and name not in names:
                    if name != "operations" and not isinstance(value, type):
                        names.append(name)
        return names


class MemoryOps(Ops):
    """The memory family (hook ``torchdevice_memory``): allocator figures of one device, in bytes.

    ``index`` is a valid device index of the backend. Figures are what the
    backend's allocator (or, for host tensors, the OS) reports; a figure the
    backend cannot honour stays unsupported rather than invented. A backend
    whose tensors are host tensors gets no call when one is allocated (under
    translation they are plain ``cpu`` tensors from torch's CPU allocator,
    which has no Python hook), so it cannot count them one by one. Its
    honest choices: :class:`torchdevice.cpu.CPUMemory` (the bytes of every
    live CPU tensor storage of the process, from c10's own counter, and the
    resident set size as ``memory_reserved``; subclass it to change what
    differs), bytes a runtime of its own counts (memory that runtime
    allocates itself), or ``memory_allocated`` tagged ``noop``/left
    unsupported to say memory is not tracked. A figure that never moves is
    caught by the kit. A backend with a device type of its own counts the
    bytes its allocator holds for each device: a tensor allocated on device
    ``i`` moves ``memory_allocated(i)`` by at least its bytes and leaves every
    other index's figure unchanged (the kit checks both).
    """

    family = "memory"

    @unsupported_by_default
    def memory_allocated(self, index: int) -> int:
        """Return the bytes held by live tensors on device ``index`` (CUDA: the caching allocator's figure)."""

    @unsupported_by_default
    def max_memory_allocated(self, index: int) -> int:
        """Return the peak of ``memory_allocated(index)`` since start or the last reset, never below the current figure."""

    @unsupported_by_default
    def memory_reserved(self, index: int) -> int:
        """Return the bytes the allocator holds on device ``index``, in use or cached (at least ``memory_allocated``)."""

    @unsupported_by_default
    def max_memory_reserved(self, index: int) -> int:
        """Return the peak of ``memory_reserved(index)`` since start or the last reset, never below the current figure."""

    @unsupported_by_default
    def reset_peak_memory_stats(self, index: int) -> None:
        """Reset both peaks of device ``index`` to the current figures; returns None."""

    @unsupported_by_default
    def reset_accumulated_memory_stats(self, index: int) -> None:
        """Reset the accumulated counters (allocation counts ...) of device ``index``; returns None."""

    @unsupported_by_default
    def memory_stats(self, index: int) -> dict[str, Any]:
        """Return device ``index``'s statistics as a flat dict, with CUDA's keys (``allocated_bytes.all.current`` ...)."""

    @unsupported_by_default
    def mem_get_info(self, index: int) -> tuple[int, int]:
        """Return ``(free, total)`` bytes of device ``index``'s memory, as ``torch.cuda.mem_get_info``."""

    @unsupported_by_default
    def empty_cache(self) -> None:
        """Release cached, unused memory of every device to the system (takes no index, as CUDA's); returns None."""

    @unsupported_by_default
    def set_per_process_memory_fraction(self, fraction: float, index: int) -> None:
        """Cap this process's allocations on device ``index`` at ``fraction`` (in [0, 1], checked) of its memory."""

    @unsupported_by_default
    def get_per_process_memory_fraction(self, index: int) -> float:
        """Return the fraction (0 to 1) of device ``index``'s memory this process may allocate."""


class StreamInterface(abc.ABC):
    """What a backend's ``Stream`` class provides: the interface of ``torch.cuda.Stream``.

    Constructed as ``Stream(device=None, priority=0)``, where ``device`` is an
    index, a device string or a ``torch.device`` (``None``: the calling
    thread's current device); an index beyond the device count raises
    :class:`~torchdevice.errors.InvalidDeviceError`. Instances have
    ``device_index`` (``int``), ``stream_id`` (``int``; 0 for a device's
    default stream) and ``priority``, compare equal when they denote the same
    stream, and work as a context manager that makes the stream (and its
    device) current for the calling thread. torch's own stream classes
    (``torch.Stream``, ``torch.cuda.Stream`` ...) have it natively;
    :class:`torchdevice.streams.HostStream` implements it for host-synchronous
    backends.
    """

    @property
    @abc.abstractmethod
    def device(self) -> torch.device:
        """The ``torch.device`` of this stream's device."""

    @abc.abstractmethod
    def query(self) -> bool:
        """Return True when all work queued on this stream is complete, without blocking."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Block the calling thread until all work queued on this stream is complete; returns None."""

    @abc.abstractmethod
    def wait_event(self, event: EventInterface) -> None:
        """Make work queued later on this stream wait until ``event`` completes, without blocking the host."""

    @abc.abstractmethod
    def wait_stream(self, stream: StreamInterface) -> None:
        """Make work queued later on this stream wait for all work queued so far on ``stream``."""

    @abc.abstractmethod
    def record_event(self, event: EventInterface | None = None) -> EventInterface:
        """Record ``event`` (a new instance of the backend's ``Event`` class if None) on this stream and return it."""


class EventInterface(abc.ABC):
    """What a backend's ``Event`` class provides: the interface of ``torch.cuda.Event``.

    Constructed as ``Event(enable_timing=False, blocking=False,
    interprocess=False)``; an option the backend cannot honour raises
    :class:`~torchdevice.errors.UnsupportedError`. Instances have
    ``enable_timing``. ``Stream.record_event()`` must return an instance of
    the backend's own ``Event`` class (``StreamOps.Event``), which is the
    ``torch.cuda.Event`` of translated code. torch's own event classes have
    it natively; :class:`torchdevice.streams.HostEvent` implements it on the
    host clock.
    """

    @property
    @abc.abstractmethod
    def device(self) -> torch.device | None:
        """The ``torch.device`` of the stream this event was last recorded on; None before its first record."""

    @abc.abstractmethod
    def record(self, stream: StreamInterface | None = None) -> None:
        """Record this event on ``stream`` (default: the calling thread's current stream); returns None."""

    @abc.abstractmethod
    def wait(self, stream: StreamInterface | None = None) -> None:
        """Make work queued later on ``stream`` (default: the current stream) wait for this event; returns None."""

    @abc.abstractmethod
    def query(self) -> bool:
        """Return True when the work recorded before this event is complete (also for a never-recorded event, as CUDA)."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Block the calling thread until the work recorded before this event is complete; returns None."""

    @abc.abstractmethod
    def elapsed_time(self, end_event: EventInterface) -> float:
        """Return the milliseconds (float) from this record to ``end_event``'s; ValueError if either is untimed or unrecorded.

        Milliseconds, as CUDA's: a plugin timing on a clock in seconds or
        nanoseconds must convert. The ValueError is CUDA's for an event created
        without ``enable_timing=True`` or never recorded.
        """


# torch's own classes have the interfaces natively (torch.cuda.Stream/Event derive from them on a CUDA build).
if hasattr(torch, "Stream"):
    StreamInterface.register(torch.Stream)
if hasattr(torch, "Event"):
    EventInterface.register(torch.Event)


#: The clock (kHz) that turns ``torch.cuda._sleep``'s cycles into milliseconds where a device reports none: 1 GHz.
DEFAULT_CLOCK_KHZ = 1_000_000


class StreamOps(Ops):
    """The streams/events family (hook ``torchdevice_streams``), which also owns the per-thread current device.

    ``Stream`` and ``Event`` are the backend's classes, with the interfaces of
    :class:`StreamInterface` and :class:`EventInterface`; the API hands them to
    user code as ``torchdevice.Stream``/``Event`` and, when translating, as
    ``torch.cuda.Stream``/``Event``. Both are ``None`` on a backend without
    streams. The current device and the current stream are per thread, as
    CUDA's: a new thread starts on device 0 and its default stream.

    On a backend whose tensors are host tensors (device type ``cpu``), device
    indices are logical: ``"cuda:1"`` is checked against the device count and
    selects the current device, the streams of index 1 and whatever
    per-device state the plugin keeps, while torch's ``cpu`` tensors carry no
    index (``torch.ones(2, device="cuda:1").device`` is ``cpu`` under
    translation; the stream's ``device_index`` keeps the 1).
    """

    family = "streams"
    opt_in = frozenset({"sleep"})
    Stream: ClassVar[type | None] = None
    Event: ClassVar[type | None] = None

    @unsupported_by_default
    def current_device(self) -> int:
        """Return the calling thread's current device index (takes no index; a new thread starts on 0)."""

    @unsupported_by_default
    def set_device(self, index: int) -> None:
        """Make device ``index`` the calling thread's current device; returns None."""

    @unsupported_by_default
    def synchronize(self, index: int) -> None:
        """Block until all work queued on every stream of device ``index`` is complete; returns None."""

    @unsupported_by_default
    def current_stream(self, index: int) -> StreamInterface:
        """Return the calling thread's current stream on device ``index`` (its default stream until ``set_stream``)."""

    @unsupported_by_default
    def default_stream(self, index: int) -> StreamInterface:
        """Return device ``index``'s default stream (``stream_id`` 0), the same object for every thread."""

    @unsupported_by_default
    def set_stream(self, stream: StreamInterface) -> None:
        """Make ``stream`` the calling thread's current stream on its device; TypeError if not this backend's ``Stream``."""

    @unsupported_by_default
    def sleep(self, ms: float, index: int) -> None:
        """Queue a wait of ``ms`` milliseconds on device ``index``'s current stream and return at once, as ``torch.cuda._sleep``.

        The wait is work on the stream: ``query()`` is False and later work waits until it has run, while
        the host goes on. Under translation ``torch.cuda._sleep(cycles)`` calls it with ``cycles /
        clock_rate`` ms (``DeviceProperties.clock_rate``, kHz; 1 GHz where 0). Implemented, it turns on
        the kit's ``queues`` check; a host-synchronous backend, with no queue, leaves it unsupported.
        """


class RNGOps(Ops):
    """The random-number family (hook ``torchdevice_rng``): one default generator per device.

    Operations with an ``index`` act on that device's generator. Those
    without one act as ``torch.cuda``'s do: ``manual_seed``, ``seed`` and
    ``initial_seed`` on the calling thread's *current* device only (read it
    from your streams family), so with several devices the others keep their
    state; ``manual_seed_all`` and ``seed_all`` on every device. A backend
    whose devices share one generator (a host backend using torch's CPU
    generator, :class:`torchdevice.cpu.CPURNG`) seeds that one generator in
    every case.
    """

    family = "rng"

    @unsupported_by_default
    def manual_seed(self, seed: int) -> None:
        """Seed the current device's generator with ``seed`` (other devices keep their state); returns None."""

    @unsupported_by_default
    def manual_seed_all(self, seed: int) -> None:
        """Seed the generator of every device with the same ``seed``; returns None."""

    @unsupported_by_default
    def seed(self) -> None:
        """Seed the current device's generator from a non-deterministic source; returns None."""

    @unsupported_by_default
    def seed_all(self) -> None:
        """Seed every device's generator from one non-deterministic seed; returns None."""

    @unsupported_by_default
    def initial_seed(self) -> int:
        """Return the seed the current device's generator was last seeded with."""

    @unsupported_by_default
    def get_rng_state(self, index: int) -> torch.Tensor:
        """Return device ``index``'s generator state as a CPU ``torch.uint8`` tensor that ``set_rng_state`` restores exactly."""

    @unsupported_by_default
    def set_rng_state(self, state: torch.Tensor, index: int) -> None:
        """Restore device ``index``'s generator from ``state``, a ``torch.uint8`` tensor from ``get_rng_state``."""

    @unsupported_by_default
    def default_generator(self, index: int) -> torch.Generator:
        """Return device ``index``'s default ``torch.Generator`` (``torch.cuda.default_generators[index]``)."""


class CollectiveOps(Ops):
    """The collectives family (hook ``torchdevice_collectives``).

    ``dist_backend`` names the ``torch.distributed`` engine that carries this
    backend's tensors across processes (``"gloo"``, ``"nccl"``, ``"xccl"`` ...;
    ``None`` when there is none); ``torchdevice.dist_backend()`` returns it.
    It is read from this object only: declare it as a class attribute of
    your subclass (``dist_backend = "nccl"``); a
    :class:`~torchdevice.torch_backend.TorchNamespaceBackend` hands its own
    ``dist_backend`` to the collectives object it builds. The router never
    maps backends to engines itself:
    :mod:`torchdevice.distributed` asks this object.

    Optional: a tagged method ``engine_version(self) -> tuple`` (the engine's
    version, ``(major, minor, patch)``) is what ``torch.cuda.nccl.version()``
    answers while translating; without one that call raises
    :class:`~torchdevice.UnsupportedError` (gloo reports no version).

    The operations are ``torch.cuda.comm``'s single-process, multi-device
    collectives, with the arguments of :mod:`torchdevice.comm` except that
    every device argument arrives resolved to a valid ``int`` index of this
    backend (``-1``: host memory, for ``gather``'s destination), and
    exactly one of ``devices`` and ``out`` is given where both exist.
    :class:`torchdevice.collectives.DeviceComm` implements all six with torch
    operations for any device type; :class:`torchdevice.collectives.NativeCUDAComm`
    passes them through to ``torch.cuda.comm``.
    """

    family = "collectives"
    dist_backend: str | None = None

    @unsupported_by_default
    def broadcast(
        self, tensor: torch.Tensor, devices: list[int] | None, out: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """Return copies of ``tensor``, one per index in ``devices`` (or copied into ``out``, returned)."""

    @unsupported_by_default
    def broadcast_coalesced(
        self, tensors: list[torch.Tensor], devices: list[int], buffer_size: int = 10485760
    ) -> list[list[torch.Tensor]]:
        """Return a list of rows, one per device, of copies of ``tensors`` (all on ``devices[0]``); row 0 is ``tensors``.

        Small tensors travel packed into buffers of at most ``buffer_size`` bytes.
        """

    @unsupported_by_default
    def reduce_add(self, inputs: list[torch.Tensor], destination: int) -> torch.Tensor:
        """Return the element-wise sum of ``inputs`` (same shape) on device ``destination``, which must hold one of them."""

    @unsupported_by_default
    def reduce_add_coalesced(
        self, inputs: list[list[torch.Tensor]], destination: int, buffer_size: int = 10485760
    ) -> tuple[torch.Tensor, ...]:
        """Return one sum per tensor position of ``inputs`` (one list per device), on ``destination``."""

    @unsupported_by_default
    def scatter(
        self,
        tensor: torch.Tensor,
        devices: list[int] | None,
        chunk_sizes: list[int] | None = None,
        dim: int = 0,
        streams: list[Any] | None = None,
        out: list[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """Return ``tensor`` split along ``dim`` with one chunk on each of ``devices`` (or copied into ``out``)."""

    @unsupported_by_default
    def gather(
        self, tensors: list[torch.Tensor], dim: int = 0, destination: int | None = None, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Return ``tensors`` concatenated along ``dim`` on device ``destination`` (``-1``: host memory), or into ``out``."""


FAMILIES: dict[str, type[Ops]] = {
    "memory": MemoryOps,
    "streams": StreamOps,
    "rng": RNGOps,
    "collectives": CollectiveOps,
}


# -- the plugin base ----------------------------------------------------------------


class Backend:
    """Base class for a backend plugin: implements every hook for one backend.

    Subclass it, set ``name`` (what users pass to ``torchdevice.use()``:
    letters, digits, ``_``, ``.``, ``-``), ``device_type`` (the torch device
    type its tensors live on; ``"cpu"`` for host tensors), ``priority``
    (higher wins automatic selection) and ``description`` (one line for
    ``torchdevice info``), and implement :meth:`availability`,
    :meth:`device_count`, :meth:`device_properties` and the four family
    factories. Register an *instance* under the entry-point group
    ``torchdevice``::

        [project.entry-points.torchdevice]
        mychip = "torchdevice_mychip:plugin"

    Each hook answers only for ``self.name`` and returns ``None`` otherwise,
    so one process can hold many backends side by side.
    """

    name: ClassVar[str] = ""
    device_type: ClassVar[str] = ""
    priority: ClassVar[int] = 0
    description: ClassVar[str] = ""
    privateuse1: ClassVar[bool] = False  #: renames torch's PrivateUse1 device to ``device_type`` when loaded

    def spec(self) -> BackendSpec:
        """Return the declaration built from ``name``, ``device_type``, ``priority``, ``description`` and ``privateuse1``."""
        return BackendSpec(self.name, self.device_type, self.priority, self.description, self.privateuse1)

    # Subclasses implement these; they are only called for an available backend,
    # except availability() itself.
    def availability(self) -> Availability:
        """Return whether the backend runs here and why (not); must never raise, and must be quick."""
        raise NotImplementedError

    def device_count(self) -> int:
        """Return the number of devices (at least 1 for automatic selection; 0 is accepted for a backend asked for by
        name, whose program then sees no device, `is_available()` False, as a CUDA process with
        `CUDA_VISIBLE_DEVICES=""`: sim hides its devices so); called once, when the backend is first resolved."""
        raise NotImplementedError

    def device_properties(self, index: int) -> DeviceProperties:
        """Return the :class:`DeviceProperties` of device ``index`` (a valid index); called once per index."""
        raise NotImplementedError

    def memory(self) -> MemoryOps:
        """Return the memory family object; the base's raises UnsupportedError for every operation."""
        return MemoryOps(self.name)

    def streams(self) -> StreamOps:
        """Return the streams/events family object; the base's raises UnsupportedError for every operation."""
        return StreamOps(self.name)

    def rng(self) -> RNGOps:
        """Return the random-number family object; the base's raises UnsupportedError for every operation."""
        return RNGOps(self.name)

    def collectives(self) -> CollectiveOps:
        """Return the collectives family object; the base's has no engine and raises UnsupportedError."""
        return CollectiveOps(self.name)

    # -- the hooks -------------------------------------------------------------
    @hookimpl
    def torchdevice_backends(self) -> list[BackendSpec]:
        return [self.spec()]

    @hookimpl
    def torchdevice_availability(self, name: str) -> Availability | None:
        return self.availability() if name == self.name else None

    @hookimpl
    def torchdevice_device_count(self, name: str) -> int | None:
        return self.device_count() if name == self.name else None

    @hookimpl
    def torchdevice_device_properties(self, name: str, index: int) -> DeviceProperties | None:
        return self.device_properties(index) if name == self.name else None

    @hookimpl
    def torchdevice_memory(self, name: str) -> MemoryOps | None:
        return self.memory() if name == self.name else None

    @hookimpl
    def torchdevice_streams(self, name: str) -> StreamOps | None:
        return self.streams() if name == self.name else None

    @hookimpl
    def torchdevice_rng(self, name: str) -> RNGOps | None:
        return self.rng() if name == self.name else None

    @hookimpl
    def torchdevice_collectives(self, name: str) -> CollectiveOps | None:
        return self.collectives() if name == self.name else None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend {self.name!r}>"
