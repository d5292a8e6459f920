"""What each ``torch.distributed`` function does on a backend (``torchdevice matrix``): :data:`CATALOG`,
the engines' differences (:data:`ENGINE_NOTES`), :func:`status`, and the queries :func:`engine` and
:func:`local_world_size`."""
from __future__ import annotations

import os
from collections.abc import Iterable

from .. import router
from ..backend import Status
from ..vocabulary import SOURCE_FAMILIES

SOURCE_TYPES = SOURCE_FAMILIES  # its old name here

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
        "all_reduce": (Status.NATIVE, "gloo (SUM/PRODUCT/MIN/MAX/AVG/BAND/BOR/BXOR); ReduceOp.PREMUL_SUM(f) lowered to "
                       "a multiply by f and SUM (NCCL's numbers); float8 dtypes raise"),
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


def _foreign_engines(device_type: str, sources: Iterable[str]) -> set[str]:
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


def status(name: str, target: router.Target | None = None) -> tuple[Status, str]:
    """``(Status, note)`` of ``torch.distributed.<name>`` on the engine of backend ``target`` (default: the active
    backend; ``torchdevice matrix`` passes each backend's).

    Accepts ``"all_reduce"`` or ``"torch.distributed.all_reduce"``; every name in
    :data:`CATALOG` is answered. Example::

        >>> torchdevice.distributed.status("init_process_group")
        (<Status.TRANSLATED: 'translated'>, "'nccl', 'xccl' -> 'gloo' (the engine of backend 'cpu') ...")
    """
    short = name.rsplit(".", 1)[-1]
    if short not in CATALOG:
        raise KeyError(f"{name!r} is not a torch.distributed function of the catalog")
    active = router.active() if target is None else target
    eng = active.collectives.dist_backend
    device_type = active.device_type
    sources = [s for s in SOURCE_FAMILIES if s != device_type]
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
