"""The stand-in torch namespace of the vendor kit: :class:`StandIn` records every call a plugin makes
to ``torch.cuda`` (or ``torch.xpu``, ``torch.mps``, ``torch.mtia`` ...) and returns typed values, so a
plugin is tested without its hardware (see :mod:`torchdevice.testing`)."""
from __future__ import annotations

import collections
import importlib
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping

import torch


@dataclass(frozen=True)
class Call:
    """One recorded call on a :class:`StandIn`: ``Stream.query`` for methods of its classes."""

    name: str
    args: tuple = ()
    kwargs: Mapping = field(default_factory=dict)

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


class IntLike(int):
    """An ``int`` subclass a stand-in can return: ``type(x) is int`` then proves a plugin converted it."""


class FloatLike(float):
    """A ``float`` subclass a stand-in can return, to prove conversion to ``float``."""


class StandInProperties(types.SimpleNamespace):
    """What a stand-in's ``get_device_properties`` returns (attributes of ``_CudaDeviceProperties``)."""


#: Attributes that are values, not functions (returned as they are, not called).
VALUE_ATTRIBUTES = frozenset({"Stream", "Event", "device", "default_generators"})

GIB = 1 << 30


def _default_properties(si: "StandIn") -> Callable[..., object]:
    if si.namespace == "mtia":  # torch.mtia.get_device_properties returns a dict
        return lambda index=None: {"name": f"{si.label} stand-in device", "total_memory": 16 * GIB}
    return lambda index=None: StandInProperties(
        name=f"{si.label} stand-in device",
        total_memory=16 * GIB,
        major=8,
        minor=0,
        multi_processor_count=108,
        gpu_subslice_count=64,
        has_bfloat16_conversions=True,
    )


#: Default return value of each function a stand-in knows, as ``value`` or ``factory(standin)``.
DEFAULTS: dict[str, Any] = {
    # discovery
    "is_available": True,
    "_is_compiled": True,
    "is_initialized": True,
    "init": None,
    "device_count": lambda si: (lambda: si.devices),
    "get_device_properties": _default_properties,
    "get_device_name": lambda si: (lambda device=None: f"{si.label} stand-in device"),
    "get_device_capability": lambda si: (
        (lambda device=None: {"has_fp64": True}) if si.namespace == "xpu" else (lambda device=None: (8, 0))
    ),
    "is_bf16_supported": True,
    # memory
    "memory_allocated": 1_000,
    "max_memory_allocated": 2_000,
    "memory_reserved": 3_000,
    "max_memory_reserved": 4_000,
    "memory_stats": lambda si: (lambda device=None: collections.OrderedDict(
        [("allocated_bytes.all.current", 1_000), ("reserved_bytes.all.current", 3_000)]
    )),
    "mem_get_info": (5_000, 6_000),
    "get_per_process_memory_fraction": 0.5,
    "current_allocated_memory": 7_000,
    "driver_allocated_memory": 8_000,
    "recommended_max_memory": 9_000,
    "reset_peak_memory_stats": None,
    "reset_accumulated_memory_stats": None,
    "empty_cache": None,
    "set_per_process_memory_fraction": None,
    # streams
    "current_device": 0,
    "set_device": None,
    "synchronize": None,
    "current_stream": lambda si: (lambda device=None: si.values["Stream"]._make(device, stream_id=1)),
    "default_stream": lambda si: (lambda device=None: si.values["Stream"]._make(device, stream_id=0)),
    "set_stream": None,
    # random numbers
    "manual_seed": None,
    "manual_seed_all": None,
    "seed": None,
    "seed_all": None,
    "initial_seed": 1234,
    "get_rng_state": lambda si: (lambda device=None: torch.arange(16, dtype=torch.uint8)),
    "set_rng_state": None,
    "_get_default_mps_generator": lambda si: (lambda: si.generator),
    # torch.backends.mps
    "is_built": True,
    "get_name": "Apple stand-in GPU",
    "get_core_count": 10,
    "is_macos_or_newer": True,
}


def _real_names(namespace: str) -> frozenset | None:
    try:
        module = importlib.import_module(f"torch.{namespace}")
    except ImportError:
        return None
    return frozenset(dir(module))


class StandIn:
    """A stand-in for ``torch.<namespace>`` that records calls and returns typed values.

    * ``namespace``: ``"cuda"``, ``"xpu"``, ``"mps"``, ``"mtia"``,
      ``"backends.mps"`` ...; ``__name__`` is ``"torch.<namespace>"``.
    * ``returns``: ``{name: value}`` overriding what a function returns (or
      what a value attribute such as ``Stream`` or ``default_generators`` is).
      A value that is an exception instance is raised; a callable is called
      with the call's arguments and its result returned.
    * ``missing``: names to remove. With ``mirror=True`` (default) the
      stand-in already lacks every name the installed torch's namespace
      lacks (``StandIn("mps")`` has no ``current_device``), plus any
      ``returns`` key is added back.
    * ``devices``: what ``device_count()`` returns (default 2).

    ``calls`` is the list of :class:`Call` made so far, including the
    construction and methods of its ``Stream``/``Event`` classes and the
    ``device`` context manager. Attributes are resolved when accessed, and
    ``returns`` may be changed at any time; the *set of names* must be fixed
    before a plugin snapshots the namespace (at its construction).
    """

    def __init__(self, namespace: str = "cuda", *, returns: Mapping[str, Any] | None = None,
                 missing: Iterable[str] = (), mirror: bool = True, devices: int = 2) -> None:
        self.namespace = namespace
        self.__name__ = f"torch.{namespace}"
        self.label = namespace.rsplit(".", 1)[-1].upper()
        self.returns: dict[str, Any] = dict(returns or {})
        self.devices = devices
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self.generator = torch.Generator()
        names = set(DEFAULTS) | VALUE_ATTRIBUTES
        real = _real_names(namespace) if mirror else None
        if real is not None:
            names &= real
        self.names = frozenset((names | set(self.returns)) - set(missing))
        #: the value attributes' defaults (read through ``__getattr__`` so that ``missing`` hides them)
        self.values: dict[str, Any] = {
            "Stream": _stream_class(self),
            "Event": _event_class(self),
            "device": _device_class(self),
            "default_generators": tuple(torch.Generator() for _ in range(devices)),
        }

    # -- recording -------------------------------------------------------------------------
    def record(self, name: str, args: tuple = (), kwargs: Mapping | None = None) -> None:
        with self._lock:
            self.calls.append(Call(name, tuple(args), dict(kwargs or {})))

    def calls_to(self, name: str) -> list[Call]:
        """The recorded calls of function ``name``."""
        return [c for c in self.calls if c.name == name]

    def reset(self) -> None:
        """Forget the recorded calls."""
        with self._lock:
            self.calls.clear()

    # -- attributes ------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name not in self.__dict__.get("names", ()):
            raise AttributeError(f"{self.__dict__.get('__name__', 'stand-in')} (stand-in) has no attribute {name!r}")
        if name in VALUE_ATTRIBUTES:
            return self.returns.get(name, self.values[name])
        return self._function(name)

    def _function(self, name: str) -> Callable:
        def function(*args: Any, **kwargs: Any) -> Any:
            self.record(name, args, kwargs)
            value = self._value(name)
            if isinstance(value, BaseException):
                raise value
            return value(*args, **kwargs) if callable(value) else value

        function.__name__ = function.__qualname__ = name
        return function

    def _value(self, name: str) -> Any:
        if name in self.returns:
            return self.returns[name]
        default = DEFAULTS.get(name)
        if callable(default):
            return default(self)
        return default

    def __dir__(self) -> list[str]:
        return sorted(set(object.__dir__(self)) | self.names)

    def __repr__(self) -> str:
        return f"<StandIn for {self.__name__}: {len(self.calls)} calls recorded>"


def _stream_class(si: StandIn) -> type:
    class Stream:
        """Stand-in of ``torch.cuda.Stream``: records its construction and methods."""

        def __init__(self, device: object = None, priority: int = 0, **kwargs: Any) -> None:
            si.record("Stream", (device, priority) if priority else (device,), kwargs)
            self.device_index, self.priority, self.stream_id = device, priority, kwargs.get("stream_id", 7)

        @classmethod
        def _make(cls, device: object, stream_id: int) -> Stream:
            stream = cls.__new__(cls)
            stream.device_index, stream.priority, stream.stream_id = device, 0, stream_id
            return stream

        def __getattr__(self, name: str) -> Callable[..., object]:
            if name.startswith("_"):
                raise AttributeError(name)
            values = {"query": True, "elapsed_time": 1.5}

            def method(*args: Any, **kwargs: Any) -> object:
                si.record(f"Stream.{name}", args, kwargs)
                return values.get(name)

            return method

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Stream) and (self.device_index, self.stream_id) == (
                other.device_index, other.stream_id)

        def __hash__(self) -> int:
            return hash((self.device_index, self.stream_id))

        def __repr__(self) -> str:
            return f"<stand-in {si.__name__}.Stream device={self.device_index} stream_id={self.stream_id}>"

    return Stream


def _event_class(si: StandIn) -> type:
    class Event:
        """Stand-in of ``torch.cuda.Event``: records its construction and methods."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            si.record("Event", args, kwargs)
            self.enable_timing = kwargs.get("enable_timing", args[0] if args else False)

        def __getattr__(self, name: str) -> Callable[..., object]:
            if name.startswith("_"):
                raise AttributeError(name)
            values = {"query": True, "elapsed_time": 1.5}

            def method(*args: Any, **kwargs: Any) -> object:
                si.record(f"Event.{name}", args, kwargs)
                return values.get(name)

            return method

        def __repr__(self) -> str:
            return f"<stand-in {si.__name__}.Event>"

    return Event


def _device_class(si: StandIn) -> type:
    class device:
        """Stand-in of ``torch.cuda.device``: records ``device(i)``, enter and exit."""

        def __init__(self, index: object) -> None:
            si.record("device", (index,))

        def __enter__(self) -> device:
            si.record("device.__enter__")
            return self

        def __exit__(self, *exc: object) -> Literal[False]:
            si.record("device.__exit__")
            return False

    return device
