"""Collectives for sim tensors: the ``simccl`` process-group backend, staged through gloo.

sim memory is host memory, so sim's "collective library" is gloo run on host views of the
device memory (``_C.host_view``: CPU tensors over the same bytes, no copies), the way NCCL
reads and writes device memory directly. Ordering is kept the simple, strict way:

* before a collective the sim devices of its tensors are synchronized (every stream), so gloo
  reads what the program queued before the call;
* the collective is waited for before the call returns, so work the program queues next sees
  its results. ``async_op=True`` therefore returns a Work that is already complete.
* ``send`` hands gloo a host copy of the tensor and returns gloo's pending Work (a blocking send
  would deadlock two ranks exchanging with ``isend``/``irecv``); ``recv`` writes into the sim
  memory when gloo receives: wait for its Work before using the tensor, as with NCCL.

CPU tensors go to gloo as they are, so one ``simccl`` group serves a program's CPU
collectives (object collectives, ``barrier``) too. Registered with torch as the backend for
device type ``sim`` (``init_process_group("simccl")``, ``backend=None`` on a sim program,
``"cpu:gloo,sim:simccl"``); :func:`register` is called by :func:`torchdevice_sim.load`.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions  # not re-exported by torch.distributed

from . import runtime

_C10D: Any = torch._C._distributed_c10d if dist.is_available() else None
_Base: Any = dist.ProcessGroup if dist.is_available() else object  # torch builds without distributed have no groups

NAME = "simccl"
DEVICES = ["sim", "cpu"]  # CPU tensors pass straight to gloo


def register() -> None:
    """Register ``simccl`` with torch.distributed for device types sim and cpu; idempotent."""
    if not dist.is_available() or NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(NAME, _create, extended_api=False, devices=DEVICES)


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> SimProcessGroup:
    """torch's creator signature for a plain (non extended_api) backend."""
    return SimProcessGroup(store, rank, size, timeout)


def _host(value: Any, devices: set[int]) -> Any:
    """``value`` (a tensor or nested lists of them) with sim tensors as host views; their devices go to ``devices``."""
    if isinstance(value, (list, tuple)):
        return [_host(v, devices) for v in value]
    if not isinstance(value, torch.Tensor) or value.device.type == "cpu":
        return value
    if value.device.type != runtime.DEVICE_TYPE:
        raise ValueError(f"{NAME} carries sim and cpu tensors, not {value.device} tensors: "
                         f"move them to sim, or use that device's own backend")
    devices.add(value.device.index)
    return runtime._C.host_view(value)


def staged(*values: Any) -> list[Any]:
    """``values`` as host views, after waiting for everything queued on the sim devices they live on."""
    devices: set[int] = set()
    views = [_host(v, devices) for v in values]
    for index in sorted(devices):
        runtime._C.synchronize(index)
    return views


def _done(result: Any) -> Any:
    """A completed Work whose future holds ``result`` (what DDP's reducer reads)."""
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(result)
    return _C10D._create_work_from_future(future)


class SimProcessGroup(_Base):  # type: ignore[misc,valid-type]
    """A Python process group (torch's ``ProcessGroup`` trampoline) over a gloo backend on the same store."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        # Any: torch's stubs declare send, recv, recv_anysource and monitored_barrier on ProcessGroup only, where
        # ProcessGroupGloo (a Backend) has them too
        self.gloo: Any = dist.ProcessGroupGloo(store, rank, size, timeout)
        for device in DEVICES:  # what torch asks of a group bound to a device (init_process_group(device_id=...))
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, self.gloo)

    def getBackendName(self) -> str:  # noqa: N802 - the C++ virtual's name
        return NAME

    def _blocking(self, method: str, result: Any, *args: Any) -> Any:
        """Run gloo's ``method`` on host views of ``args`` to completion; a completed Work holding ``result``."""
        getattr(self.gloo, method)(*staged(*args)).wait()  # staged() leaves options and numbers as they are
        return _done(result)

    # -- collectives: the names torch.distributed (and DDP's C++ reducer) call on a process group --
    def allreduce(self, tensors: list, opts: Any = None) -> Any:
        return self._blocking("allreduce", tensors, tensors, opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors: list, opts: Any = None) -> Any:
        return self._blocking("allreduce_coalesced", tensors, tensors, opts or dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors: list, opts: Any = None) -> Any:
        return self._blocking("broadcast", tensors, tensors, opts or dist.BroadcastOptions())

    def reduce(self, tensors: list, opts: Any = None) -> Any:
        return self._blocking("reduce", tensors, tensors, opts or dist.ReduceOptions())

    def allgather(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        return self._blocking("allgather", outputs, outputs, inputs, opts or AllgatherOptions())

    def allgather_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        return self._blocking("allgather_coalesced", outputs, outputs, inputs, opts or AllgatherOptions())

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self._blocking("_allgather_base", [output], output, input, opts or AllgatherOptions())

    def all_gather_single_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        for output, input in zip(outputs, inputs):  # gloo has no coalesced form: one after another
            self.all_gather_single(output, input, opts)
        return _done(outputs)

    def gather(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        return self._blocking("gather", outputs, outputs, inputs, opts or dist.GatherOptions())

    def scatter(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        return self._blocking("scatter", outputs, outputs, inputs, opts or dist.ScatterOptions())

    def reduce_scatter(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        return self._blocking("reduce_scatter", outputs, outputs, inputs, opts or dist.ReduceScatterOptions())

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self._blocking("_reduce_scatter_base", [output], output, input, opts or dist.ReduceScatterOptions())

    def reduce_scatter_single_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        for output, input in zip(outputs, inputs):
            self.reduce_scatter_single(output, input, opts)
        return _done(outputs)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_splits: list, input_splits: list,
                          opts: Any = None) -> Any:
        return self._blocking("alltoall_base", [output], output, input, list(output_splits), list(input_splits),
                              opts or dist.AllToAllOptions())

    def alltoall(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        """gloo has only the single-tensor form: through it, with one split per tensor (uneven sizes included)."""
        flat_in = torch.cat([t.reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=flat_in.dtype, device=flat_in.device)
        self.all_to_all_single(flat_out, flat_in, [t.numel() for t in outputs], [t.numel() for t in inputs], opts)
        for output, part in zip(outputs, flat_out.split([t.numel() for t in outputs])):
            output.copy_(part.view(output.shape))
        return _done(outputs)

    def barrier(self, opts: Any = None) -> Any:
        return self._blocking("barrier", [], opts or dist.BarrierOptions())

    def monitored_barrier(self, timeout: timedelta | None = None, wait_all_ranks: bool = False) -> None:
        if timeout is None:
            return self.gloo.monitored_barrier(wait_all_ranks=wait_all_ranks)
        return self.gloo.monitored_barrier(timeout, wait_all_ranks)

    # -- point to point (module docstring: send owns a host copy, recv completes on wait) ----------
    def send(self, tensors: list, dst: int, tag: int = 0) -> Any:
        copies = [view.clone() for view in staged(tensors)[0]]
        return self.gloo.send(copies, dst, tag)

    def recv(self, tensors: list, src: int, tag: int = 0) -> Any:
        return self.gloo.recv(staged(tensors)[0], src, tag)

    def recv_anysource(self, tensors: list, tag: int = 0) -> Any:
        return self.gloo.recv_anysource(staged(tensors)[0], tag)

    # the older names of the single-tensor forms, which some torch versions and callers use
    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single
    alltoall_base = all_to_all_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
