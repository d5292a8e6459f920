"""``torch.sim``: the simulated GPU's device module, shaped like ``torch.cuda``.

Registered with ``torch._register_device_module`` by :func:`torchdevice_sim.load`, as a
vendor's module is (``torch.npu``, ``torch.xpu``); code written for sim calls it directly::

    import torchdevice_sim, torch
    torchdevice_sim.load()
    x = torch.ones(3, device="sim:1")
    torch.sim.synchronize(1)
    print(torch.sim.memory_allocated(1))

Everything is answered by the C++ half (``_C``): the allocator's figures, the streams, the
generators. Device arguments are an index, ``"sim:1"``, a ``torch.device`` or None (the
calling thread's current device).
"""
from __future__ import annotations

from typing import Any, Union

import torch

from . import config

DEVICE_TYPE = "sim"
PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, as torch.Stream(device_type=) takes it
_C: Any = None  # the extension module, set by torchdevice_sim.load()
default_generators: tuple = ()

Device = Union[int, str, torch.device, None]


_physical: tuple[int, ...] = ()  # the physical sim device behind each index (config: the visible devices)


def _bind(extension: Any, physical: tuple[int, ...]) -> None:
    global _C, default_generators, _physical
    _C = extension
    _physical = physical
    default_generators = tuple(extension.default_generator(i) for i in range(extension.device_count()))


def _index(device: Device = None, optional: bool = True) -> int:
    """The device index ``device`` names; ValueError/RuntimeError naming a bad one."""
    if device is None:
        return int(_C.current_device())
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_TYPE:
            raise ValueError(f"Expected a {DEVICE_TYPE} device, but got: {device}")
        index = device.index if device.index is not None else int(_C.current_device())
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        raise ValueError(f"Expected a {DEVICE_TYPE} device index, string or torch.device, but got: {device!r}")
    if not 0 <= index < device_count():
        raise RuntimeError(f"Invalid device ordinal {DEVICE_TYPE}:{index}: {DEVICE_TYPE} has {device_count()} device(s) "
                           f"({config.DEVICES_VAR}, and the visible devices {config.VISIBLE_VAR} or "
                           f"{config.CUDA_VISIBLE_VAR} names)")
    return index


# -- devices --------------------------------------------------------------------------------------


def is_available() -> bool:
    return _C is not None and _C.device_count() > 0


def _is_compiled() -> bool:
    return True


def is_initialized() -> bool:
    return _C is not None


def _is_in_bad_fork() -> bool:
    """False: a forked child gets fresh streams (the C++ half's fork handler), so sim works there."""
    return False


def _lazy_init() -> None:
    """Nothing to do: sim is initialised by torchdevice_sim.load(), before this module exists."""


def device_count() -> int:
    return int(_C.device_count()) if _C is not None else 0


def current_device() -> int:
    return int(_C.current_device())


def set_device(device: Device) -> None:
    _C.set_device(_index(device))


class device:
    """Context manager making ``device`` the calling thread's current sim device."""

    def __init__(self, device: Device):
        self.index = _index(device) if device is not None else None
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index is not None:
            _C.set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        _C.set_device(self.previous)


class SimDeviceProperties:
    """``torch.sim.get_device_properties()``: the fields of CUDA's ``_CudaDeviceProperties`` that sim has."""

    def __init__(self, index: int):
        physical = _physical[index]  # what identifies a device follows it when the visible devices reorder them
        self.name = "torchdevice sim GPU"
        self.major, self.minor = 8, 0  # runs every dtype, bfloat16 included, and CUDA 8.0's feature set
        self.total_memory = int(_C.capacity(index))
        self.multi_processor_count = config.MULTIPROCESSORS
        self.clock_rate = int(_C.clock_khz())  # kHz, as CUDA's
        self.is_integrated = 0
        self.is_multi_gpu_board = 0
        self.max_threads_per_multi_processor = 2048
        self.warp_size = 32
        self.uuid = f"5e1a0000-0000-4000-8000-{physical:012x}"
        self.pci_bus_id = physical
        self.L2_cache_size = 4 * 1024**2
        self.memory_clock_rate = 1_215_000
        self.memory_bus_width = 4096
        self.shared_memory_per_block = 48 * 1024
        self.shared_memory_per_multiprocessor = 164 * 1024
        self.gcnArchName = ""

    def __repr__(self) -> str:
        return (f"SimDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 1024**2}MB, multi_processor_count={self.multi_processor_count})")


def get_device_properties(device: Device = None) -> SimDeviceProperties:
    return SimDeviceProperties(_index(device))


def get_device_name(device: Device = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Device = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    """What ``torch.autocast("sim")`` may cast to (torch asks a PrivateUse1 module for it)."""
    return [torch.float16, torch.bfloat16]


# -- streams and events -------------------------------------------------------------------------------


class Stream(torch.Stream):
    """A queue of sim device work, run in order by its own worker thread (``torch.cuda.Stream``'s interface)."""

    def __new__(cls, device: Device = None, priority: int = 0, **kwargs: Any) -> Stream:
        if "stream_id" in kwargs:  # wrapping an existing stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device(DEVICE_TYPE, _index(device)), priority=priority)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, torch.Stream) and (self.stream_id, self.device_index, self.device_type) == (
            other.stream_id, other.device_index, other.device_type)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index, self.device_type))

    def wait_event(self, event: Event) -> None:  # type: ignore[override]
        event.wait(self)

    def record_event(self, event: Event | None = None) -> Event:  # type: ignore[override]
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<torch.sim.Stream device=sim:{self.device_index} stream_id={self.stream_id}>"


class Event:
    """A marker in a stream's queue (``torch.cuda.Event``'s interface); times queued work in milliseconds.

    Wraps a ``torch.Event`` of the sim device type, made at the first record on the recording
    stream's device (a CUDA event, too, takes its device from its first record).
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise RuntimeError("sim events cannot be shared between processes (interprocess=True)")
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.event: torch.Event | None = None

    @property
    def device(self) -> torch.device | None:
        return None if self.event is None else self.event.device

    def record(self, stream: torch.Stream | None = None) -> None:
        stream = stream if stream is not None else current_stream()
        if self.event is None or self.event.device.index != stream.device_index:
            self.event = torch.Event(device=torch.device(DEVICE_TYPE, stream.device_index), enable_timing=self.enable_timing,
                                     blocking=self.blocking)
        self.event.record(stream)

    def wait(self, stream: torch.Stream | None = None) -> None:
        if self.event is not None:  # never recorded: nothing to wait for, as CUDA
            self.event.wait(stream if stream is not None else current_stream())

    def query(self) -> bool:
        return self.event is None or self.event.query()

    def synchronize(self) -> None:
        if self.event is not None:
            self.event.synchronize()

    def elapsed_time(self, end_event: Event) -> float:
        if self.event is None or end_event.event is None:
            # torch's own events check this with TORCH_CHECK_VALUE (c10/core/impl/InlineEvent.h): a ValueError
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        return float(self.event.elapsed_time(end_event.event))

    def __repr__(self) -> str:
        return f"<torch.sim.Event device={self.device} enable_timing={self.enable_timing}>"


def _wrap(index: int, stream_id: int) -> Stream:
    return Stream(stream_id=stream_id, device_index=index, device_type=PRIVATEUSE1)


def current_stream(device: Device = None) -> Stream:
    index = _index(device)
    return _wrap(index, int(_C.current_stream(index)))


def default_stream(device: Device = None) -> Stream:
    return _wrap(_index(device), 0)


def set_stream(stream: torch.Stream) -> None:
    if not isinstance(stream, torch.Stream) or stream.device_type != PRIVATEUSE1:
        raise TypeError(f"set_stream expects a torch.sim.Stream, got {stream!r}")
    _C.set_stream(stream.device_index, stream.stream_id)


class StreamContext:
    """``torch.sim.stream(s)``: make ``s`` (and its device) current in a ``with`` block; None does nothing."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self.previous: tuple[int, Stream] | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self.previous = (current_device(), current_stream(self.stream.device_index))
            _C.set_device(self.stream.device_index)
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            set_stream(self.previous[1])
            _C.set_device(self.previous[0])


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


def synchronize(device: Device = None) -> None:
    """Wait for every stream of ``device`` (default: the current one) to finish its queued work."""
    _C.synchronize(_index(device))


def _sleep(cycles: int) -> None:
    """Queue a kernel that runs ``cycles`` clock cycles (at ``clock_rate``) on the current stream."""
    index = current_device()
    _C.sleep(index, float(cycles) / float(_C.clock_khz()))


# -- memory ------------------------------------------------------------------------------------------


def memory_stats(device: Device = None) -> dict[str, int]:
    return dict(sorted(_C.memory_stats(_index(device)).items()))


def _stat(device: Device, key: str) -> int:
    return int(_C.memory_stats(_index(device))[key])


def memory_allocated(device: Device = None) -> int:
    return _stat(device, "allocated_bytes.all.current")


def max_memory_allocated(device: Device = None) -> int:
    return _stat(device, "allocated_bytes.all.peak")


def memory_reserved(device: Device = None) -> int:
    return _stat(device, "reserved_bytes.all.current")


def max_memory_reserved(device: Device = None) -> int:
    return _stat(device, "reserved_bytes.all.peak")


def reset_peak_memory_stats(device: Device = None) -> None:
    _C.reset_peak(_index(device))


def reset_accumulated_memory_stats(device: Device = None) -> None:
    _C.reset_accumulated(_index(device))


def mem_get_info(device: Device = None) -> tuple[int, int]:
    free, total = _C.mem_get_info(_index(device))
    return int(free), int(total)


def empty_cache() -> None:
    _C.empty_cache()


def set_per_process_memory_fraction(fraction: float, device: Device = None) -> None:
    if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C.set_memory_fraction(float(fraction), _index(device))


def get_per_process_memory_fraction(device: Device = None) -> float:
    return float(_C.get_memory_fraction(_index(device)))


# -- random numbers -----------------------------------------------------------------------------------


def manual_seed(seed: int) -> None:
    if default_generators:  # no device visible: nothing to seed, as torch.cuda.manual_seed without a GPU
        default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for generator in default_generators:
        generator.manual_seed(int(seed))


def seed() -> None:
    if default_generators:
        default_generators[current_device()].seed()


def seed_all() -> None:
    value = torch.Generator().seed()
    for generator in default_generators:
        generator.manual_seed(value)


def initial_seed() -> int:
    return int(default_generators[current_device()].initial_seed())


def get_rng_state(device: Device = "sim") -> torch.Tensor:
    return default_generators[_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device: Device = "sim") -> None:
    default_generators[_index(device)].set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for generator, state in zip(default_generators, new_states):
        generator.set_state(state)
