"""``torch.distributed`` for code written for NCCL, on the active backend's engine.

Installed by :func:`torchdevice.translate.patch` (``install(patcher, target)``).
The engine is asked of the active backend
(``torchdevice.router.active().collectives.dist_backend``: ``"gloo"`` for the
CPU, MPS and MLX backends, ``"nccl"`` for CUDA, ``"xccl"`` for XPU); nothing
here maps backends to engines by name.

What changes while translating (everything else is torch's own code, running
on the real engine):

* ``init_process_group("nccl")``, ``backend=None``, ``"cuda:nccl"`` and
  ``"cpu:gloo,cuda:nccl"`` strings, and ``device_id=torch.device("cuda", i)``
  (or an int) create the process group on the active backend's engine. An
  engine is *foreign* when torch names it the default of a source device type
  (``cuda`` → nccl, ``xpu`` → xccl) and it cannot carry the target's tensors
  (``Backend.backend_capability``); foreign engines are replaced by the
  active engine, other names (``"gloo"``, ``"mpi"``, custom ones) are kept.
  A ``device_id`` index beyond the device count raises
  :class:`~torchdevice.errors.InvalidDeviceError`; on a ``cpu`` target the
  device id is dropped (torch accepts only accelerator device ids).
* ``new_group``, ``new_subgroups``, ``new_subgroups_by_enumeration``,
  ``split_group`` and ``init_device_mesh`` get the same mapping of their
  ``backend``/``device_type`` arguments.
* ``DistributedDataParallel(model, device_ids=[local_rank])``: the ids are
  checked against the device count; on a ``cpu`` target they become ``None``
  (with ``output_device``), as DDP requires for CPU modules.
* ``dist.get_backend()`` needs nothing: the group *is* a gloo group and says so.
* ``broadcast``: torch asks ``torch.cuda.get_device_capability`` of tensors
  reporting ``is_cuda``; translated tensors get there under a class answering
  ``is_cuda`` False (same storage), see :func:`_wrap_broadcast`.
* ``is_nccl_available()`` / ``is_xccl_available()`` / ``is_backend_available``
  answer True for a foreign engine that translation carries, when it is the
  engine of the source family (nccl for ``cuda``, the default; xccl for
  ``xpu``; see :func:`torchdevice.translate.patch`) and ``is_available()`` is
  reported True (``report_available``), so programs take their NCCL path.

What differs from NCCL on gloo (measured on torch 2.13, CPU, 2 processes):

* emulated here, with NCCL's results: ``all_gather`` with uneven sizes (padded
  to the largest, then trimmed); ``all_gather_into_tensor`` with the stacked
  ``(world_size, *shape)`` output and ``reduce_scatter_tensor`` with the stacked
  input (reshaped to the concatenated form, no copy); ``all_to_all`` with
  uneven sizes (through ``all_to_all_single`` with split sizes);
  ``split_group`` of the default group (through ``new_subgroups_by_enumeration``);
* lowered here (:mod:`.reduce_ops`), on every engine but NCCL: ``ReduceOp.PREMUL_SUM(f)``
  (gloo raises "Cannot use ReduceOp.PREMUL_SUM with Gloo") becomes a multiply by ``f`` and
  ``SUM`` for ``all_reduce``, ``all_reduce_coalesced``, ``reduce_scatter_single`` (and its
  alias ``reduce_scatter_tensor``), ``reduce_scatter`` and their coalesced forms; ``reduce`` raises ``UnsupportedError``;
* not available: float8 tensors ("Invalid scalar type");
* gloo has what NCCL lacks: ``monitored_barrier``;
* timing: gloo runs collectives on CPU threads and ``async_op`` work completes
  on them, not on a device stream; the default timeout is torch's for gloo
  (30 min) rather than NCCL's (10 min).

``ReduceOp.AVG``, ``reduce_scatter_tensor``, ``reduce_scatter``, ``all_to_all_single``
(with splits), ``batch_isend_irecv``, the ``*_object`` collectives and
``barrier(device_ids=...)`` work natively on gloo in torch 2.13.

:func:`status` gives ``(Status, note)`` for every ``torch.distributed``
function of the catalog, derived from the active backend's engine.

Modules: ``reduce_ops`` (PREMUL_SUM lowered), ``statuses`` (the catalog, the engines' differences, :func:`status`),
``arguments`` (``backend``/``device_id`` translation and the state the wrappers
read), ``wrappers`` (the replaced functions), ``install``.
"""
from __future__ import annotations

from .arguments import _state, map_backend, map_device_id
from .install import install, uninstall
from .statuses import (
    CATALOG,
    ENGINE_NOTES,
    ENV_LOCAL_WORLD_SIZE,
    SOURCE_TYPES,
    _foreign_engines,
    engine,
    local_world_size,
    status,
)
