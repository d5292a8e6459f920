"""torchdevice backend ``mps``: Apple GPUs through ``torch.mps`` (Metal Performance Shaders).

``torch.mps`` is the smallest of the namespaces: one device, one command
queue, no ``Stream``, no ``current_device``, no peak or reserved figures, no
``get_device_properties``, no ``manual_seed_all`` or ``initial_seed``. This
plugin builds each of them from what MPS has, on the shared base
:class:`torchdevice.torch_backend.TorchNamespaceBackend`, and says what each
one means:

Discovery
  Built: ``torch.backends.mps.is_built()``; available: ``torch.mps.is_available()``.
  One device. Properties: ``name`` is ``torch.backends.mps.get_name()``;
  ``total_memory`` is ``torch.mps.recommended_max_memory()`` -- Metal's
  recommended working-set size for this process, the budget MPS measures
  memory fractions against (unified memory has no separate VRAM size);
  ``multi_processor_count`` is the GPU core count
  (``torch.backends.mps.get_core_count()``); no compute capability of its own (the router
  answers with the feature level, see torchdevice.capability)
  (``major``/``minor`` are ``None``); bfloat16 needs macOS 14
  (``torch.backends.mps.is_macos_or_newer(14, 0)``).

Memory
  * ``memory_allocated`` = ``torch.mps.current_allocated_memory()``: bytes
    occupied by tensors (translated);
  * ``memory_reserved`` = ``torch.mps.driver_allocated_memory()``: everything
    Metal allocated for the process, MPSAllocator's cached pools and
    MPS/MPSGraph's own allocations included (translated);
  * ``max_memory_allocated``, ``max_memory_reserved``, ``reset_peak_memory_stats``:
    **unsupported** -- MPS keeps no peak, and sampling it from Python would
    miss every peak between samples;
  * ``memory_stats``: CUDA's ``allocated_bytes.all.current`` and
    ``reserved_bytes.all.current`` from the two figures above, plus
    ``mps.recommended_max_memory`` (translated);
  * ``mem_get_info`` = ``(recommended_max_memory - driver_allocated_memory,
    recommended_max_memory)``: what is left of this process's Metal
    working-set budget, not the system's free RAM (translated);
  * ``empty_cache`` native; ``set_per_process_memory_fraction`` passes the
    fraction to ``torch.mps.set_per_process_memory_fraction`` (MPS has one
    device; its range is 0..2, torchdevice's API allows 0..1);
    ``get_per_process_memory_fraction`` unsupported (MPS has no getter);
  * ``reset_accumulated_memory_stats``: no-op, the figures above have no
    accumulated counters.

Streams and events
  torch runs all MPS work on **one in-order command queue**. A torchdevice
  ``Stream`` on MPS is a handle to that queue, with CUDA's per-thread
  current-stream bookkeeping (from :mod:`torchdevice.streams`):
  ``synchronize`` is ``torch.mps.synchronize()`` (all of the device's work,
  a superset of the stream's); ``query`` records a ``torch.mps.Event`` on the
  queue and queries it (non-blocking, real); ``wait_stream`` is a no-op
  because work on one in-order queue already follows everything queued
  before it; ``wait_event`` makes the queue wait on the MPS event. ``Event``
  wraps ``torch.mps.Event``: ``record``/``wait``/``query``/``synchronize``/
  ``elapsed_time`` are the GPU's own (timing needs ``enable_timing=True``,
  as on CUDA). The current device is always 0.

RNG
  The MPS default generator: ``manual_seed``/``seed`` native,
  ``manual_seed_all``/``seed_all`` the same calls (one device),
  ``initial_seed`` and ``default_generator`` from the generator itself
  (``torch.mps._get_default_mps_generator()``), ``get/set_rng_state`` native.

Collectives
  ``gloo``, the engine torch.distributed maps ``mps`` to.
"""
from __future__ import annotations

import importlib
import platform
from typing import TYPE_CHECKING, Any, ClassVar, cast

from torchdevice.backend import (
    Availability,
    DeviceProperties,
    EventInterface,
    StreamInterface,
    emulated,
    native,
    noop,
    translated,
    unsupported,
)
from torchdevice.errors import UnsupportedError
from torchdevice.streams import HostStream, HostStreamOps, current_device_of, current_stream_of
from torchdevice.torch_backend import (
    NamespaceView,
    TorchMemory,
    TorchNamespaceBackend,
    TorchOps,
    TorchRNG,
    calls,
    discard,
    uses,
)

if TYPE_CHECKING:
    import torch

__version__ = "1.0.0"
__all__ = ["MPSBackend", "MPSMemory", "MPSStreams", "MPSRNG", "MPSStream", "MPSEvent", "plugin"]

_NO_PEAK = "torch.mps keeps no peak figure; sample memory_allocated()/memory_reserved() where you need one"


class MPSMemory(TorchMemory):
    """Memory figures of the MPS allocator and the Metal driver (see the module docstring)."""

    memory_allocated = calls("current_allocated_memory", int, device_arg=False,
                             note="<namespace>.current_allocated_memory: bytes occupied by tensors")
    memory_reserved = calls("driver_allocated_memory", int, device_arg=False,
                            note="<namespace>.driver_allocated_memory: all Metal allocations of the process")
    max_memory_allocated = unsupported("max_memory_allocated", _NO_PEAK)
    max_memory_reserved = unsupported("max_memory_reserved", _NO_PEAK)
    reset_peak_memory_stats = unsupported("reset_peak_memory_stats", _NO_PEAK)
    set_per_process_memory_fraction = calls("set_per_process_memory_fraction", discard, device_arg=False,
                                            note="<namespace>.set_per_process_memory_fraction (one device)")
    get_per_process_memory_fraction = unsupported(
        "get_per_process_memory_fraction", "torch.mps has no getter for the memory fraction"
    )

    @noop("the MPS figures have no accumulated counters")
    def reset_accumulated_memory_stats(self, index: int) -> None:
        return None

    @uses("driver_allocated_memory")
    @translated("CUDA's current keys from current_allocated_memory/driver_allocated_memory, "
                "plus recommended_max_memory")
    def memory_stats(self, index: int) -> dict:
        allocated = int(self.ns.current_allocated_memory())
        reserved = int(self.ns.driver_allocated_memory())
        return {
            "allocated_bytes.all.current": allocated,
            "reserved_bytes.all.current": reserved,
            "mps.current_allocated_memory": allocated,
            "mps.driver_allocated_memory": reserved,
            "mps.recommended_max_memory": int(self.ns.recommended_max_memory()),
        }

    @uses("recommended_max_memory")
    @translated("(recommended_max_memory - driver_allocated_memory, recommended_max_memory): "
                "the process's remaining Metal working-set budget")
    def mem_get_info(self, index: int) -> tuple[int, int]:
        total = int(self.ns.recommended_max_memory())
        used = int(self.ns.driver_allocated_memory())
        return max(total - used, 0), total


class MPSEvent(EventInterface):
    """``torch.mps.Event`` behind the ``torch.cuda.Event`` interface.

    ``Event(enable_timing=False, blocking=False, interprocess=False)``;
    ``record(stream=None)``, ``wait(stream=None)``, ``query``,
    ``synchronize``, ``elapsed_time`` -- all on MPS's one command queue.
    """

    backend: ClassVar[str] = "mps"

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise UnsupportedError("Event(interprocess=True)", self.backend, "torch.mps events are process-local")
        self.enable_timing = bool(enable_timing)
        self.blocking = bool(blocking)
        self._event = MPSStream.ns.Event(enable_timing=self.enable_timing)
        self._stream: MPSStream | None = None

    @property
    def device(self) -> torch.device | None:
        return None if self._stream is None else self._stream.device

    @native("torch.mps.Event.record (the one command queue)")
    def record(self, stream: MPSStream | None = None) -> None:
        current = current_stream_of(self.backend, current_device_of(self.backend))
        self._stream = stream if stream is not None else cast(MPSStream, current)
        self._event.record()

    @native("torch.mps.Event.wait")
    def wait(self, stream: MPSStream | None = None) -> None:
        self._event.wait()

    @native("torch.mps.Event.query")
    def query(self) -> bool:
        return bool(self._event.query())

    @native("torch.mps.Event.synchronize")
    def synchronize(self) -> None:
        self._event.synchronize()

    @native("torch.mps.Event.elapsed_time")
    def elapsed_time(self, end_event: "MPSEvent") -> float:
        if not (self.enable_timing and getattr(end_event, "enable_timing", False)):
            # ValueError, as torch.cuda.Event raises: the program catches what CUDA raises
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        return float(self._event.elapsed_time(end_event._event))

    def __repr__(self) -> str:
        return f"<torchdevice.Event backend=mps enable_timing={self.enable_timing}>"


class MPSStream(HostStream):
    """A handle to MPS's one in-order command queue (see the module docstring).

    ``ns`` is the ``torch.mps`` view of the most recently resolved MPS
    backend (set by :class:`MPSStreams`): one class serves every resolution,
    so streams made before a ``torchdevice.use()`` stay valid after it.
    """

    backend: ClassVar[str] = "mps"
    device_type: ClassVar[str] = "mps"
    device_count: ClassVar[int] = 1
    ns: ClassVar[Any] = None

    @translated("torch.mps.synchronize: waits for all MPS work, the queue's included")
    def synchronize(self) -> None:
        self.ns.synchronize()

    @translated("records a torch.mps.Event on the queue and queries it (non-blocking)")
    def query(self) -> bool:
        marker = self.ns.Event()
        marker.record()
        return bool(marker.query())

    @native("torch.mps.Event.wait for MPS events")
    def wait_event(self, event: EventInterface) -> None:
        if isinstance(event, MPSEvent):
            event.wait()
        else:
            event.synchronize()

    @emulated("one in-order command queue: later work already follows the other stream's")
    def wait_stream(self, stream: StreamInterface) -> None:
        return None

    @classmethod
    def event_class(cls) -> type:
        return MPSEvent


class MPSStreams(TorchOps, HostStreamOps):
    """Per-thread current device (always 0) and stream over MPS's command queue."""

    Stream = MPSStream
    Event = MPSEvent

    def __init__(self, backend: str, ns: NamespaceView):
        MPSStream.ns = ns
        super().__init__(backend, ns)

    synchronize = calls("synchronize", discard, device_arg=False,
                        note="<namespace>.synchronize: the one device's command queue")


class MPSRNG(TorchRNG):
    """The MPS default generator (one device)."""

    manual_seed_all = calls("manual_seed", discard, note="one device: <namespace>.manual_seed")
    seed_all = calls("seed", discard, note="one device: <namespace>.seed")
    get_rng_state = calls("get_rng_state", device_arg=False, note="<namespace>.get_rng_state (one device)")
    set_rng_state = calls("set_rng_state", discard, device_arg=False, note="<namespace>.set_rng_state (one device)")

    @uses("_get_default_mps_generator")
    @translated("the MPS default generator's initial_seed()")
    def initial_seed(self) -> int:
        return int(self.ns._get_default_mps_generator().initial_seed())

    @uses("_get_default_mps_generator")
    @translated("the MPS default generator (<namespace>._get_default_mps_generator())")
    def default_generator(self, index: int) -> torch.Generator:
        return self.ns._get_default_mps_generator()


class MPSBackend(TorchNamespaceBackend):
    name = "mps"
    device_type = "mps"
    priority = 80
    description = "Apple GPUs through torch.mps"
    namespace = "mps"
    label = "MPS"
    dist_backend = "gloo"
    memory_class = MPSMemory
    streams_class = MPSStreams
    rng_class = MPSRNG

    def __init__(self, namespace_module: Any = None, backends_module: Any = None):
        super().__init__(namespace_module)
        if backends_module is None:
            backends_module = importlib.import_module("torch.backends.mps")
        self.backends = NamespaceView(
            backends_module, ("is_built", "get_name", "get_core_count", "is_macos_or_newer"), "torch.backends.mps"
        )

    def is_built(self) -> bool:
        return bool(self.backends.is_built())

    def availability(self) -> Availability:
        found = super().availability()
        if not found.available and "built without" in found.reason:
            return Availability(False, found.reason + " (MPS needs torch for macOS on Apple silicon)")
        return found

    def device_properties(self, index: int) -> DeviceProperties:
        name = str(self.backends.get_name())
        cores = int(self.backends.get_core_count())
        budget = int(self.ns.recommended_max_memory())
        return DeviceProperties(
            name=name,
            total_memory=budget,
            multi_processor_count=cores,
            bf16_supported=self.bf16_supported(index),
            type=self.name,
            raw={"name": name, "core_count": cores, "recommended_max_memory": budget},
            # Apple silicon GPUs compute in the unified (host) memory; an Intel Mac's AMD GPU has its own
            is_integrated=int(platform.machine() == "arm64"),
        )

    def bf16_supported(self, index: int) -> bool:
        """bfloat16 on MPS needs macOS 14 or newer."""
        return bool(self.backends.is_macos_or_newer(14, 0))


plugin = MPSBackend()
