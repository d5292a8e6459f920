"""The device-agnostic API: ``torch.cuda``'s shape, routed to the active backend.

Every function reads the cached :class:`~torchdevice.router.Target`;
none calls a pluggy hook. A ``device`` argument may be ``None`` (the current
device), an ``int``, a string such as ``"cuda:1"``, or a ``torch.device``; an
index beyond the device count raises :class:`~torchdevice.errors.InvalidDeviceError`.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator

import torch
from torch.types import Device

from . import router
from .backend import DeviceProperties
from .vocabulary import parse_index

active = router.active

__all__ = [
    "current_backend",
    "device_type",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "synchronize",
    "dist_backend",
    "get_device_properties",
    "get_device_name",
    "get_device_capability",
    "is_bf16_supported",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "memory_stats",
    "mem_get_info",
    "empty_cache",
    "set_per_process_memory_fraction",
    "get_per_process_memory_fraction",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
]


def _index(device: Device = None) -> int:
    backend = active()
    return parse_index(device, backend.streams.current_device(), backend.device_count, backend.name)


# -- devices ------------------------------------------------------------------------


def current_backend() -> str:
    """Return the name of the active backend.

    Resolves the backend on first call (``use()`` > ``TORCHDEVICE_BACKEND`` >
    priority) and caches it. Example::

        >>> torchdevice.current_backend()
        'cpu'
    """
    return active().name


def device_type() -> str:
    """Return the torch device type that tensors of the active backend live on.

    For MLX this is ``"cpu"``: MLX shares host (unified) memory with torch.
    Example::

        >>> torch.zeros(2, device=torchdevice.device_type())
        tensor([0., 0.])
    """
    return active().device_type


def device_count() -> int:
    """Return the number of devices of the active backend (1 for CPU).

    The count is asked of the plugin once and cached, as CUDA does. Example::

        >>> torchdevice.device_count()
        1
    """
    return active().device_count


def current_device() -> int:
    """Return the index of this thread's current device.

    Like CUDA, the current device is per thread, and a new thread starts on
    device 0. Example::

        >>> torchdevice.current_device()
        0
    """
    return active().streams.current_device()


def set_device(device: Device) -> None:
    """Set this thread's current device.

    ``device`` is an index, a device string or a ``torch.device``; a negative
    index is ignored, as in ``torch.cuda.set_device``. Example::

        >>> torchdevice.set_device(0)
    """
    if isinstance(device, int) and not isinstance(device, bool) and device < 0:
        return
    active().streams.set_device(_index(device))


@contextlib.contextmanager
def device(device: Device) -> Iterator[None]:
    """Context manager that makes ``device`` current for this thread, then restores.

    ``None`` or a negative index leaves the current device unchanged, as
    ``torch.cuda.device`` does. Example::

        >>> with torchdevice.device(0):
        ...     x = torch.ones(3, device=torchdevice.device_type())
    """
    streams = active().streams
    previous = streams.current_device()
    if device is None or (isinstance(device, int) and device < 0):
        yield
        return
    streams.set_device(_index(device))
    try:
        yield
    finally:
        streams.set_device(previous)


def synchronize(device: Device = None) -> None:
    """Wait for all work queued on every stream of ``device`` to finish.

    On CPU that work is already done when its call returns. Example::

        >>> torchdevice.synchronize()
    """
    active().streams.synchronize(_index(device))


def dist_backend() -> str | None:
    """The ``torch.distributed`` engine of the active backend (``"nccl"`` on CUDA, ``"gloo"`` on
    the CPU backend), or None when it declares none. Example::

        >>> torch.distributed.init_process_group(torchdevice.dist_backend())
    """
    return active().collectives.dist_backend


def get_device_properties(device: Device = None) -> DeviceProperties:
    """Return the :class:`~torchdevice.backend.DeviceProperties` of ``device``.

    Fields follow ``torch.cuda.get_device_properties``: ``name``,
    ``total_memory``, ``major``/``minor`` (``None`` without a compute
    capability), ``multi_processor_count``. Example::

        >>> torchdevice.get_device_properties().total_memory > 0
        True
    """
    return active().properties(_index(device))


def get_device_name(device: Device = None) -> str:
    """Return the name of ``device`` (the CPU model on the CPU backend).

    Example::

        >>> torchdevice.get_device_name()
        'AMD EPYC 7B13'
    """
    return get_device_properties(device).name


def get_device_capability(device: Device = None) -> tuple[int, int]:
    """Return ``device``'s compute capability ``(major, minor)``.

    A backend whose devices have none (CPU, MPS, MLX) answers with the CUDA feature level the
    device offers: ``(8, 0)`` with bfloat16, else ``(7, 0)``; ``TORCHDEVICE_CAPABILITY=8.6``
    overrides that (see :mod:`torchdevice.capability`). Example::

        >>> torchdevice.get_device_capability()  # on an H100
        (9, 0)
    """
    capability = get_device_properties(device).capability
    assert capability is not None  # the router completes every device's properties
    return capability


def is_bf16_supported(device: Device = None) -> bool:
    """Return whether ``device`` computes in bfloat16.

    Example::

        >>> torchdevice.is_bf16_supported()
        True
    """
    return get_device_properties(device).bf16_supported


# -- memory -------------------------------------------------------------------------------


def memory_allocated(device: Device = None) -> int:
    """Return the bytes currently allocated on ``device``.

    On CUDA this is the caching allocator's figure; on CPU the process's
    resident set size (see :mod:`torchdevice.cpu`). Example::

        >>> before = torchdevice.memory_allocated()
        >>> x = torch.ones(2**25, device=torchdevice.device_type())
        >>> torchdevice.memory_allocated() - before >= 2**27
        True
    """
    return active().memory.memory_allocated(_index(device))


def max_memory_allocated(device: Device = None) -> int:
    """Return the peak of :func:`memory_allocated` since start or the last reset.

    Example::

        >>> torchdevice.reset_peak_memory_stats()
        >>> torchdevice.max_memory_allocated() >= torchdevice.memory_allocated()
        True
    """
    return active().memory.max_memory_allocated(_index(device))


def memory_reserved(device: Device = None) -> int:
    """Return the bytes the backend's allocator holds on ``device``, in use or cached.

    Example::

        >>> torchdevice.memory_reserved() >= torchdevice.memory_allocated()
        True
    """
    return active().memory.memory_reserved(_index(device))


def max_memory_reserved(device: Device = None) -> int:
    """Return the peak of :func:`memory_reserved` since start or the last reset.

    Example::

        >>> torchdevice.max_memory_reserved() > 0
        True
    """
    return active().memory.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: Device = None) -> None:
    """Reset the peaks reported by :func:`max_memory_allocated` and :func:`max_memory_reserved`.

    Example::

        >>> torchdevice.reset_peak_memory_stats()
    """
    active().memory.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Device = None) -> None:
    """Reset the accumulated (count) statistics of ``device``'s allocator.

    Example::

        >>> torchdevice.reset_accumulated_memory_stats()
    """
    active().memory.reset_accumulated_memory_stats(_index(device))


def memory_stats(device: Device = None) -> dict[str, Any]:
    """Return a dict of allocator statistics, with CUDA's key names where they apply.

    Example::

        >>> torchdevice.memory_stats()["allocated_bytes.all.current"] > 0
        True
    """
    return active().memory.memory_stats(_index(device))


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """Return ``(free, total)`` bytes of ``device``'s memory.

    Example::

        >>> free, total = torchdevice.mem_get_info()
        >>> 0 < free <= total
        True
    """
    return active().memory.mem_get_info(_index(device))


def empty_cache() -> None:
    """Release cached, unused allocator memory back to the system (no-op where nothing is cached).

    Example::

        >>> torchdevice.empty_cache()
    """
    active().memory.empty_cache()


def set_per_process_memory_fraction(fraction: float, device: Device = None) -> None:
    """Cap this process's allocations on ``device`` at ``fraction`` of its memory.

    ``fraction`` must be in ``[0, 1]``. Example::

        >>> torchdevice.set_per_process_memory_fraction(0.5)  # on CUDA
    """
    if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be a number in [0, 1], got {fraction!r}")
    active().memory.set_per_process_memory_fraction(float(fraction), _index(device))


def get_per_process_memory_fraction(device: Device = None) -> float:
    """Return the memory fraction set by :func:`set_per_process_memory_fraction`.

    Example::

        >>> torchdevice.get_per_process_memory_fraction()  # on CUDA
        1.0
    """
    return active().memory.get_per_process_memory_fraction(_index(device))


# -- streams and events ----------------------------------------------------------------


def current_stream(device: Device = None) -> Any:
    """Return this thread's current stream on ``device``.

    Example::

        >>> torchdevice.current_stream() == torchdevice.default_stream()
        True
    """
    return active().streams.current_stream(_index(device))


def default_stream(device: Device = None) -> Any:
    """Return the default stream of ``device``, shared by all threads.

    Example::

        >>> torchdevice.default_stream().stream_id
        0
    """
    return active().streams.default_stream(_index(device))


def set_stream(stream: Any) -> None:
    """Make ``stream`` this thread's current stream on its device.

    Example::

        >>> torchdevice.set_stream(torchdevice.Stream())
    """
    active().streams.set_stream(stream)


@contextlib.contextmanager
def stream(stream: Any) -> Iterator[Any]:
    """Context manager that makes ``stream`` current (and its device), then restores both.

    ``None`` leaves everything unchanged, as ``torch.cuda.stream(None)``.
    Example::

        >>> s = torchdevice.Stream()
        >>> with torchdevice.stream(s):
        ...     y = torch.ones(3, device=torchdevice.device_type()) * 2
    """
    if stream is None:
        yield None
        return
    streams = active().streams
    index = getattr(stream, "device_index", None)
    index = _index(index)
    previous_device = streams.current_device()
    previous_stream = streams.current_stream(index)
    streams.set_device(index)
    streams.set_stream(stream)
    try:
        yield stream
    finally:
        streams.set_stream(previous_stream)
        streams.set_device(previous_device)


# -- random numbers ---------------------------------------------------------------------


def manual_seed(seed: int) -> None:
    """Seed the current device's generator.

    On CPU (and MLX) the device generator is torch's CPU generator, so the
    same seed gives the same numbers as a native CPU program. Example::

        >>> torchdevice.manual_seed(0)
    """
    active().rng.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed the generators of every device of the active backend.

    Example::

        >>> torchdevice.manual_seed_all(0)
    """
    active().rng.manual_seed_all(int(seed))


def seed() -> None:
    """Seed the current device's generator from a non-deterministic source.

    Example::

        >>> torchdevice.seed()
    """
    active().rng.seed()


def seed_all() -> None:
    """Seed every device's generator from a non-deterministic source.

    Example::

        >>> torchdevice.seed_all()
    """
    active().rng.seed_all()


def initial_seed() -> int:
    """Return the current device generator's initial seed.

    Example::

        >>> torchdevice.manual_seed(7); torchdevice.initial_seed()
        7
    """
    return active().rng.initial_seed()


def get_rng_state(device: Device = None) -> torch.Tensor:
    """Return ``device``'s generator state as a ByteTensor.

    Example::

        >>> state = torchdevice.get_rng_state()
        >>> a = torch.rand(2); torchdevice.set_rng_state(state)
        >>> torch.equal(a, torch.rand(2))
        True
    """
    return active().rng.get_rng_state(_index(device))


def set_rng_state(new_state: torch.Tensor, device: Device = None) -> None:
    """Restore ``device``'s generator state from :func:`get_rng_state`.

    Example::

        >>> torchdevice.set_rng_state(torchdevice.get_rng_state())
    """
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError(f"new_state must be a torch.ByteTensor, got {type(new_state).__name__}")
    active().rng.set_rng_state(new_state, _index(device))


def get_rng_state_all() -> list[torch.Tensor]:
    """Return the generator states of every device, in index order.

    Example::

        >>> len(torchdevice.get_rng_state_all()) == torchdevice.device_count()
        True
    """
    backend = active()
    return [backend.rng.get_rng_state(i) for i in range(backend.device_count)]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Restore every device's generator from :func:`get_rng_state_all`.

    Example::

        >>> torchdevice.set_rng_state_all(torchdevice.get_rng_state_all())
    """
    for index, state in enumerate(new_states):
        set_rng_state(state, index)
