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
* not available: ``ReduceOp.PREMUL_SUM`` (raises "Cannot use
  ReduceOp.PREMUL_SUM with Gloo") and float8 tensors ("Invalid scalar type");
* gloo has what NCCL lacks: ``monitored_barrier``;
* timing: gloo runs collectives on CPU threads and ``async_op`` work completes
  on them, not on a device stream; the default timeout is torch's for gloo
  (30 min) rather than NCCL's (10 min).

``ReduceOp.AVG``, ``reduce_scatter_tensor``, ``reduce_scatter``, ``all_to_all_single``
(with splits), ``batch_isend_irecv``, the ``*_object`` collectives and
``barrier(device_ids=...)`` work natively on gloo in torch 2.13.

:func:`status` gives ``(Status, note)`` for every ``torch.distributed``
function of the catalog, derived from the active backend's engine.
"""
from __future__ import annotations

import functools
import inspect
import os

import torch

from . import router
from .backend import Status
from .errors import InvalidDeviceError, UnsupportedError
from .vocabulary import SOURCE_FAMILIES

#: Device types whose code torchdevice translates (torchdevice.translate.SOURCE_TYPES).
SOURCE_TYPES = SOURCE_FAMILIES

_Device = type(torch.empty(0).device)  # the real class, even while torch.device is a stand-in

#: The ``torch.distributed`` functions of the seed catalog, all of which :func:`status` answers for.
CATALOG = (
    "all_gather", "all_gather_coalesced", "all_gather_into_tensor", "all_gather_object",
    "all_reduce", "all_reduce_coalesced", "all_to_all", "all_to_all_single", "barrier",
    "batch_isend_irecv", "breakpoint", "broadcast", "broadcast_object_list",
    "destroy_process_group", "gather", "gather_object", "get_backend", "get_backend_config",
    "get_default_backend_for_device", "get_global_rank", "get_group_rank", "get_node_local_rank",
    "get_pg_count", "get_process_group_ranks", "get_rank", "get_world_size", "init_device_mesh",
    "init_process_group", "irecv", "is_available", "is_backend_available", "is_gloo_available",
    "is_initialized", "is_mpi_available", "is_nccl_available", "is_torchelastic_launched",
    "is_ucc_available", "is_xccl_available", "isend", "monitored_barrier", "new_group",
    "new_subgroups", "new_subgroups_by_enumeration", "recv", "recv_object_list", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "register_rendezvous_handler", "rendezvous",
    "scatter", "scatter_object_list", "send", "send_object_list", "split_group", "supports_complex",
)

# Functions that do not depend on the engine: helpers, queries, rendezvous.
_LOCAL = {
    "breakpoint": "torch's own; all ranks wait on a barrier of the engine",
    "destroy_process_group": "torch's own",
    "get_backend": "reports the real engine of the group (e.g. 'gloo'), not the name the program asked for",
    "get_backend_config": "reports the real device:engine pairs (e.g. 'cpu:gloo,cuda:gloo')",
    "get_global_rank": "torch's own", "get_group_rank": "torch's own",
    "get_node_local_rank": "torch's own (LOCAL_RANK)", "get_pg_count": "torch's own",
    "get_process_group_ranks": "torch's own", "get_rank": "torch's own", "get_world_size": "torch's own",
    "is_available": "torch's own", "is_gloo_available": "torch's own", "is_initialized": "torch's own",
    "is_mpi_available": "torch's own", "is_torchelastic_launched": "torch's own (TORCHELASTIC_RUN_ID)",
    "is_ucc_available": "torch's own", "register_rendezvous_handler": "torch's own",
    "rendezvous": "torch's own (env://, tcp://, file://)", "supports_complex": "torch's own",
}

_COLLECTIVES = (
    "all_gather", "all_gather_coalesced", "all_gather_into_tensor", "all_gather_object", "all_reduce",
    "all_reduce_coalesced", "all_to_all", "all_to_all_single", "barrier", "batch_isend_irecv", "broadcast",
    "broadcast_object_list", "gather", "gather_object", "irecv", "isend", "monitored_barrier", "recv",
    "recv_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
    "scatter_object_list", "send", "send_object_list", "split_group",
)

#: What each engine does differently from torch's generic contract, per function: (Status, note).
#: gloo's entries were measured on torch 2.13 (CPU build, 2 processes on 127.0.0.1); functions
#: not listed run natively on the engine.
ENGINE_NOTES: dict[str, dict[str, tuple[Status, str]]] = {
    "gloo": {
        "all_gather": (Status.NATIVE, "gloo; uneven sizes (NCCL-only) emulated by padding to the largest and trimming"),
        "all_gather_into_tensor": (
            Status.NATIVE, "gloo; the stacked (world_size, *shape) output is reshaped to the concatenated form (no copy)"),
        "reduce_scatter_tensor": (
            Status.NATIVE, "gloo; the stacked (world_size, *shape) input is reshaped to the concatenated form (no copy)"),
        "all_to_all": (Status.NATIVE, "gloo; uneven sizes emulated through all_to_all_single with split sizes"),
        "all_reduce": (Status.NATIVE, "gloo (SUM/PRODUCT/MIN/MAX/AVG/BAND/BOR/BXOR); ReduceOp.PREMUL_SUM and float8 dtypes raise"),
        "barrier": (Status.NATIVE, "gloo; device_ids accepted and not needed"),
        "monitored_barrier": (Status.NATIVE, "gloo (NCCL has no monitored_barrier)"),
        "split_group": (
            Status.EMULATED,
            "gloo cannot split groups: split_group of the default group is new_subgroups_by_enumeration; "
            "other parents raise UnsupportedError"),
    },
    "nccl": {
        "monitored_barrier": (Status.UNSUPPORTED, "torch implements monitored_barrier for gloo only; use barrier"),
    },
}
_MEASURED = {"gloo", "nccl"}

ENV_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"

#: the source family whose programs ask for a foreign engine (``is_nccl_available`` is a cuda question)
_ENGINE_SOURCE = {"nccl": "cuda", "xccl": "xpu"}


# -- queries -------------------------------------------------------------------------------


def engine() -> str | None:
    """The ``torch.distributed`` engine of the active backend (``None``: it has none)."""
    return router.active().collectives.dist_backend


def local_world_size() -> int | None:
    """How many processes a launcher started on this node (torchrun's ``LOCAL_WORLD_SIZE``), or None.

    A backend whose tensors live in host memory (``cpu``, MLX) serves every
    local process from the same device; a launcher starting N processes there
    expects each to address its own device ``cuda:LOCAL_RANK``.
    """
    raw = os.environ.get(ENV_LOCAL_WORLD_SIZE, "").strip()
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value > 0 else None


def _foreign_engines(device_type: str, sources) -> set[str]:
    """Engines torch gives source device types that can carry neither ``device_type`` nor CPU tensors.

    ``nccl`` (cuda only) and ``xccl`` (xpu only) are foreign on a cpu target;
    ``gloo`` never is: programs ask for it for their CPU tensors.
    """
    import torch.distributed as dist

    defaults = dist.Backend.default_device_backend_map
    capability = dist.Backend.backend_capability
    foreign = set()
    for source in sources:
        name = defaults.get(source)
        if not name:
            continue
        carries = capability.get(name, ())
        if device_type not in carries and "cpu" not in carries:
            foreign.add(name)
    return foreign


def status(name: str) -> tuple[Status, str]:
    """``(Status, note)`` of ``torch.distributed.<name>`` on the active backend's engine.

    Accepts ``"all_reduce"`` or ``"torch.distributed.all_reduce"``; every name in
    :data:`CATALOG` is answered. Example::

        >>> torchdevice.distributed.status("init_process_group")
        (<Status.TRANSLATED: 'translated'>, "'nccl', 'xccl' -> 'gloo' (the engine of backend 'cpu') ...")
    """
    short = name.rsplit(".", 1)[-1]
    if short not in CATALOG:
        raise KeyError(f"{name!r} is not a torch.distributed function of the catalog")
    active = router.active()
    eng = active.collectives.dist_backend
    device_type = active.device_type
    sources = [s for s in SOURCE_TYPES if s != device_type]
    foreign = sorted(_foreign_engines(device_type, sources))
    if short in _LOCAL:
        return Status.NATIVE, _LOCAL[short]
    if eng is None:
        return Status.UNSUPPORTED, (
            f"backend {active.name!r} declares no torch.distributed engine (collectives().dist_backend is None)"
        )
    mapped = ", ".join(repr(f) for f in foreign)
    if short in ("init_process_group", "new_group", "new_subgroups", "new_subgroups_by_enumeration"):
        if "nccl" in foreign:
            return Status.TRANSLATED, (
                f"{mapped} -> {eng!r} (the engine of backend {active.name!r}); device_id mapped, "
                "dropped on a cpu target"
            )
        return Status.NATIVE, f"{eng!r}" + (f"; {mapped} -> {eng!r}" if foreign else "")
    if short == "init_device_mesh":
        if "cuda" in sources:
            return Status.TRANSLATED, f"device_type 'cuda' -> {device_type!r}, meshes on {eng!r}"
        return Status.NATIVE, f"{eng!r}"
    if short == "get_default_backend_for_device":
        if "cuda" in sources:
            return Status.TRANSLATED, f"source devices are translated first: 'cuda' -> {device_type!r}"
        return Status.NATIVE, "torch's own"
    if short in ("is_nccl_available", "is_xccl_available", "is_backend_available"):
        wanted = {"is_nccl_available": "nccl", "is_xccl_available": "xccl"}.get(short)
        if wanted is None and foreign:
            return Status.TRANSLATED, (
                f"True for {mapped} when it is the source family's engine (nccl for cuda, the default; xccl for "
                f"xpu) and is_available() is reported True (it runs on {eng!r}); torch's own answer otherwise"
            )
        if wanted in foreign:
            return Status.TRANSLATED, (
                f"True while translating {_ENGINE_SOURCE.get(wanted, wanted)}-family code (the source family) with "
                f"is_available() reported True: {wanted!r} runs on {eng!r}; torch's own answer otherwise"
            )
        return Status.NATIVE, "torch's own"
    notes = ENGINE_NOTES.get(eng, {})
    if short in notes:
        return notes[short]
    if short == "split_group":
        return Status.NATIVE, f"{eng!r}"
    measured = "" if eng in _MEASURED else " (not measured by torchdevice)"
    return Status.NATIVE, f"{eng!r}{measured}"


# -- argument translation -----------------------------------------------------------------------


class _State:
    """What the wrappers read: fixed at install time."""

    target = None
    engine: str | None = None
    backend_name: str = ""
    foreign: frozenset = frozenset()
    #: the foreign engine of the source family (nccl for cuda): what is_*_available() claims
    claimed: frozenset = frozenset()


_state = _State()


def _engine_for(name: str, what: str) -> str:
    """The engine to use for engine ``name`` (lower case) requested by the program."""
    if name not in _state.foreign:
        return name
    if _state.engine is None:
        raise UnsupportedError(
            f"{what} with backend {name!r}",
            _state.backend_name,
            "this backend declares no torch.distributed engine; run the collectives on a backend that has one "
            "(TORCHDEVICE_BACKEND=cpu uses gloo)",
        )
    return _state.engine


def _engine_string(eng: str) -> str:
    """``eng`` as a backend argument: ``"gloo"``, or ``"cpu:gloo,mps:gloo"`` where torch does not
    list the target's device type among the engine's (gloo and mps in torch 2.13)."""
    import torch.distributed as dist

    device_type = _state.target.device_type
    capability = dist.Backend.backend_capability.get(eng)
    if capability is None or device_type in capability:
        return eng
    pairs = [f"{device_type}:{eng}"]
    if device_type != "cpu" and "cpu" in capability:
        pairs.insert(0, f"cpu:{eng}")
    return ",".join(pairs)


def map_backend(backend, device_id=None, what: str = "init_process_group"):
    """Translate a ``backend`` argument (None, ``"nccl"``, ``"cuda:nccl,cpu:gloo"``) for the target."""
    import torch.distributed as dist

    target = _state.target
    if backend is None or str(backend).lower() == "undefined":
        if _state.engine is None:
            return backend
        if device_id is None:
            # torch's own choice: the default engine of the accelerator it sees
            seen = torch._C._get_accelerator().type
            if seen == target.device_type and dist.Backend.default_device_backend_map.get(seen) == _state.engine:
                return backend
        return _engine_string(_state.engine)
    text = str(backend).lower()
    if ":" not in text:
        mapped = _engine_for(text, what)
        return backend if mapped == text else _engine_string(mapped)
    result: dict[str, str] = {}
    for pair in text.split(","):
        parts = pair.split(":")
        if len(parts) != 2:
            return backend  # malformed: torch explains the format
        device, eng = parts[0].strip(), parts[1].strip()
        new_device = target.device_type if device in target.sources else device
        new_eng = _engine_for(eng, what)
        if new_device in result and result[new_device] != new_eng:
            if device == new_device:  # the program's own entry for that device type wins
                result[new_device] = new_eng
            continue
        result[new_device] = new_eng
    return ",".join(f"{d}:{e}" for d, e in result.items())


def _check_index(index: int) -> None:
    target = _state.target
    if not 0 <= index < target.device_count:
        raise InvalidDeviceError(index, target.device_count, target.backend)


def map_device_id(device_id):
    """Translate ``init_process_group``/``new_group``'s ``device_id`` for the target (None on a cpu target)."""
    target = _state.target
    if device_id is None:
        return None
    if isinstance(device_id, bool):
        return device_id
    if isinstance(device_id, int):
        index = device_id
        if index < 0:
            return device_id  # torch explains
    elif hasattr(device_id, "type") and hasattr(device_id, "index"):
        if device_id.type == target.device_type:
            return device_id if target.indexed else None
        if device_id.type not in target.sources:
            return device_id
        index = device_id.index
        if index is None:
            raise ValueError("Please use a device_id with index.")
    else:
        return device_id
    _check_index(index)
    return _Device(target.device_type, index) if target.indexed else None


def _ddp_index(device):
    """DDP's device_ids/output_device entry -> checked int index (or the entry, if not ours)."""
    target = _state.target
    if isinstance(device, bool):
        return device
    if isinstance(device, int):
        _check_index(device)
        return device
    if isinstance(device, str):
        device = _Device(device)
    if hasattr(device, "type") and hasattr(device, "index"):
        if device.type in target.sources or device.type == target.device_type:
            index = device.index
            if index is None:
                if device.type == "cpu":
                    return 0
                return router.active().streams.current_device()
            _check_index(index)
            return index
    return device


# -- wrappers --------------------------------------------------------------------------------


def _wrap_group_factory(orig, what: str, *, has_device_id: bool = False):
    """init_process_group / new_group / new_subgroups*: map ``backend`` (and ``device_id``)."""
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        arguments = bound.arguments
        device_id = arguments.get("device_id")
        if has_device_id and device_id is not None:
            arguments["device_id"] = device_id = map_device_id(device_id)
        if "backend" in sig.parameters:
            arguments["backend"] = map_backend(arguments.get("backend"), device_id, what)
        return orig(*bound.args, **bound.kwargs)

    wrapper.__torchdevice_wrapped__ = orig
    return wrapper


def _done_work():
    from torch._C._distributed_c10d import _create_work_from_future

    future = torch.futures.Future()
    future.set_result(None)
    return _create_work_from_future(future)


def _real(t):
    return torch.view_as_real(t) if t.is_complex() else t


def _wrap_all_gather(orig):
    import torch.distributed as dist

    @functools.wraps(orig)
    def all_gather(tensor_list, tensor, group=None, async_op=False):
        if (
            not tensor_list
            or all(t.shape == tensor.shape for t in tensor_list)
            or dist.distributed_c10d._rank_not_in_group(group)
        ):
            return orig(tensor_list, tensor, group, async_op)
        world = dist.get_world_size(group)
        rank = dist.get_rank(group)
        outs = [_real(t) for t in tensor_list]
        inp = _real(tensor)
        if (
            len(outs) != world
            or outs[rank].numel() != inp.numel()
            or any(o.dtype != inp.dtype for o in outs)
        ):
            return orig(tensor_list, tensor, group, async_op)  # torch explains the mistake
        # NCCL gathers uneven sizes; gloo needs equal ones: pad to the largest, then trim
        largest = max(o.numel() for o in outs)
        send = inp.new_zeros(largest)
        send[: inp.numel()] = inp.reshape(-1)
        buffers = [inp.new_empty(largest) for _ in range(world)]
        orig(buffers, send, group, False)
        for out, buf in zip(outs, buffers):
            out.copy_(buf[: out.numel()].view(out.shape))
        return _done_work() if async_op else None

    all_gather.__torchdevice_wrapped__ = orig
    return all_gather


def _wrap_all_gather_into_tensor(orig):
    import torch.distributed as dist

    @functools.wraps(orig)
    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
        if (
            output_tensor.dim() == input_tensor.dim() + 1
            and not dist.distributed_c10d._rank_not_in_group(group)
            and output_tensor.shape[0] == dist.get_world_size(group)
            and output_tensor.shape[1:] == input_tensor.shape
        ):
            # stacked output (world, *shape): the concatenated form of input.unsqueeze(0)
            return orig(output_tensor, input_tensor.unsqueeze(0), group, async_op)
        return orig(output_tensor, input_tensor, group, async_op)

    all_gather_into_tensor.__torchdevice_wrapped__ = orig
    return all_gather_into_tensor


def _wrap_reduce_scatter_tensor(orig):
    import torch.distributed as dist

    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def reduce_scatter_tensor(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        output, input = bound.arguments["output"], bound.arguments["input"]
        group = bound.arguments.get("group")
        if (
            input.dim() == output.dim() + 1
            and not dist.distributed_c10d._rank_not_in_group(group)
            and input.shape[0] == dist.get_world_size(group)
            and input.shape[1:] == output.shape
        ):
            # stacked input (world, *shape): reduce into output.unsqueeze(0), a view of output
            bound.arguments["output"] = output.unsqueeze(0)
        return orig(*bound.args, **bound.kwargs)

    reduce_scatter_tensor.__torchdevice_wrapped__ = orig
    return reduce_scatter_tensor


def _wrap_all_to_all(orig, all_to_all_single):
    import torch.distributed as dist

    @functools.wraps(orig)
    def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
        tensors = list(output_tensor_list) + list(input_tensor_list)
        if (
            not tensors
            or all(t.shape == tensors[0].shape for t in tensors)
            or any(t.dtype != tensors[0].dtype for t in tensors)
            or dist.distributed_c10d._rank_not_in_group(group)
        ):
            return orig(output_tensor_list, input_tensor_list, group, async_op)
        outs = [_real(t) for t in output_tensor_list]
        ins = [_real(t).reshape(-1) for t in input_tensor_list]
        send = torch.cat(ins)
        out_sizes = [o.numel() for o in outs]
        recv = send.new_empty(sum(out_sizes))
        all_to_all_single(
            recv, send, output_split_sizes=out_sizes, input_split_sizes=[t.numel() for t in ins], group=group
        )
        for out, piece in zip(outs, recv.split(out_sizes)):
            out.copy_(piece.view(out.shape))
        return _done_work() if async_op else None

    all_to_all.__torchdevice_wrapped__ = orig
    return all_to_all


def _wrap_split_group(orig, new_subgroups_by_enumeration):
    import torch.distributed as dist

    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def split_group(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        arguments = bound.arguments
        if "backend" in arguments:
            arguments["backend"] = map_backend(arguments["backend"], None, "split_group")
        parent = arguments.get("parent_pg")
        if _state.engine != "gloo":
            return orig(*bound.args, **bound.kwargs)
        if parent is not None and parent is not dist.GroupMember.WORLD:
            raise UnsupportedError(
                "torch.distributed.split_group of a non-default group",
                _state.backend_name,
                "gloo cannot split process groups; create the groups with new_group from all ranks",
            )
        split_ranks = arguments.get("split_ranks")
        if not split_ranks:
            raise ValueError("split_ranks cannot be None or empty")
        mine, _ = new_subgroups_by_enumeration(
            split_ranks,
            timeout=arguments.get("timeout"),
            backend=arguments.get("backend"),
            pg_options=arguments.get("pg_options"),
            group_desc=arguments.get("group_desc"),
        )
        return mine

    split_group.__torchdevice_wrapped__ = orig
    return split_group


class _NotCuda(torch.Tensor):
    """A view of a translated tensor that answers ``is_cuda`` False (see :func:`_wrap_broadcast`)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self) -> bool:
        return False


def _wrap_broadcast(orig):
    """``broadcast`` asks ``torch.cuda.get_device_capability`` of every tensor reporting ``is_cuda``.

    torch 2.13 does it to choose an fp8 workaround for GPUs older than sm90.
    A translated tensor reports ``is_cuda`` True but lives on a device with no
    compute capability (the namespace raises rather than invent one), so the
    engine is handed the same tensor under a class answering ``is_cuda`` False:
    same storage, so the received values land in the caller's tensor.
    """
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def broadcast(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        tensor = bound.arguments.get("tensor")
        if isinstance(tensor, torch.Tensor) and tensor.device.type != "cuda" and tensor.is_cuda:
            bound.arguments["tensor"] = tensor.as_subclass(_NotCuda)
        return orig(*bound.args, **bound.kwargs)

    broadcast.__torchdevice_wrapped__ = orig
    return broadcast


def _wrap_available(orig, engine_name: str | None):
    @functools.wraps(orig)
    def available(*args, **kwargs):
        name = engine_name
        if name is None:  # is_backend_available(backend)
            backend = args[0] if args else kwargs.get("backend")
            name = str(backend).lower() if backend is not None else None
        if name in _state.claimed and _state.engine is not None and _state.target.report_available:
            return True
        return orig(*args, **kwargs)

    available.__torchdevice_wrapped__ = orig
    return available


def _wrap_init_device_mesh(orig):
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def init_device_mesh(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        arguments = bound.arguments
        device_type = arguments.get("device_type")
        if isinstance(device_type, str) and device_type in _state.target.sources:
            arguments["device_type"] = _state.target.device_type
        overrides = arguments.get("backend_override")
        if overrides:
            new = {}
            for key, value in overrides.items():
                if isinstance(value, str):
                    value = map_backend(value, None, "init_device_mesh")
                elif isinstance(value, tuple) and value and isinstance(value[0], str):
                    value = (map_backend(value[0], None, "init_device_mesh"), *value[1:])
                new[key] = value
            arguments["backend_override"] = new
        return orig(*bound.args, **bound.kwargs)

    init_device_mesh.__torchdevice_wrapped__ = orig
    return init_device_mesh


def _wrap_ddp_init(orig):
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def __init__(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        arguments = bound.arguments
        device_ids = arguments.get("device_ids")
        output_device = arguments.get("output_device")
        if device_ids is not None:
            device_ids = [_ddp_index(d) for d in device_ids]
        if output_device is not None:
            output_device = _ddp_index(output_device)
        if not _state.target.indexed:
            # DDP requires device_ids=None and output_device=None for CPU modules
            device_ids = None if device_ids is None or all(isinstance(d, int) for d in device_ids) else device_ids
            output_device = None if output_device is None or isinstance(output_device, int) else output_device
        if "device_ids" in arguments:
            arguments["device_ids"] = device_ids
        if "output_device" in arguments:
            arguments["output_device"] = output_device
        return orig(*bound.args, **bound.kwargs)

    __init__.__torchdevice_wrapped__ = orig
    return __init__


# -- install -------------------------------------------------------------------------------


def _patch_function(patcher, modules, name: str, make) -> None:
    """Replace function ``name`` in every module of ``modules`` holding the same object."""
    import torch.distributed.distributed_c10d as c10d

    original = getattr(c10d, name, None)
    if original is None:
        original = getattr(modules[0], name, None)
    if original is None:
        return
    wrapper = make(original)
    for module in modules:
        if getattr(module, name, None) is original:
            patcher.set(module, name, wrapper)


def install(patcher, target) -> None:
    """Patch ``torch.distributed`` (and DDP) for ``target`` through ``patcher`` (see torchdevice.translate)."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch built without distributed
        return
    if not dist.is_available():
        return
    import torch.distributed.device_mesh as device_mesh
    import torch.distributed.distributed_c10d as c10d
    import torch.nn.parallel.distributed as ddp_module

    active = router.active()
    _state.target = target
    _state.engine = active.collectives.dist_backend
    _state.backend_name = target.backend
    _state.foreign = frozenset(_foreign_engines(target.device_type, target.sources))
    source_engine = dist.Backend.default_device_backend_map.get(target.source)
    _state.claimed = frozenset(n for n in _state.foreign if n == source_engine)

    modules = [dist, c10d]
    _patch_function(patcher, modules, "init_process_group",
                    lambda f: _wrap_group_factory(f, "init_process_group", has_device_id=True))
    _patch_function(patcher, modules, "new_group", lambda f: _wrap_group_factory(f, "new_group", has_device_id=True))
    _patch_function(patcher, modules, "new_subgroups", lambda f: _wrap_group_factory(f, "new_subgroups"))
    _patch_function(patcher, modules, "new_subgroups_by_enumeration",
                    lambda f: _wrap_group_factory(f, "new_subgroups_by_enumeration"))
    _patch_function(patcher, [dist, device_mesh], "init_device_mesh", _wrap_init_device_mesh)
    if "cuda" in target.sources:
        _patch_function(patcher, modules, "broadcast", _wrap_broadcast)
    _patch_function(patcher, modules, "is_nccl_available", lambda f: _wrap_available(f, "nccl"))
    _patch_function(patcher, modules, "is_xccl_available", lambda f: _wrap_available(f, "xccl"))
    _patch_function(patcher, modules, "is_backend_available", lambda f: _wrap_available(f, None))
    if _state.engine == "gloo":
        all_to_all_single = c10d.all_to_all_single
        subgroups = c10d.new_subgroups_by_enumeration  # the wrapped one: maps its backend too
        _patch_function(patcher, modules, "all_gather", _wrap_all_gather)
        _patch_function(patcher, modules, "all_gather_into_tensor", _wrap_all_gather_into_tensor)
        _patch_function(patcher, modules, "reduce_scatter_tensor", _wrap_reduce_scatter_tensor)
        _patch_function(patcher, modules, "all_to_all", lambda f: _wrap_all_to_all(f, all_to_all_single))
        _patch_function(patcher, modules, "split_group", lambda f: _wrap_split_group(f, subgroups))
    ddp = ddp_module.DistributedDataParallel
    patcher.set(ddp, "__init__", _wrap_ddp_init(ddp.__init__))


def uninstall() -> None:
    """Forget the target (the patcher restores the attributes)."""
    _state.target = None
    _state.engine = None
    _state.foreign = frozenset()
    _state.claimed = frozenset()
