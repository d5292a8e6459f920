"""The collectives family's two implementations (:class:`~torchdevice.backend.CollectiveOps`).

* :class:`DeviceComm` implements ``torch.cuda.comm``'s six functions with torch
  operations on the backend's device type (copies with ``Tensor.copy_``, sums
  with ``add``); the CPU backend and the MPS/XPU/MTIA/MLX plugins use it;
* :class:`NativeCUDAComm` passes through to ``torch.cuda.comm`` (NCCL when it
  can) for the CUDA plugin.

Backends build on these; neither touches the router. The user-facing
``torch.cuda.comm`` functions, which resolve device arguments against the
active backend and call these, are in :mod:`torchdevice.namespaces.comm`. The aliasing rules are
described there.
"""
from __future__ import annotations

import types
from typing import Any, ClassVar, ContextManager, cast

import torch
from torch._utils import (
    _flatten_dense_tensors,
    _flatten_sparse_tensors,
    _reorder_tensors_as,
    _take_tensors,
    _unflatten_dense_tensors,
    _unflatten_sparse_tensors,
)

from .backend import CollectiveOps, emulated, native
from .vocabulary import RealDevice as _Device

__all__ = ["DeviceComm", "NativeCUDAComm", "HOST"]

HOST = -1  #: destination index meaning host memory (``gather(..., destination=-1 or "cpu")``)

_DEFAULT_BUFFER = 10485760


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

    def _device(self, index: int | None) -> torch.device:
        if index == HOST or self.device_type == "cpu":
            return _Device("cpu")
        return _Device(self.device_type) if index is None else _Device(self.device_type, index)

    def _index_of(self, tensor: torch.Tensor) -> int | None:
        """The backend device index ``tensor`` lives on; None for a tensor elsewhere (host memory)."""
        dev = tensor.device
        if dev.type != self.device_type:
            return None
        return 0 if dev.index is None else dev.index

    def _aliases(self, tensor: torch.Tensor, index: int) -> bool:
        """Whether CUDA would return ``tensor`` itself for an output on device ``index``."""
        return not self._host_memory and self._index_of(tensor) == index

    def _check_on_device(self, tensor: torch.Tensor, what: str, i: int) -> None:
        if tensor.device.type != self.device_type:
            raise RuntimeError(
                f"Expected all {what} tensors to be on torchdevice backend {self.backend!r} "
                f"(device type {self.device_type!r}), but {what} tensor at index {i} has device '{tensor.device}'"
            )

    # -- broadcast
    @emulated("copies with Tensor.copy_ onto each listed device")
    def broadcast(self, tensor: torch.Tensor, devices: list[int] | None,
                  out: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
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
        for d in cast("list[int]", devices):  # given when out is not
            if self._aliases(tensor, d):
                results.append(tensor)
            else:
                results.append(torch.empty_like(tensor, device=self._device(d)).copy_(tensor))
        return results

    @emulated("flattens into buffers of buffer_size bytes, copies them to each device, unflattens")
    def broadcast_coalesced(self, tensors: list[torch.Tensor], devices: list[int],
                            buffer_size: int = _DEFAULT_BUFFER) -> list[list[torch.Tensor]]:
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
    def reduce_add(self, inputs: list[torch.Tensor], destination: int) -> torch.Tensor:
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
    def reduce_add_coalesced(self, inputs: list[list[torch.Tensor]], destination: int,
                             buffer_size: int = _DEFAULT_BUFFER) -> tuple[torch.Tensor, ...]:
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
    def _stream_context(self, stream: Any, index: int | None, i: int) -> ContextManager[object]:
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
    def scatter(self, tensor: torch.Tensor, devices: list[int] | None, chunk_sizes: list[int] | None = None,
                dim: int = 0, streams: list[Any] | None = None,
                out: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
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

    def _scatter_out(self, tensor: torch.Tensor, out: list[torch.Tensor], dim: int,
                     streams: list[Any] | None) -> tuple[torch.Tensor, ...]:
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
    def gather(self, tensors: list[torch.Tensor], dim: int = 0, destination: int | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
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
    def _torch_comm() -> types.ModuleType:
        import torch.nn.parallel.comm as comm  # torch's own module, never the translated torch.cuda.comm

        return comm

    @native("torch.cuda.comm.broadcast")
    def broadcast(self, tensor: torch.Tensor, devices: list[int] | None,
                  out: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        return self._torch_comm().broadcast(tensor, devices, out=out)

    @native("torch.cuda.comm.broadcast_coalesced")
    def broadcast_coalesced(self, tensors: list[torch.Tensor], devices: list[int],
                            buffer_size: int = _DEFAULT_BUFFER) -> list[list[torch.Tensor]]:
        return self._torch_comm().broadcast_coalesced(tensors, devices, buffer_size)

    @native("torch.cuda.comm.reduce_add")
    def reduce_add(self, inputs: list[torch.Tensor], destination: int) -> torch.Tensor:
        return self._torch_comm().reduce_add(inputs, destination)

    @native("torch.cuda.comm.reduce_add_coalesced")
    def reduce_add_coalesced(self, inputs: list[list[torch.Tensor]], destination: int,
                             buffer_size: int = _DEFAULT_BUFFER) -> tuple[torch.Tensor, ...]:
        return self._torch_comm().reduce_add_coalesced(inputs, destination, buffer_size)

    @native("torch.cuda.comm.scatter")
    def scatter(self, tensor: torch.Tensor, devices: list[int] | None, chunk_sizes: list[int] | None = None,
                dim: int = 0, streams: list[Any] | None = None,
                out: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
        if out is not None:
            return self._torch_comm().scatter(tensor, dim=dim, streams=streams, out=out)
        return self._torch_comm().scatter(tensor, devices, chunk_sizes, dim, streams)

    @native("torch.cuda.comm.gather")
    def gather(self, tensors: list[torch.Tensor], dim: int = 0, destination: int | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
        if out is not None:
            return self._torch_comm().gather(tensors, dim, out=out)
        return self._torch_comm().gather(tensors, dim, "cpu" if destination == HOST else destination)
