"""The ``mlx`` backend: torch tensors held as MLX arrays, MLX's allocator, streams and RNG.

With translation on, tensors created on or moved to a source device are
:class:`torchdevice_mlx.tensor.MLXTensor` (data in an ``mx.array``, ops run in
MLX, host fallback per op; see :mod:`torchdevice_mlx.translation`, installed
through ``torchdevice.translate.TRANSLATION_HOOKS``). They report device
``cpu`` to torch, this backend's ``device_type``. Plain torch CPU tensors a
program makes itself stay torch's. MLX also contributes its runtime state,
so code written for CUDA sees MLX's figures and MLX's synchronisation.

Availability
  Available whenever ``import mlx.core`` works. Automatic selection takes it
  only when MLX has a GPU (``mx.is_available(mx.gpu)``: Metal, or CUDA with
  ``mlx[cuda]``); on CPU-only MLX (``mlx[cpu]`` on Linux) it is available
  *on request* (``Availability(automatic=False)``): ``torchdevice.use("mlx")``
  or ``TORCHDEVICE_BACKEND=mlx``. One device, index 0, on ``mx.default_device()``;
  like the CPU backend it exposes N logical devices, all that same device, under
  ``TORCHDEVICE_DEVICE_COUNT=N`` or a launcher's ``LOCAL_WORLD_SIZE``
  (:func:`torchdevice.streams.host_device_count`).

Properties
  ``name`` from ``mx.device_info()["device_name"]``; ``total_memory`` from
  its ``memory_size``/``total_memory`` where MLX reports one (Metal), else the
  host's physical memory (the device *is* the host); no compute capability of its own (the router answers with
  the bf16 feature level, see torchdevice.capability);
  bfloat16 supported (MLX and torch's host kernels both compute it).

Memory (every figure from MLX's allocator, in bytes)
  ``memory_allocated`` = ``mx.get_active_memory()``;
  ``max_memory_allocated`` = ``mx.get_peak_memory()``, never below the current figure;
  ``memory_reserved`` = active + ``mx.get_cache_memory()`` (what the allocator
  holds, in use or cached); ``max_memory_reserved`` = the highest of
  ``mx.get_peak_memory()`` and every reserved figure torchdevice read since the
  last reset (MLX keeps no peak of its cache; reserved only grows between cache
  evictions, so a peak is missed only when MLX evicts cache between two reads);
  ``reset_peak_memory_stats`` = ``mx.reset_peak_memory()`` (and the reserved
  peak); ``empty_cache`` = ``mx.clear_cache()``;
  ``memory_stats``: exactly CUDA's keys (:mod:`torchdevice.memstats`) plus
  ``mlx.*`` raw figures; ``get_allocator_backend`` is ``"native"`` and
  ``host_memory_stats`` all zeros (no pinned host-memory allocator);
  ``mem_get_info`` = ``(limit - active, limit)`` with ``limit =
  mx.get_memory_limit()``, the budget MLX evaluates graphs against;
  ``set_per_process_memory_fraction(f)`` = ``mx.set_memory_limit(f * total_memory)``
  and ``get_per_process_memory_fraction`` = limit / total_memory;
  ``reset_accumulated_memory_stats`` is a no-op (MLX keeps no counters).
  torch's own host allocations are not MLX's: they do not move these figures.

Streams and events (:class:`MLXStream`, :class:`MLXEvent`)
  A torchdevice ``Stream`` wraps an MLX stream (``mx.new_stream``); the
  default stream wraps the calling thread's MLX default stream -- MLX keeps
  default streams per thread. Making a stream current (``set_stream``,
  ``with torchdevice.stream(s)`` or ``with s``) makes it this thread's MLX
  default stream, so MLX operations issued there run on it.
  ``synchronize`` first evaluates every pending (lazy) MLX tensor of the
  program (:func:`torchdevice_mlx.conversion.evaluate_pending`; the memory figures
  do too), then is ``mx.synchronize(stream)``; device ``synchronize`` is
  ``mx.synchronize`` of this thread's default stream and of every live MLX
  stream torchdevice made. MLX has no events and no non-blocking query:
  ``Event.record`` synchronises its MLX stream first, then reads the host
  clock (so ``elapsed_time`` is real wall time of completed work), and
  ``query`` synchronises, then answers True. **MLX streams are bound to the
  thread that created them**: making one current on another thread raises a
  RuntimeError saying so (``synchronize`` works from any thread).

RNG
  Seeding seeds both torch's host generator (``torch.default_generator``,
  which draws every torch random op on this backend) and MLX's global PRNG
  (``mx.random.seed``); ``seed()`` draws one fresh seed and gives it to both.
  ``initial_seed`` is the torch generator's. The state from ``get_rng_state``
  is a uint8 tensor: torch's CPU generator state (``torch.get_rng_state()``),
  then the 4 bytes ``b"MLXK"``, then MLX's key (``mx.random.state[0]``: two
  uint32, little-endian) -- 12 bytes in all after torch's. ``set_rng_state``
  restores both (MLX's key through ``mx.random.seed((k0 << 32) | k1)``, which
  sets exactly that key); given a plain torch CPU state it restores torch's
  only. MLX's PRNG state is per thread: get/set act on the calling thread's.

Collectives
  ``torch.cuda.comm``'s six with torch operations on host tensors
  (:class:`torchdevice.collectives.DeviceComm`); ``gloo`` across processes for
  ``torch.distributed`` programs: the tensors are host tensors. MLX's own
  collectives of torch tensors (``mx.distributed``, ring/MPI/JACCL, started by
  ``mlx.launch``) are :mod:`torchdevice_mlx.distributed`, also reachable as
  the collectives object's ``mx_distributed``.
"""
from __future__ import annotations

import os
import struct
import threading
import weakref
from types import ModuleType
from typing import Any, ClassVar, Literal, cast

import torch

from torchdevice import memstats
from torchdevice.backend import (
    Availability,
    Backend,
    DeviceProperties,
    MemoryOps,
    emulated,
    noop,
    translated,
)
from torchdevice.cpu import CPURNG, CPUCollectives
from torchdevice.hookspecs import hookimpl
from torchdevice.memstats import NoPinnedHostMemory
from torchdevice.streams import HostEvent, HostStream, HostStreamOps, host_device_count

from .conversion import evaluate_pending
from .runtime import import_problem, mx

__all__ = [
    "MLXBackend",
    "MLXMemory",
    "MLXStream",
    "MLXEvent",
    "MLXStreams",
    "MLXRNG",
    "MLXCollectives",
    "RNG_MAGIC",
]

RNG_MAGIC = b"MLXK"
_KEY_FORMAT = "<II"


def _host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def device_info() -> dict:
    """``mx.device_info()`` of MLX's default device (``{}`` where MLX has no such call)."""
    core = mx()
    info = getattr(core, "device_info", None)
    return dict(info(core.default_device())) if info is not None else {}


def total_memory() -> int:
    """The device's memory: MLX's ``memory_size``/``total_memory``, else the host's physical memory."""
    info = device_info()
    for key in ("memory_size", "total_memory"):
        if info.get(key):
            return int(info[key])
    return _host_memory()


# -- memory -----------------------------------------------------------------------------------


class MLXMemory(NoPinnedHostMemory, MemoryOps):
    """MLX's allocator figures (see the module docstring)."""

    def __init__(self, backend: str) -> None:
        super().__init__(backend)
        self._lock = threading.Lock()
        self._reserved_peak = 0

    def _reserved(self) -> tuple[int, int, int]:
        """(active, cache, reserved peak so far), recording the reserved figure read."""
        evaluate_pending()
        core = mx()
        active, cache = int(core.get_active_memory()), int(core.get_cache_memory())
        with self._lock:
            self._reserved_peak = max(self._reserved_peak, active + cache, int(core.get_peak_memory()))
            return active, cache, self._reserved_peak

    @translated("mx.get_active_memory(), after evaluating the program's pending (lazy) MLX tensors")
    def memory_allocated(self, index: int) -> int:
        evaluate_pending()
        return int(mx().get_active_memory())

    @translated("mx.get_peak_memory(), never below the current figure (MLX's reset sets the peak to 0), after "
                "evaluating pending MLX tensors")
    def max_memory_allocated(self, index: int) -> int:
        evaluate_pending()
        core = mx()
        return max(int(core.get_peak_memory()), int(core.get_active_memory()))

    @translated("mx.get_active_memory() + mx.get_cache_memory()")
    def memory_reserved(self, index: int) -> int:
        active, cache, _ = self._reserved()
        return active + cache

    @emulated("the highest of mx.get_peak_memory() and every reserved figure (active + cache) read since the last "
              "reset: MLX keeps no peak of its cache, so one left by a cache eviction between two reads is missed")
    def max_memory_reserved(self, index: int) -> int:
        return self._reserved()[2]

    @translated("mx.reset_peak_memory(), and the reserved peak to the current reserved figure")
    def reset_peak_memory_stats(self, index: int) -> None:
        core = mx()
        core.reset_peak_memory()
        with self._lock:
            self._reserved_peak = int(core.get_active_memory()) + int(core.get_cache_memory())

    @noop("MLX keeps no accumulated counters")
    def reset_accumulated_memory_stats(self, index: int) -> None:
        return None

    @translated("CUDA's keys (torchdevice.memstats): allocated/active/requested bytes from MLX's active memory, "
                "reserved from active + cache, CUDA-allocator mechanisms 0; plus the raw mlx.* figures")
    def memory_stats(self, index: int) -> dict:
        core = mx()
        active, cache, reserved_peak = self._reserved()
        peak = max(int(core.get_peak_memory()), active)
        limit = int(core.get_memory_limit())
        return memstats.device_stats(active, peak, active + cache, reserved_peak, extra={
            "mlx.active_memory": active,
            "mlx.peak_memory": peak,
            "mlx.cache_memory": cache,
            "mlx.memory_limit": limit,
        })

    @translated("(memory limit - active memory, memory limit): MLX's allocation budget")
    def mem_get_info(self, index: int) -> tuple[int, int]:
        evaluate_pending()
        core = mx()
        limit = int(core.get_memory_limit())
        return max(limit - int(core.get_active_memory()), 0), limit

    @translated("mx.clear_cache()")
    def empty_cache(self) -> None:
        mx().clear_cache()

    @translated("mx.set_memory_limit(fraction * total_memory)")
    def set_per_process_memory_fraction(self, fraction: float, index: int) -> None:
        mx().set_memory_limit(int(fraction * total_memory()))

    @translated("mx.get_memory_limit() / total_memory")
    def get_per_process_memory_fraction(self, index: int) -> float:
        total = total_memory()
        return float(mx().get_memory_limit()) / total if total else 1.0

    # -- optional operations (torchdevice.namespaces.OPTIONAL_OPS) --------------------------

    @translated("'native': MLX's own allocator (there is no cudaMallocAsync)")
    def get_allocator_backend(self) -> str:
        return "native"


# -- streams and events -----------------------------------------------------------------------

_thread = threading.local()


def thread_default_stream() -> Any:  # an mlx.core.Stream
    """This thread's own MLX default stream, as it was before torchdevice made another current."""
    stream = getattr(_thread, "default", None)
    if stream is None:
        core = mx()
        stream = _thread.default = core.default_stream(core.default_device())
    return stream


class MLXStream(HostStream):
    """A torchdevice stream over an MLX stream (see the module docstring).

    ``mx_stream`` is the MLX stream: a new one from ``mx.new_stream`` for
    ``Stream()``, the calling thread's MLX default stream for the default
    stream. ``owner`` is the id of the thread that created it.
    """

    backend: ClassVar[str] = "mlx"
    device_type: ClassVar[str] = "cpu"
    device_count: ClassVar[int | None] = None  # host_device_count(), as the backend's
    live: ClassVar[weakref.WeakSet] = weakref.WeakSet()

    def __init__(self, device: torch.device | str | int | None = None, priority: int = 0, **kwargs: Any) -> None:
        super().__init__(device, priority, **kwargs)
        self.owner = threading.get_ident()
        if self.stream_id == 0:
            self._mx_stream = None
        else:
            core = mx()
            self._mx_stream = core.new_stream(core.default_device())
            MLXStream.live.add(self)

    @property
    def mx_stream(self) -> Any:  # an mlx.core.Stream
        return thread_default_stream() if self._mx_stream is None else self._mx_stream

    @translated("evaluates the program's pending (lazy) MLX tensors, then mx.synchronize(stream)")
    def synchronize(self) -> None:
        evaluate_pending()
        mx().synchronize(self.mx_stream)

    @emulated("MLX has no non-blocking query: synchronizes the MLX stream, then True")
    def query(self) -> bool:
        self.synchronize()
        return True

    def check_thread(self) -> None:
        """Raise if this stream cannot run MLX work on the calling thread."""
        if self._mx_stream is not None and threading.get_ident() != self.owner:
            raise RuntimeError(
                f"{self!r} wraps {self._mx_stream}, which MLX binds to the thread that created it "
                f"(thread id {self.owner}); create a torchdevice.Stream() on this thread, or use the default stream"
            )

    def make_mlx_default(self) -> None:
        """Make this stream the calling thread's MLX default stream."""
        self.check_thread()
        thread_default_stream()  # remember this thread's own default before replacing it
        mx().set_default_stream(self.mx_stream)

    def __enter__(self) -> MLXStream:
        self.check_thread()
        super().__enter__()
        self.make_mlx_default()
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        super().__exit__(*exc)
        from torchdevice.streams import current_stream_of

        cast(MLXStream, current_stream_of(self.backend, self.device_index)).make_mlx_default()  # this backend's streams
        return False

    @classmethod
    def event_class(cls) -> type:
        return MLXEvent


class MLXEvent(HostEvent):
    """A host-clock event whose ``record`` first synchronizes its MLX stream."""

    backend: ClassVar[str] = "mlx"
    stream_class: ClassVar[type] = MLXStream


class MLXStreams(HostStreamOps):
    """Per-thread current device and stream over MLX streams."""

    Stream = MLXStream
    Event = MLXEvent

    @translated("evaluates the program's pending (lazy) MLX tensors, then mx.synchronize on this thread's default "
                "stream and every live torchdevice MLX stream")
    def synchronize(self, index: int) -> None:
        evaluate_pending()
        core = mx()
        core.synchronize(thread_default_stream())
        for stream in list(MLXStream.live):
            core.synchronize(stream.mx_stream)

    @emulated("per-thread current stream, made this thread's MLX default stream")
    def set_stream(self, stream: MLXStream) -> None:
        if isinstance(stream, MLXStream):
            stream.check_thread()
        super().set_stream(stream)
        stream.make_mlx_default()


# -- random numbers --------------------------------------------------------------------------


def _mlx_key() -> bytes:
    k0, k1 = (int(v) for v in mx().random.state[0].tolist())
    return struct.pack(_KEY_FORMAT, k0, k1)


def _set_mlx_key(packed: bytes) -> None:
    k0, k1 = struct.unpack(_KEY_FORMAT, packed)
    mx().random.seed((k0 << 32) | k1)


class MLXRNG(CPURNG):
    """torch's host generator and MLX's PRNG, seeded together (see the module docstring).

    ``initial_seed`` and ``default_generator`` are the CPU backend's: torch's host generator.
    """

    @translated("torch.default_generator.manual_seed and mx.random.seed")
    def manual_seed(self, seed: int) -> None:
        seed = int(seed)
        torch.default_generator.manual_seed(seed)
        mx().random.seed(seed % 2**64)

    @translated("the same as manual_seed: every device shares torch's host generator and MLX's key")
    def manual_seed_all(self, seed: int) -> None:
        self.manual_seed(seed)

    @translated("torch.default_generator.seed(), and the same seed to mx.random.seed")
    def seed(self) -> None:
        mx().random.seed(torch.default_generator.seed() % 2**64)

    @translated("the same as seed: every device shares torch's host generator and MLX's key")
    def seed_all(self) -> None:
        self.seed()

    @emulated("torch's CPU generator state + b'MLXK' + MLX's PRNG key")
    def get_rng_state(self, index: int) -> torch.Tensor:
        suffix = torch.frombuffer(bytearray(RNG_MAGIC + _mlx_key()), dtype=torch.uint8)
        return torch.cat([torch.default_generator.get_state(), suffix])

    @emulated("restores torch's CPU generator state and MLX's PRNG key")
    def set_rng_state(self, state: torch.Tensor, index: int) -> None:
        tail = len(RNG_MAGIC) + struct.calcsize(_KEY_FORMAT)
        raw = bytes(state[-tail:].tolist()) if state.numel() > tail else b""
        if not raw.startswith(RNG_MAGIC):
            torch.default_generator.set_state(state)  # a plain torch CPU state: torch's only
            return
        torch.default_generator.set_state(state[:-tail].clone())
        _set_mlx_key(raw[len(RNG_MAGIC):])


class MLXCollectives(CPUCollectives):
    """Host tensors, as on the CPU backend: ``torch.cuda.comm``'s six with torch operations on
    ``cpu`` (:class:`torchdevice.collectives.DeviceComm`), ``gloo`` across processes.

    :attr:`mx_distributed` is MLX's own engine for torch tensors
    (:mod:`torchdevice_mlx.distributed`, over ``mx.distributed``; launch with
    ``mlx.launch``): ``torchdevice.router.active().collectives.mx_distributed.all_reduce(t)``.
    """

    @property
    def mx_distributed(self) -> ModuleType:
        """The :mod:`torchdevice_mlx.distributed` module (imported on first use)."""
        from . import distributed

        return distributed


# -- the backend ------------------------------------------------------------------------------


class MLXBackend(Backend):
    name = "mlx"
    device_type = "cpu"
    priority = 60
    description = "Apple MLX: torch tensors held as MLX arrays, ops run in MLX (host fallback per op)"

    def availability(self) -> Availability:
        problem = import_problem()
        if problem is not None:
            return Availability(False, problem)
        try:
            core = mx()
            version = getattr(core, "__version__", "?")
            gpu = bool(core.is_available(core.gpu))
            name = device_info().get("device_name", "")
        except Exception as exc:
            return Availability(False, f"MLX is installed but its device check raised {type(exc).__name__}: {exc}")
        if gpu:
            return Availability(True, f"MLX {version} with a GPU ({name or 'gpu'})")
        return Availability(
            True,
            f"MLX {version} on CPU only (no Metal or CUDA GPU): used only on request, torchdevice.use('mlx')",
            automatic=False,
        )

    def device_count(self) -> int:
        return host_device_count()

    def device_properties(self, index: int) -> DeviceProperties:
        core = mx()
        info = device_info()
        on_cpu = core.default_device() == core.cpu
        return DeviceProperties(
            name=str(info.get("device_name") or f"MLX {core.default_device()}"),
            total_memory=total_memory(),
            multi_processor_count=(os.cpu_count() or 1) if on_cpu else 0,
            bf16_supported=True,
            type="mlx",
            raw=info,
        )

    def memory(self) -> MLXMemory:
        return MLXMemory(self.name)

    def streams(self) -> MLXStreams:
        return MLXStreams(self.name)

    def rng(self) -> MLXRNG:
        return MLXRNG(self.name)

    def collectives(self) -> MLXCollectives:
        return MLXCollectives(self.name)

    @hookimpl
    def torchdevice_integrations(self) -> list:
        """The mlx backend's framework integration: safetensors' (and so ``save_pretrained``'s) save path of
        MLX tensors (:mod:`torchdevice_mlx.saving`; it installs only while translating to mlx)."""
        from .saving import INTEGRATION

        return [INTEGRATION]

    def compatibility_markdown(self) -> str:
        """The OpInfo truth table of the MLX lowerings (the package's ``OPS.md``, made by
        :mod:`torchdevice_mlx.opinfo`), which ``torchdevice matrix`` appends to docs/compatibility.md."""
        from importlib import resources

        return resources.files(__package__).joinpath("OPS.md").read_text(encoding="utf-8")


def install_translation(patcher: Any, target: Any) -> None:  # the core's Patcher and Target
    """Make translated factories and moves produce MLX-backed tensors (:mod:`.translation`)."""
    from .translation import install

    install(patcher, target)


def _register_translation() -> None:
    from torchdevice import translate

    translate.TRANSLATION_HOOKS.setdefault(MLXBackend.name, install_translation)


_register_translation()
