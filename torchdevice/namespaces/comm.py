"""``torch.cuda.comm`` on the active backend: single-process collectives across devices.

The six functions below have ``torch.cuda.comm``'s signatures and results
(``broadcast`` returns a list, ``broadcast_coalesced`` a list of lists,
``scatter`` and ``reduce_add_coalesced`` tuples, ``gather`` and ``reduce_add`` a
tensor). While translation is on, ``torch.cuda.comm`` is this module.

Devices are given as indices, strings or ``torch.device`` (``0``, ``"cuda:1"``,
``torch.device("cuda", 1)``, or the target's own type such as ``"mps:1"``);
an index the active backend does not have raises
:class:`~torchdevice.errors.InvalidDeviceError`, a ``torch.AcceleratorError``
as CUDA raises for an invalid device ordinal. The arguments are resolved here
and the work is done by the active backend's collectives family
(:class:`~torchdevice.backend.CollectiveOps`):

* :class:`DeviceComm` implements the six with torch operations on the
  backend's device type (copies with ``Tensor.copy_``, sums with ``add``);
  the CPU backend and the MPS/XPU/MTIA/MLX plugins use it;
* :class:`NativeCUDAComm` passes through to ``torch.cuda.comm`` (NCCL when it
  can) for the CUDA plugin.

Aliasing, on a backend whose tensors live in host memory (``cpu``, MLX):
CUDA returns the *input itself* (or a view of it) for an output on the
device the input already lives on, and a *copy* for an input in host
memory. Host memory and "device 0" are the same place there, so a host
tensor and a translated ``"cuda:0"`` tensor cannot be told apart; torchdevice
then always copies, so no output of ``broadcast`` or ``scatter`` ever shares
storage with the input (they are the "copies" the functions document).
``broadcast_coalesced`` still returns the inputs as its first row, and
``reduce_add`` of one input returns that input, as CUDA always does. On
backends with device memory (MPS, XPU, MTIA) CUDA's rule is kept exactly.

A one-device backend still does real work: the device list may repeat index 0
(``broadcast(t, [0, 0])`` gives two independent copies; ``reduce_add`` of
two tensors on device 0 adds them).

The two implementations live in :mod:`torchdevice.collectives`.

:func:`status` reports, for the compatibility matrix, how each function is
honoured on the active backend.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import torch
from torch._utils import _handle_complex

from .. import router, trace
from ..backend import Status, status_of
from ..collectives import _DEFAULT_BUFFER, HOST
from ..errors import InvalidDeviceError
from ..vocabulary import SOURCE_FAMILIES
from ..vocabulary import RealDevice as _Device

if TYPE_CHECKING:
    from torch.types import Device

    from ..router import Target

__all__ = [
    "broadcast",
    "broadcast_coalesced",
    "reduce_add",
    "reduce_add_coalesced",
    "scatter",
    "gather",
    "status",
    "FUNCTIONS",
]

#: The functions of ``torch.cuda.comm`` this module provides.
FUNCTIONS = ("broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather")



# -- resolving device arguments -----------------------------------------------------------


def _resolve(device: object, backend: Target, *, optional: bool = False, allow_host: bool = False) -> int:
    """Turn one device argument into a valid index of ``backend`` (or HOST).

    Follows ``torch._utils._get_device_index``: an int is an ordinal; a string
    or ``torch.device`` of a source type (``cuda`` ...) or of the backend's own
    type gives its index; no index means the current device only where the
    argument is optional. ``"cpu"`` is host memory, which is the device itself
    on a backend whose tensors live on the CPU.
    """
    count, name, own = backend.device_count, backend.name, backend.device_type
    if device is None:
        if optional:
            return backend.streams.current_device()
        raise ValueError("Expected a torch.device with a specified index or an integer, but got:None")
    if isinstance(device, bool):
        raise TypeError(f"expected a device index, str or torch.device, got {device!r}")
    if isinstance(device, int):
        index = device
        if index == HOST and allow_host:
            return HOST
        if index < 0:
            raise RuntimeError(f"Expected non-negative device index, but got {index}")
    else:
        if isinstance(device, str):
            dev = _Device(device)
        elif isinstance(device, _Device) or (hasattr(device, "type") and hasattr(device, "index")):
            dev = cast(_Device, device)  # or a duck-typed device: what is read of it is .type and .index
        else:
            raise TypeError(f"expected a device index, str or torch.device, got {type(device).__name__} {device!r}")
        if dev.type == "cpu" and own != "cpu":
            if allow_host:
                return HOST
            raise ValueError(f"Expected a non cpu device, but got: {dev}")
        if dev.type == "cpu" and own == "cpu" and dev.index is None:
            # the host is this backend's device 0 (translated "cuda:0" arrives as plain "cpu")
            return HOST if allow_host else 0
        if dev.type not in SOURCE_FAMILIES and dev.type != own:
            raise ValueError(
                f"device {dev} is not a device of torchdevice backend {name!r} (device type {own!r})"
            )
        index = dev.index
        if index is None:
            if optional:
                return backend.streams.current_device()
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{dev}")
    if not 0 <= index < count:
        raise InvalidDeviceError(index, count, name)
    return index


def _indices(devices: Iterable[object], backend: Target) -> list[int]:
    if isinstance(devices, (str, int, _Device)):
        raise TypeError(f"devices must be an iterable of devices, got {devices!r}")
    return [_resolve(d, backend) for d in devices]


# -- the public functions (torch.cuda.comm's signatures) -------------------------------------


def broadcast(tensor: torch.Tensor, devices: Iterable[Device] | None = None, *,
              out: Iterable[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Broadcast ``tensor`` to ``devices``; or copy it into each of ``out``.

    Exactly one of ``devices`` and ``out`` must be given. Returns a list with
    one tensor per device (or the ``out`` tensors), each holding ``tensor``'s
    values. Example::

        >>> a, b = torchdevice.namespaces.comm.broadcast(torch.ones(2), [0, 0])
        >>> a.add_(1); b      # independent copies
        tensor([1., 1.])
    """
    backend = router.active()
    tensor = _handle_complex(tensor)
    if not ((devices is None) ^ (out is None)):
        raise RuntimeError(
            f"Exactly one of 'devices' and 'out' must be specified, but got devices={devices} and out={out}"
        )
    if devices is not None:
        return backend.collectives.broadcast(tensor, _indices(devices, backend), None)
    return backend.collectives.broadcast(tensor, None, list(cast("Iterable[torch.Tensor]", out)))  # out given


def broadcast_coalesced(tensors: Iterable[torch.Tensor], devices: Iterable[Device],
                        buffer_size: int = _DEFAULT_BUFFER) -> list[list[torch.Tensor]]:
    """Broadcast a sequence of tensors, all on ``devices[0]``, to ``devices``.

    Small tensors are packed into buffers of at most ``buffer_size`` bytes.
    Returns a list of lists: row ``i`` holds the tensors on ``devices[i]``;
    row 0 is ``tensors`` itself, as in CUDA.
    """
    backend = router.active()
    indices = _indices(devices, backend)
    tensors = [_handle_complex(t) for t in tensors]
    return backend.collectives.broadcast_coalesced(tensors, indices, int(buffer_size))


def reduce_add(inputs: Iterable[torch.Tensor], destination: Device = None) -> torch.Tensor:
    """Sum ``inputs`` (same shape) element-wise onto ``destination`` (default: current device).

    As in CUDA, ``destination`` must be the device of one of the inputs; the
    sum starts from the last input on it and adds the others in order.
    """
    backend = router.active()
    dest = _resolve(destination, backend, optional=True)
    return backend.collectives.reduce_add(list(inputs), dest)


def reduce_add_coalesced(inputs: Iterable[Iterable[torch.Tensor]], destination: Device = None,
                         buffer_size: int = _DEFAULT_BUFFER) -> tuple[torch.Tensor, ...]:
    """Sum each group of tensors across devices, packing small ones into buffers.

    ``inputs`` is a sequence (one per device) of sequences of tensors.
    Returns a tuple with one sum per tensor position, on ``destination``.
    """
    backend = router.active()
    dest = _resolve(destination, backend, optional=True)
    return backend.collectives.reduce_add_coalesced([list(i) for i in inputs], dest, int(buffer_size))


def scatter(tensor: torch.Tensor, devices: Iterable[Device] | None = None,
            chunk_sizes: Iterable[int] | None = None, dim: int = 0, streams: list[Any] | None = None, *,
            out: Iterable[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
    """Split ``tensor`` along ``dim`` and place the chunks on ``devices`` (or into ``out``).

    Without ``chunk_sizes`` the tensor is divided with ``Tensor.chunk`` (which
    may give fewer chunks than devices). Returns a tuple.
    """
    backend = router.active()
    tensor = _handle_complex(tensor)
    if out is None:
        if devices is None:
            raise RuntimeError("Exactly one of 'devices' and 'out' must be specified, but got devices=None and out=None")
        indices = _indices(devices, backend)
        sizes = None if chunk_sizes is None else [int(c) for c in chunk_sizes]
        return tuple(backend.collectives.scatter(tensor, indices, sizes, int(dim), streams, None))
    if devices is not None:
        raise RuntimeError(f"'devices' must not be specified when 'out' is specified, but got devices={devices}")
    if chunk_sizes is not None:
        raise RuntimeError(
            f"'chunk_sizes' must not be specified when 'out' is specified, but got chunk_sizes={chunk_sizes}"
        )
    return tuple(backend.collectives.scatter(tensor, None, None, int(dim), streams, list(out)))


def gather(tensors: Iterable[torch.Tensor], dim: int = 0, destination: Device = None, *,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """Concatenate ``tensors`` along ``dim`` on ``destination`` (or into ``out``).

    ``destination`` may be a device, ``"cpu"`` (host memory), or ``-1``
    (host memory, deprecated as in torch); the default is the current device.
    """
    backend = router.active()
    tensors = [_handle_complex(t) for t in tensors]
    if out is None:
        if destination == -1:
            trace.warn(
                "Using -1 to represent CPU tensor is deprecated. Please use a "
                'device object or string instead, e.g., "cpu".',
                FutureWarning,
            )
        dest = _resolve(destination, backend, optional=True, allow_host=True)
        return backend.collectives.gather(tensors, int(dim), dest, None)
    if destination is not None:
        raise RuntimeError(
            f"'destination' must not be specified when 'out' is specified, but got destination={destination}"
        )
    return backend.collectives.gather(tensors, int(dim), None, out)


def status(name: str) -> tuple[Status, str]:
    """``(Status, note)`` of ``torch.cuda.comm.<name>`` on the active backend, for the compatibility matrix.

    Accepts ``"broadcast"`` or ``"torch.cuda.comm.broadcast"``.
    """
    short = name.rsplit(".", 1)[-1]
    if short not in FUNCTIONS:
        raise KeyError(f"{name!r} is not a torch.cuda.comm function; known: {', '.join(FUNCTIONS)}")
    return status_of(router.active().collectives, short)
