"""Streams and events for host-synchronous backends (CPU; the base of MLX's).

On such a backend every operation has finished when the Python call that
launched it returns, so a stream is trivially in order and always complete:
``query()`` is True, ``synchronize()`` and ``wait_*`` have nothing to wait for.
What still needs real work is kept real:

* the current stream and current device are per thread, as CUDA's are; a new
  thread starts on device 0 and its default stream;
* ``Event(enable_timing=True).record()`` first synchronizes its stream (a hook
  for backends with deferred work, such as MLX) and then takes
  ``time.perf_counter_ns()``, so ``elapsed_time`` is real wall time in
  milliseconds between the two points of the program;
* ``elapsed_time`` raises as CUDA does when either event was made without
  ``enable_timing=True`` or was never recorded.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from .backend import EventInterface, StreamInterface, StreamOps, emulated, noop
from .errors import ConfigError, UnsupportedError
from .vocabulary import RealDevice, parse_index

if TYPE_CHECKING:
    from torch.types import Device

_state = threading.local()
_default_streams: dict[tuple[type, int], "HostStream"] = {}
_default_lock = threading.Lock()


#: How many logical devices a host-memory backend exposes (``torchdevice run --devices N`` exports it).
ENV_DEVICE_COUNT = "TORCHDEVICE_DEVICE_COUNT"


def configured_device_count() -> int | None:
    """``TORCHDEVICE_DEVICE_COUNT`` as a whole number >= 1, None when unset or empty.

    Any other value (``0``, ``-1``, ``two``, ``1.5``) raises
    :class:`~torchdevice.errors.ConfigError` naming it.
    """
    raw = os.environ.get(ENV_DEVICE_COUNT, "")
    if not raw.strip():
        return None
    try:
        count = int(raw.strip())
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigError(ENV_DEVICE_COUNT, raw, "give the number of logical devices, a whole number of at least 1")
    return count


def host_device_count() -> int:
    """Logical devices of a host-memory backend: ``TORCHDEVICE_DEVICE_COUNT``, else one per local rank, else one.

    ``TORCHDEVICE_DEVICE_COUNT=N`` (``torchdevice run --devices N``) gives N
    logical devices, all the same host, in the process and, through the
    environment, in its children: a program written for N GPUs (``cuda:1``,
    ``mp.spawn(nprocs=torch.cuda.device_count())``) runs unchanged.

    Without it, torchrun (and other launchers) set ``LOCAL_WORLD_SIZE``; an
    NCCL-written program then addresses ``cuda:LOCAL_RANK`` in each process. On
    a backend whose tensors live in host memory every such device is the same
    host, so the backend exposes ``LOCAL_WORLD_SIZE`` logical devices rather
    than making rank 1's ``cuda:1`` invalid.
    """
    configured = configured_device_count()
    if configured is not None:
        return configured
    raw = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    try:
        return max(1, int(raw))
    except ValueError:
        return 1


def _stacks() -> dict[tuple[str, int], HostStream]:
    # per-thread: (backend, index) -> current stream; backend -> current device
    try:
        return _state.current
    except AttributeError:
        _state.current = {}
        _state.device = {}
        return _state.current


def current_device_of(backend: str) -> int:
    _stacks()
    return _state.device.get(backend, 0)


def set_current_device_of(backend: str, index: int) -> None:
    _stacks()
    _state.device[backend] = index


class HostStream(StreamInterface):
    """A stream of a host-synchronous backend (see the module docstring).

    Implements :class:`torchdevice.backend.StreamInterface`, the interface of
    ``torch.cuda.Stream``: ``Stream(device=None, priority=0)``, ``query``,
    ``synchronize``, ``wait_event``, ``wait_stream``, ``record_event``, and
    use as a context manager. A plugin subclasses it with its own
    ``backend`` (its backend's name), ``device_type`` and ``device_count``,
    and sets it as ``Stream`` of its :class:`HostStreamOps` subclass, next to
    its :class:`HostEvent` subclass (that pairs the two).
    """

    backend: ClassVar[str] = "cpu"  #: the name of the backend the stream belongs to (keys per-thread state)
    device_type: ClassVar[str] = "cpu"  #: the torch device type of :attr:`device`
    #: how many devices the stream's backend has, for checking ``Stream(device=i)``; must equal the
    #: backend's ``device_count()``. None: :func:`host_device_count` (``TORCHDEVICE_DEVICE_COUNT``, else
    #: one per local rank under torchrun, else 1), which is what the CPU backend's ``device_count()`` returns
    device_count: ClassVar[int | None] = None
    _event_class: ClassVar[type | None] = None  #: set by HostStreamOps subclasses (see there)
    _ids: ClassVar = itertools.count(1)

    def __init__(self, device: Device = None, priority: int = 0, **kwargs: object) -> None:
        if kwargs.get("stream_id") == 0:
            self.stream_id = 0  # the default stream
        elif kwargs:
            raise TypeError(f"unexpected arguments to Stream: {sorted(kwargs)}")
        else:
            self.stream_id = next(HostStream._ids)
        self.device_index = parse_index(
            device,
            current_device_of(self.backend),
            host_device_count() if self.device_count is None else self.device_count,
            self.backend,
        )
        # CUDA clamps priorities into priority_range(); a host backend has one level only
        lo, hi = self.priority_range()
        self.priority = min(max(int(priority), hi), lo)
        self._saved: list[tuple[int, HostStream]] = []

    @property
    def device(self) -> RealDevice:
        """The device the backend's tensors have, so ``stream.device == tensor.device`` holds.

        On a backend whose tensors live in host memory (``device_type == "cpu"``) that is plain
        ``torch.device("cpu")`` for every index, as a tensor made on ``"cuda:1"`` there is plain
        ``cpu``; the logical index stays in :attr:`device_index` (see
        :class:`torchdevice.backend.StreamOps`). Otherwise ``torch.device(device_type, device_index)``.
        """
        if self.device_type == "cpu":
            return RealDevice("cpu")
        return RealDevice(self.device_type, self.device_index)

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """``(least, greatest)`` priority, as ``torch.cuda.Stream.priority_range()``: ``(0, 0)``.

        Work on a host-synchronous backend runs when it is issued, so stream
        priorities cannot reorder it: there is one level.
        """
        return (0, 0)

    @emulated("work is complete when its call returns: always True")
    def query(self) -> bool:
        return True

    @noop("work is complete when its call returns")
    def synchronize(self) -> None:
        return None

    def wait_event(self, event: EventInterface) -> None:
        """Make later work wait for ``event``: already true on a synchronous host."""
        event.synchronize()

    def wait_stream(self, stream: StreamInterface) -> None:
        """Make later work wait for ``stream``'s work so far."""
        stream.synchronize()

    def record_event(self, event: EventInterface | None = None) -> EventInterface:
        """Record ``event`` (a new one if None) on this stream and return it."""
        event = event if event is not None else self.event_class()()
        event.record(self)
        return event

    @classmethod
    def event_class(cls) -> type:
        """The Event class :meth:`record_event` creates: the one paired with this stream class by
        its :class:`HostStreamOps` (so it is the namespace's ``torch.cuda.Event``)."""
        return cls._event_class or HostEvent

    def __enter__(self) -> HostStream:
        self._saved.append((current_device_of(self.backend), current_stream_of(self.backend, self.device_index)))
        set_current_device_of(self.backend, self.device_index)
        set_current_stream(self)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        device, stream = self._saved.pop()
        set_current_stream(stream)
        set_current_device_of(self.backend, device)
        return False

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, HostStream)
            and other.backend == self.backend
            and other.device_index == self.device_index
            and other.stream_id == self.stream_id
        )

    def __hash__(self) -> int:
        return hash((self.backend, self.device_index, self.stream_id))

    def __repr__(self) -> str:
        return f"<torchdevice.Stream backend={self.backend} device_index={self.device_index} stream_id={self.stream_id}>"


class HostEvent(EventInterface):
    """An event of a host-synchronous backend (see the module docstring).

    Implements :class:`torchdevice.backend.EventInterface`, the interface of
    ``torch.cuda.Event(enable_timing=False, blocking=False,
    interprocess=False)``: ``record``, ``wait``, ``query``, ``synchronize``,
    ``elapsed_time`` (milliseconds on the host clock).
    """

    backend: ClassVar[str] = "cpu"  #: the name of the backend the event belongs to
    #: the Stream class :meth:`record` defaults to; set by :class:`HostStreamOps` subclasses (pairing)
    stream_class: ClassVar[type] = HostStream

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        if interprocess:
            raise UnsupportedError(
                "Event(interprocess=True)", self.backend, "share results through torch.multiprocessing instead"
            )
        self.enable_timing = bool(enable_timing)
        self.blocking = bool(blocking)
        self._time_ns: int | None = None
        self._stream: StreamInterface | None = None

    @property
    def device(self) -> RealDevice | None:
        """The device of the stream this event was last recorded on; None before its first record."""
        return None if self._stream is None else self._stream.device

    def record(self, stream: StreamInterface | None = None) -> None:
        """Record the event on ``stream`` (default: the current stream)."""
        if stream is None:
            stream = current_stream_of(self.backend, current_device_of(self.backend))
        stream.synchronize()
        self._stream = stream
        self._time_ns = time.perf_counter_ns()

    def wait(self, stream: StreamInterface | None = None) -> None:
        """Make ``stream``'s later work wait for this event: already true on a synchronous host."""
        self.synchronize()

    def query(self) -> bool:
        """True: recorded work is complete, and CUDA also answers True for an unrecorded event."""
        return True

    def synchronize(self) -> None:
        """Wait for the recorded work: it is complete once ``record`` returns."""
        if self._stream is not None:
            self._stream.synchronize()

    def elapsed_time(self, end_event: EventInterface) -> float:
        """Milliseconds between this event's record and ``end_event``'s, measured on the host clock.

        Raises ``ValueError`` with CUDA's messages (torch's C++ checks are ``TORCH_CHECK_VALUE``;
        seen on an H100) when either event lacks ``enable_timing=True`` or was never recorded.
        """
        end = cast(HostEvent, end_event)  # another backend's event fails here as it did (no _time_ns)
        if not (self.enable_timing and getattr(end, "enable_timing", False)):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self._time_ns is None or end._time_ns is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        return (end._time_ns - self._time_ns) / 1e6

    def __repr__(self) -> str:
        state = "recorded" if self._time_ns is not None else "unrecorded"
        return f"<torchdevice.Event backend={self.backend} {state} enable_timing={self.enable_timing}>"


def default_stream_of(stream_class: type[HostStream], index: int) -> HostStream:
    key = (stream_class, index)  # per class: a backend name re-resolved with another Stream class gets its own
    stream = _default_streams.get(key)
    if stream is None:
        with _default_lock:
            stream = _default_streams.get(key)
            if stream is None:
                stream = _default_streams[key] = stream_class(index, stream_id=0)
    return stream


_stream_classes: dict[str, type[HostStream]] = {}


def current_stream_of(backend: str, index: int) -> HostStream:
    stream = _stacks().get((backend, index))
    cls = _stream_classes.get(backend)
    if stream is None or (cls is not None and not isinstance(stream, cls)):  # none, or an earlier resolution's
        stream = default_stream_of(_stream_classes[backend], index)
    return stream


def set_current_stream(stream: HostStream) -> None:
    _stacks()[(stream.backend, stream.device_index)] = stream


class HostStreamOps(StreamOps):
    """Stream/event family for host-synchronous backends.

    Subclasses set ``Stream`` and ``Event`` to subclasses of
    :class:`HostStream`/:class:`HostEvent` bound to their backend (or ``Event`` to an event class of
    their own, as MPS's over ``torch.mps.Event``), and may override :meth:`synchronize` (MLX calls
    ``mx.synchronize``).
    """

    Stream: ClassVar[type[HostStream]] = HostStream
    Event: ClassVar[type[EventInterface]] = HostEvent

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Pair the subclass's own Stream and Event classes (record_event() makes this Event,
        # Event.record() defaults to this Stream), unless a class already says otherwise.
        super().__init_subclass__(**kwargs)
        stream, event = cls.Stream, cls.Event
        if (isinstance(stream, type) and issubclass(stream, HostStream) and isinstance(event, type)
                and issubclass(event, HostEvent) and stream.backend != event.backend):
            # an Event left as another backend's (HostEvent is the cpu backend's) would record on that
            # backend's streams and not be the namespace's Event of this one: refuse at definition
            raise TypeError(
                f"{cls.__qualname__}: Stream {stream.__qualname__} belongs to backend {stream.backend!r} but "
                f"Event {event.__qualname__} to backend {event.backend!r}; subclass HostEvent with "
                f"backend = {stream.backend!r} and set it as Event of {cls.__qualname__}, next to Stream")
        if stream is not HostStream and "_event_class" not in vars(stream) and "event_class" not in vars(stream):
            stream._event_class = event
        if event is not HostEvent and issubclass(event, HostEvent) and "stream_class" not in vars(event):
            event.stream_class = stream  # what a HostEvent records on by default; an event of its own has no use for it

    def __init__(self, backend: str) -> None:
        super().__init__(backend)
        # Per-thread state is keyed by the stream classes' backend: a plugin reusing another
        # backend's classes (CPUStreams under its own name) shares that state consistently.
        _stream_classes[self.Stream.backend] = self.Stream  # the latest resolution's class: see current_stream_of

    @emulated("per-thread current device, as CUDA's")
    def current_device(self) -> int:
        return current_device_of(self.Stream.backend)

    @emulated("per-thread current device, as CUDA's")
    def set_device(self, index: int) -> None:
        set_current_device_of(self.Stream.backend, index)

    @noop("work is complete when its call returns")
    def synchronize(self, index: int) -> None:
        return None

    @emulated("per-thread current stream, as CUDA's")
    def current_stream(self, index: int) -> HostStream:
        return current_stream_of(self.Stream.backend, index)

    @emulated("one default stream per device, shared by all threads")
    def default_stream(self, index: int) -> HostStream:
        return default_stream_of(self.Stream, index)

    @emulated("per-thread current stream, as CUDA's")
    def set_stream(self, stream: StreamInterface) -> None:
        if not isinstance(stream, self.Stream):
            raise TypeError(
                f"set_stream expects a {self.backend} stream ({self.Stream.__qualname__}), got {stream!r}"
            )
        set_current_stream(stream)
