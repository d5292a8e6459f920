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

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from .errors import UnsupportedError
from .hookspecs import hookimpl

# -- statuses -------------------------------------------------------------------


class Status(str, enum.Enum):
    """How a backend honours one API function."""

    NATIVE = "native"  #: the backend's own function with the same meaning, passed through
    TRANSLATED = "translated"  #: the backend's real equivalent under another name or shape
    EMULATED = "emulated"  #: real semantics implemented by torchdevice
    NOOP = "no-op"  #: doing nothing is the correct semantics on this backend
    UNSUPPORTED = "unsupported"  #: raises UnsupportedError

    def __str__(self) -> str:
        return self.value


STATUS_ATTR = "__torchdevice_status__"


def _tag(status: Status, note: str) -> Callable:
    def mark(fn):
        setattr(fn, STATUS_ATTR, (status, note))
        return fn

    return mark


def native(note: str = "") -> Callable:
    """Tag an operation as a pass-through to the backend's own function."""
    return _tag(Status.NATIVE, note)


def translated(note: str = "") -> Callable:
    """Tag an operation as the backend's real equivalent of the API function."""
    return _tag(Status.TRANSLATED, note)


def emulated(note: str = "") -> Callable:
    """Tag an operation whose semantics torchdevice implements itself."""
    return _tag(Status.EMULATED, note)


def noop(note: str = "") -> Callable:
    """Tag an operation for which doing nothing is the correct semantics."""
    return _tag(Status.NOOP, note)


def unsupported(op: str, instead: str = "") -> Callable:
    """Build an operation that raises UnsupportedError naming ``op`` and the backend."""

    def operation(self, *args, **kwargs):
        raise UnsupportedError(op, self.backend, instead)

    operation.__name__ = op
    operation.__doc__ = f"Not supported: {instead}" if instead else "Not supported."
    setattr(operation, STATUS_ATTR, (Status.UNSUPPORTED, instead))
    return operation


def status_of(ops: Any, op: str) -> tuple[Status, str]:
    """Return ``(Status, note)`` for operation ``op`` of an ops object.

    An operation that is missing, or not tagged, is reported as unsupported
    and untagged respectively, so a forgotten tag cannot pass as "native".
    """
    fn = getattr(type(ops), op, None)
    if fn is None:
        fn = getattr(ops, op, None)
    if fn is None:
        return Status.UNSUPPORTED, "not implemented by this backend"
    tag = getattr(fn, STATUS_ATTR, None)
    if tag is None:
        tag = getattr(getattr(fn, "__func__", None), STATUS_ATTR, None)
    if tag is None:
        return Status.TRANSLATED, "implemented by the backend (untagged)"
    return tag


# -- declarations ---------------------------------------------------------------


@dataclass(frozen=True)
class BackendSpec:
    """A backend as a plugin declares it (the answer to ``torchdevice_backends``).

    ``name`` is what users pass to :func:`torchdevice.use`; ``device_type`` is
    the torch device type tensors of this backend live on (``"cuda"``,
    ``"cpu"`` for MLX's host tensors ...); a higher ``priority`` wins automatic
    selection.
    """

    name: str
    device_type: str
    priority: int
    description: str = ""


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


@dataclass(frozen=True)
class DeviceProperties:
    """Properties of one device, with the field names of ``torch.cuda.get_device_properties``.

    A backend leaves ``major``/``minor`` ``None`` where its devices have no
    compute capability (CPU, MPS, MLX); the router then fills in the CUDA
    feature level the device offers (:mod:`torchdevice.capability`), so the
    program's question is answered. ``raw`` is the backend's own property
    object or dict, when it has one.
    """

    name: str
    total_memory: int
    major: int | None = None
    minor: int | None = None
    multi_processor_count: int = 0
    bf16_supported: bool = False
    type: str = ""
    raw: Any = field(default=None, compare=False)

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


class Ops:
    """Base of the operation objects; ``backend`` is the backend's name for error messages.

    Device arguments reaching an Ops method are already resolved by the
    router to a valid ``int`` index of this backend.
    """

    family: ClassVar[str] = ""

    def __init__(self, backend: str):
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
    """The memory family. Figures are in bytes, for device ``index``."""

    family = "memory"
    memory_allocated = unsupported("memory_allocated")
    max_memory_allocated = unsupported("max_memory_allocated")
    memory_reserved = unsupported("memory_reserved")
    max_memory_reserved = unsupported("max_memory_reserved")
    reset_peak_memory_stats = unsupported("reset_peak_memory_stats")
    reset_accumulated_memory_stats = unsupported("reset_accumulated_memory_stats")
    memory_stats = unsupported("memory_stats")
    mem_get_info = unsupported("mem_get_info")
    empty_cache = unsupported("empty_cache")
    set_per_process_memory_fraction = unsupported("set_per_process_memory_fraction")
    get_per_process_memory_fraction = unsupported("get_per_process_memory_fraction")


class StreamOps(Ops):
    """The streams/events family, which also owns the per-thread current device.

    ``Stream`` and ``Event`` are classes; the API hands them to user code
    as ``torchdevice.Stream`` and, when translating, as ``torch.cuda.Stream``.
    """

    family = "streams"
    Stream: ClassVar[type | None] = None
    Event: ClassVar[type | None] = None
    current_device = unsupported("current_device")
    set_device = unsupported("set_device")
    synchronize = unsupported("synchronize")
    current_stream = unsupported("current_stream")
    default_stream = unsupported("default_stream")
    set_stream = unsupported("set_stream")


class RNGOps(Ops):
    """The random-number family, per device ``index``."""

    family = "rng"
    manual_seed = unsupported("manual_seed")
    manual_seed_all = unsupported("manual_seed_all")
    seed = unsupported("seed")
    seed_all = unsupported("seed_all")
    initial_seed = unsupported("initial_seed")
    get_rng_state = unsupported("get_rng_state")
    set_rng_state = unsupported("set_rng_state")
    default_generator = unsupported("default_generator")


class CollectiveOps(Ops):
    """The collectives family.

    ``dist_backend`` names the ``torch.distributed`` engine that carries this
    backend's tensors across processes (``"gloo"``, ``"nccl"``, ``"xccl"`` ...;
    ``None`` when there is none). The router never maps backends to engines
    itself: :mod:`torchdevice.distributed` asks this object.

    The operations are ``torch.cuda.comm``'s single-process, multi-device
    collectives, with the signatures of :mod:`torchdevice.comm` except that
    every device argument arrives resolved to a valid ``int`` index of this
    backend (``-1``: host memory, for ``gather``'s destination). Results are
    the ones ``torch.cuda.comm`` documents (lists, tuples, tensors alike).
    :class:`torchdevice.comm.DeviceComm` implements all six with torch
    operations for any device type; :class:`torchdevice.comm.NativeCUDAComm`
    passes them through to ``torch.cuda.comm``.
    """

    family = "collectives"
    dist_backend: ClassVar[str | None] = None
    broadcast = unsupported("broadcast")
    broadcast_coalesced = unsupported("broadcast_coalesced")
    reduce_add = unsupported("reduce_add")
    reduce_add_coalesced = unsupported("reduce_add_coalesced")
    scatter = unsupported("scatter")
    gather = unsupported("gather")


FAMILIES: dict[str, type[Ops]] = {
    "memory": MemoryOps,
    "streams": StreamOps,
    "rng": RNGOps,
    "collectives": CollectiveOps,
}


# -- the plugin base ----------------------------------------------------------------


class Backend:
    """Base class for a backend plugin: implements every hook for one backend.

    Subclass it, set ``name``, ``device_type``, ``priority``, and implement
    :meth:`availability`, :meth:`device_count`, :meth:`device_properties` and
    the four family factories. Register an *instance* under the entry-point
    group ``torchdevice``::

        [project.entry-points.torchdevice]
        mychip = "torchdevice_mychip:plugin"

    Each hook answers only for ``self.name`` and returns ``None`` otherwise,
    so one process can hold many backends side by side.
    """

    name: ClassVar[str] = ""
    device_type: ClassVar[str] = ""
    priority: ClassVar[int] = 0
    description: ClassVar[str] = ""

    def spec(self) -> BackendSpec:
        return BackendSpec(self.name, self.device_type, self.priority, self.description)

    # Subclasses implement these; they are only called for an available backend,
    # except availability() itself.
    def availability(self) -> Availability:
        raise NotImplementedError

    def device_count(self) -> int:
        raise NotImplementedError

    def device_properties(self, index: int) -> DeviceProperties:
        raise NotImplementedError

    def memory(self) -> MemoryOps:
        return MemoryOps(self.name)

    def streams(self) -> StreamOps:
        return StreamOps(self.name)

    def rng(self) -> RNGOps:
        return RNGOps(self.name)

    def collectives(self) -> CollectiveOps:
        return CollectiveOps(self.name)

    # -- the hooks -------------------------------------------------------------
    @hookimpl
    def torchdevice_backends(self):
        return [self.spec()]

    @hookimpl
    def torchdevice_availability(self, name):
        return self.availability() if name == self.name else None

    @hookimpl
    def torchdevice_device_count(self, name):
        return self.device_count() if name == self.name else None

    @hookimpl
    def torchdevice_device_properties(self, name, index):
        return self.device_properties(index) if name == self.name else None

    @hookimpl
    def torchdevice_memory(self, name):
        return self.memory() if name == self.name else None

    @hookimpl
    def torchdevice_streams(self, name):
        return self.streams() if name == self.name else None

    @hookimpl
    def torchdevice_rng(self, name):
        return self.rng() if name == self.name else None

    @hookimpl
    def torchdevice_collectives(self, name):
        return self.collectives() if name == self.name else None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend {self.name!r}>"
