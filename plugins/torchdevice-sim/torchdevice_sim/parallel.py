"""``nn.DataParallel`` natively on sim: the C functions ``torch.nn.parallel.comm`` calls.

DataParallel scatters its inputs, replicates the module (``broadcast_coalesced``) and gathers the
outputs through ``torch.nn.parallel.comm``, which calls ``torch._C._scatter``, ``_gather``,
``_broadcast_coalesced`` ...: C functions of CUDA builds only (a CPU build has none; a CUDA build's
take CUDA tensors only). Where torch has none, :func:`register` provides them for sim's devices, as a
vendor's extension does for its own, with :class:`torchdevice.collectives.DeviceComm` (copies
queued on the devices' streams, sums with ``add``). A CUDA build keeps its own, and DataParallel over
sim runs translated only there (translation routes ``torch.nn.parallel.comm`` itself:
``torchdevice.namespaces.install``).
"""
from __future__ import annotations

from typing import Any

import torch

from torchdevice.collectives import DeviceComm

from .runtime import DEVICE_TYPE


class SimComm(DeviceComm):
    device_type = DEVICE_TYPE


def register() -> None:
    """Give ``torch._C`` the functions ``torch.nn.parallel.comm`` calls, where it has none (CPU builds)."""
    comm = SimComm(DEVICE_TYPE)
    functions = {
        "_broadcast": lambda tensor, devices: comm.broadcast(tensor, list(devices)),
        "_broadcast_out": lambda tensor, out: comm.broadcast(tensor, None, list(out)),
        "_broadcast_coalesced": lambda tensors, devices, buffer_size: comm.broadcast_coalesced(
            list(tensors), list(devices), buffer_size),
        "_scatter": lambda tensor, devices, chunk_sizes, dim, streams: comm.scatter(
            tensor, list(devices), None if chunk_sizes is None else list(chunk_sizes), dim, streams),
        "_scatter_out": lambda tensor, out, dim, streams: comm.scatter(tensor, None, None, dim, streams, list(out)),
        "_gather": lambda tensors, dim, destination: comm.gather(list(tensors), dim, destination),
        "_gather_out": lambda tensors, out, dim: comm.gather(list(tensors), dim, None, out),
    }
    for name, function in functions.items():
        if not hasattr(torch._C, name):
            setattr(torch._C, name, _named(function, name))


def _named(function: Any, name: str) -> Any:
    function.__name__ = function.__qualname__ = name
    function.__module__ = __name__
    return function
