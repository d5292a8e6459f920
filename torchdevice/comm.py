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

:func:`status` reports, for the compatibility matrix, how each function is
honoured on the active backend.
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch._utils import (
    _flatten_dense_tensors,
    _flatten_sparse_tensors,
    _handle_complex,
    _reorder_tensors_as,
    _take_tensors,
    _unflatten_dense_tensors,
    _unflatten_sparse_tensors,
)

from . import router, trace
from .backend import CollectiveOps, Status, emulated, native, status_of
from .errors import InvalidDeviceError
from .vocabulary import SOURCE_FAMILIES

__all__ = [
    "broadcast",
    "broadcast_coalesced",
    "reduce_add",
    "reduce_add_coalesced",
    "scatter",
    "gather",
    "status",
    "FUNCTIONS",
    "DeviceComm",
    "NativeCUDAComm",
]

#: The functions of ``torch.cuda.comm`` this module provides.
FUNCTIONS = ("broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather")

#: Device types whose code torchdevice translates (see torchdevice.translate.SOURCE_TYPES).
_SOURCE_TYPES = SOURCE_FAMILIES

# The real device class: torch.device may be a translating stand-in while patched.
_Device = type(torch.empty(0).device)

HOST = -1  #: destination index meaning host memory (``gather(..., destination=-1 or "cpu")``)

_DEFAULT_BUFFER = 10485760


# -- resolving device arguments -----------------------------------------------------------


def _resolve(device, backend, *, optional: bool = False, allow_host: bool = False) -> int:
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
            dev = device
        else:
            raise TypeError(f"expected a device index, str or torch.device, got {type(device).__name__} {device!r}")
        if dev.type == "cpu" and own != "cpu":
            if allow_host:
                return HOST
            raise ValueError(f"Expected a non cpu device, but got: {dev}")
        if dev.type == "cpu" and own == "cpu" and dev.index is None:
            # the host is this backend's device 0 (translated "cuda:0" arrives as plain "cpu")
            return HOST if allow_host else 0
        if dev.type not in _SOURCE_TYPES and dev.type != own:
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


def _indices(devices, backend) -> list[int]:
    if isinstance(devices, (str, int, _Device)):
        raise TypeError(f"devices must be an iterable of devices, got {devices!r}")
    return [_resolve(d, backend) for d in devices]


# -- the public functions (torch.cuda.comm's signatures) -------------------------------------


def broadcast(tensor, devices=None, *, out=None):
    """Broadcast ``tensor`` to ``devices``; or copy it into each of ``out``.

    Exactly one of ``devices`` and ``out`` must be given. Returns a list with
    one tensor per device (or the ``out`` tensors), each holding ``tensor``'s
    values. Example::

        >>> a, b = torchdevice.comm.broadcast(torch.ones(2), [0, 0])
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
    return backend.collectives.broadcast(tensor, None, list(out))


def broadcast_coalesced(tensors, devices, buffer_size=_DEFAULT_BUFFER):
    """Broadcast a sequence of tensors, all on ``devices[0]``, to ``devices``.

    Small tensors are packed into buffers of at most ``buffer_size`` bytes.
    Returns a list of lists: row ``i`` holds the tensors on ``devices[i]``;
    row 0 is ``tensors`` itself, as in CUDA.
    """
    backend = router.active()
    indices = _indices(devices, backend)
    tensors = [_handle_complex(t) for t in tensors]
    return backend.collectives.broadcast_coalesced(tensors, indices, int(buffer_size))


def reduce_add(inputs, destination=None):
    """Sum ``inputs`` (same shape) element-wise onto ``destination`` (default: current device).

    As in CUDA, ``destination`` must be the device of one of the inputs; the
    sum starts from the last input on it and adds the others in order.
    """
    backend = router.active()
    dest = _resolve(destination, backend, optional=True)
    return backend.collectives.reduce_add(list(inputs), dest)


def reduce_add_coalesced(inputs, destination=None, buffer_size=_DEFAULT_BUFFER):
    """Sum each group of tensors across devices, packing small ones into buffers.

    ``inputs`` is a sequence (one per device) of sequences of tensors.
    Returns a tuple with one sum per tensor position, on ``destination``.
    """
    backend = router.active()
    dest = _resolve(destination, backend, optional=True)
    return backend.collectives.reduce_add_coalesced([list(i) for i in inputs], dest, int(buffer_size))


def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
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


def gather(tensors, dim=0, destination=None, *, out=None):
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


# -- implementations -----------------------------------------------------------------------------


class DeviceComm(CollectiveOps):
    """``torch.cuda.comm`` with torch operations, for any torch device type.

    Set ``device_type`` to the type the backend's tensors live on (``"cpu"``
    for the CPU and MLX backends, ``"mps"``, ``"xpu"``, ``"mtia"``). A plugin
    subclasses it and declares its engine::

        class MPSCollectives(DeviceComm):
            device_type = "mps"
            dist_backend = "gloo"
    """

    device_type: ClassVar[str] = "cpu"

    # -- helpers
    @property
    def _host_memory(self) -> bool:
        return self.device_type == "cpu"

    def _device(self, index: int):
        if index == HOST or self.device_type == "cpu":
            return _Device("cpu")
        return _Device(self.device_type, index)

    def _index_of(self, tensor) -> int | None:
        """The backend device index ``tensor`` lives on; None for a tensor elsewhere (host memory)."""
        dev = tensor.device
        if dev.type != self.device_type:
            return None
        return 0 if dev.index is None else dev.index

    def _aliases(self, tensor, index: int) -> bool:
        """Whether CUDA would return ``tensor`` itself for an output on device ``index``."""
        return not self._host_memory and self._index_of(tensor) == index

    def _check_on_device(self, tensor, what: str, i: int) -> None:
        if tensor.device.type != self.device_type:
            raise RuntimeError(
                f"Expected all {what} tensors to be on torchdevice backend {self.backend!r} "
                f"(device type {self.device_type!r}), but {what} tensor at index {i} has device '{tensor.device}'"
            )

    # -- broadcast
    @emulated("copies with Tensor.copy_ onto each listed device")
    def broadcast(self, tensor, devices, out=None):
        if out is not None:
            for i, o in enumerate(out):
                self._check_on_device(o, "output", i)
                if o.shape != tensor.shape:
                    raise RuntimeError(
                        f"Expected all output tensors to have same shape as the source tensor {tuple(tensor.shape)}, "
                        f"but output tensor at index {i} has shape {tuple(o.shape)}"
                    )
            for o in out:
                o.copy_(tensor)
            return out
        results = []
        for d in devices:
            if self._aliases(tensor, d):
                results.append(tensor)
            else:
                results.append(torch.empty_like(tensor, device=self._device(d)).copy_(tensor))
        return results

    @emulated("flattens into buffers of buffer_size bytes, copies them to each device, unflattens")
    def broadcast_coalesced(self, tensors, devices, buffer_size=_DEFAULT_BUFFER):
        if not devices:
            raise RuntimeError("Expected at least one device to broadcast to")
        first = devices[0]
        for t in tensors:
            if self._index_of(t) != first:
                raise RuntimeError(f"All tensors must be on devices[0]: {first}")
        outputs: list[list] = [list(tensors)] + [[] for _ in devices[1:]]
        for chunk in _take_tensors(tensors, buffer_size):
            if chunk[0].is_sparse:
                flat_indices, flat_values = _flatten_sparse_tensors(chunk)
                for row, d in zip(outputs[1:], devices[1:]):
                    dev = self._device(d)
                    indices = torch.empty_like(flat_indices, device=dev).copy_(flat_indices)
                    values = torch.empty_like(flat_values, device=dev).copy_(flat_values)
                    row.extend(t.data for t in _unflatten_sparse_tensors((indices, values), chunk))
            else:
                flat = _flatten_dense_tensors(chunk)
                for row, d in zip(outputs[1:], devices[1:]):
                    copy = torch.empty_like(flat, device=self._device(d)).copy_(flat)
                    # fresh tensors with their own version counters (torch's NOTE on *_coalesced)
                    row.extend(t.data for t in _unflatten_dense_tensors(copy, chunk))
        return [outputs[0]] + [list(_reorder_tensors_as(row, tensors)) for row in outputs[1:]]

    # -- reduce
    @emulated("adds the inputs with torch (the last input on the destination first, then the others in order)")
    def reduce_add(self, inputs, destination):
        if not inputs:
            raise RuntimeError("reduce_add expects at least one input")
        size = inputs[0].size()
        root = None
        for i, inp in enumerate(inputs):
            if not self._host_memory and inp.device.type == "cpu":
                raise AssertionError(
                    f"reduce_add expects all inputs to be on {self.device_type} devices, but input {i} is on CPU"
                )
            if self._index_of(inp) == destination:
                root = i
            if inp.size() != size:
                got = "x".join(str(x) for x in inp.size())
                expected = "x".join(str(x) for x in size)
                raise ValueError(f"input {i} has invalid size: got {got}, but expected {expected}")
        if root is None:
            raise RuntimeError("reduce_add expects destination to be on the same device with one of the tensors")
        if len(inputs) == 1:
            return inputs[0]
        dev = self._device(destination)
        others = [t for i, t in enumerate(inputs) if i != root]
        result = inputs[root] + others[0].to(device=dev)
        for other in others[1:]:
            result.add_(other.to(device=dev))
        return result

    @emulated("flattens into buffers, adds them with reduce_add, unflattens")
    def reduce_add_coalesced(self, inputs, destination, buffer_size=_DEFAULT_BUFFER):
        dense: list[list] = [[] for _ in inputs]
        output = []
        ref_order = []
        for per_device in zip(*inputs, strict=True):
            if all(t.is_sparse for t in per_device):
                output.append(self.reduce_add(list(per_device), destination))
                ref_order.append(per_device[0])
            else:
                for coll, t in zip(dense, per_device, strict=True):
                    coll.append(t.to_dense() if t.is_sparse else t)
                ref_order.append(dense[0][-1])
        iterators = [_take_tensors(tensors, buffer_size) for tensors in dense]
        for chunks in zip(*iterators, strict=True):
            flats = [_flatten_dense_tensors(chunk) for chunk in chunks]
            flat_result = self.reduce_add(flats, destination)
            for t in _unflatten_dense_tensors(flat_result, chunks[0]):
                output.append(t.data)
        return tuple(_reorder_tensors_as(output, ref_order))

    # -- scatter / gather
    def _stream_context(self, stream, index: int, i: int):
        import contextlib

        if stream is None:
            return contextlib.nullcontext()
        stream_index = getattr(stream, "device_index", None)
        if stream_index is None:
            stream_index = getattr(getattr(stream, "device", None), "index", None)
        if stream_index is not None and stream_index != index:
            raise RuntimeError(
                f"Expected the device associated with the stream at index {i} (was {stream_index}) "
                f"to match the device supplied at that index (expected {index})"
            )
        return stream if hasattr(stream, "__enter__") else contextlib.nullcontext()

    @emulated("splits with torch and copies each chunk onto its device")
    def scatter(self, tensor, devices, chunk_sizes=None, dim=0, streams=None, out=None):
        if out is not None:
            return self._scatter_out(tensor, out, dim, streams)
        if not devices:
            raise RuntimeError("Expected at least one device to scatter to")
        if chunk_sizes is not None and len(chunk_sizes) != len(devices):
            raise RuntimeError(
                "Expected devices and chunk_sizes to be of same length, but got "
                f"len(devices) = {len(devices)} and len(chunk_sizes) = {len(chunk_sizes)}"
            )
        dim = dim % tensor.dim() if tensor.dim() else dim
        if chunk_sizes is not None:
            total = sum(chunk_sizes)
            if total != tensor.size(dim):
                raise RuntimeError(
                    "given chunk sizes don't sum up to the tensor's size "
                    f"(sum(chunk_sizes) == {total}, but expected {tensor.size(dim)})"
                )
            chunks = list(tensor.split_with_sizes(chunk_sizes, dim))
        else:
            chunks = list(tensor.chunk(len(devices), dim))
        streams = list(streams) if streams is not None else []
        for i, chunk in enumerate(chunks):
            d = devices[i]
            if self._aliases(tensor, d):
                continue  # a view of the input, as in CUDA
            with self._stream_context(streams[i] if i < len(streams) else None, d, i):
                if self._host_memory:
                    chunks[i] = chunk.clone(memory_format=torch.preserve_format)
                else:
                    chunks[i] = chunk.to(self._device(d), memory_format=torch.preserve_format)
        return tuple(chunks)

    def _scatter_out(self, tensor, out, dim, streams):
        if not out:
            raise RuntimeError("Expected at least one output tensor to scatter to")
        dim = dim % tensor.dim() if tensor.dim() else dim
        sizes, total = [], 0
        for i, o in enumerate(out):
            self._check_on_device(o, "output", i)
            same = o.dim() == tensor.dim() and all(
                o.size(k) == tensor.size(k) for k in range(tensor.dim()) if k != dim
            )
            if not same:
                raise RuntimeError(
                    f"Output tensor at index {i} has incorrect shape: {tuple(o.shape)}. Expected same shape "
                    f"except for scatter dim {dim} as the source tensor: {tuple(tensor.shape)}"
                )
            sizes.append(o.size(dim))
            total += o.size(dim)
        if total != tensor.size(dim):
            raise RuntimeError(
                f"Total size for output tensors along scatter dim {dim} does not match the source tensor size "
                f"at dim {dim}. Expected {tensor.size(dim)}, but got total size {total}"
            )
        streams = list(streams) if streams is not None else []
        for i, (o, chunk) in enumerate(zip(out, tensor.split_with_sizes(sizes, dim))):
            with self._stream_context(streams[i] if i < len(streams) else None, self._index_of(o), i):
                o.copy_(chunk)
        return tuple(out)

    @emulated("copies each input into its slice of a new tensor on the destination")
    def gather(self, tensors, dim=0, destination=None, out=None):
        if not tensors:
            raise RuntimeError("Expected at least one tensor to gather from")
        first = tensors[0]
        dim = dim % first.dim() if first.dim() else dim
        expected = list(first.shape)
        total = 0
        for i, t in enumerate(tensors):
            self._check_on_device(t, "input", i)
            if t.dim() != len(expected):
                raise RuntimeError(
                    "Expected all input tensors to have the same number of dimensions, but tensor at index "
                    f"{i} has {t.dim()} dimensions, (expected {len(expected)})"
                )
            expected[dim] = t.size(dim)
            if list(t.shape) != expected:
                raise RuntimeError(f"Input tensor at index {i} has invalid shape {tuple(t.shape)}, but expected {tuple(expected)}")
            total += t.size(dim)
        expected[dim] = total
        if out is not None:
            if list(out.shape) != expected:
                raise RuntimeError(f"Expected out tensor to have shape {tuple(expected)}, but got {tuple(out.shape)}")
            result = out
        else:
            channels_last = (first.dim() == 4 and first.is_contiguous(memory_format=torch.channels_last)
                             and not first.is_contiguous())
            fmt = torch.channels_last if channels_last else torch.contiguous_format
            result = torch.empty(expected, dtype=first.dtype, device=self._device(destination), memory_format=fmt)
        start = 0
        for t in tensors:
            result.narrow(dim, start, t.size(dim)).copy_(t)
            start += t.size(dim)
        return result


class NativeCUDAComm(CollectiveOps):
    """Pass-through to ``torch.cuda.comm`` (NCCL where it can), for the CUDA plugin.

    Devices arrive as resolved ``int`` indices; ``-1`` (host) becomes ``"cpu"``.
    """

    device_type: ClassVar[str] = "cuda"

    @staticmethod
    def _torch_comm():
        import torch.nn.parallel.comm as comm  # torch's own module, never the translated torch.cuda.comm

        return comm

    @native("torch.cuda.comm.broadcast")
    def broadcast(self, tensor, devices, out=None):
        return self._torch_comm().broadcast(tensor, devices, out=out)

    @native("torch.cuda.comm.broadcast_coalesced")
    def broadcast_coalesced(self, tensors, devices, buffer_size=_DEFAULT_BUFFER):
        return self._torch_comm().broadcast_coalesced(tensors, devices, buffer_size)

    @native("torch.cuda.comm.reduce_add")
    def reduce_add(self, inputs, destination):
        return self._torch_comm().reduce_add(inputs, destination)

    @native("torch.cuda.comm.reduce_add_coalesced")
    def reduce_add_coalesced(self, inputs, destination, buffer_size=_DEFAULT_BUFFER):
        return self._torch_comm().reduce_add_coalesced(inputs, destination, buffer_size)

    @native("torch.cuda.comm.scatter")
    def scatter(self, tensor, devices, chunk_sizes=None, dim=0, streams=None, out=None):
        if out is not None:
            return self._torch_comm().scatter(tensor, dim=dim, streams=streams, out=out)
        return self._torch_comm().scatter(tensor, devices, chunk_sizes, dim, streams)

    @native("torch.cuda.comm.gather")
    def gather(self, tensors, dim=0, destination=None, out=None):
        if out is not None:
            return self._torch_comm().gather(tensors, dim, out=out)
        return self._torch_comm().gather(tensors, dim, "cpu" if destination == HOST else destination)
