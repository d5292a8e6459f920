"""``torch.cuda.nccl``: NCCL's version from the backend's collective engine; its collectives refused, naming
``torch.cuda.comm`` and ``torch.distributed`` (rows ``"nccl.<name>"``, patched in ``torch.cuda.nccl`` only).

torch's own functions call ``torch._C._nccl_*``, which a build without NCCL lacks (an AttributeError)."""
from __future__ import annotations

from typing import Any, Callable, cast

from ..backend import Status
from ..router import Target
from .rules import UNSUPPORTED, optional_op
from .table import declare_native, declare_unsupported, fronts


def _no_engine_version(target: Target, ns: str) -> tuple[Status, str]:
    """``nccl.version`` where the backend's collectives define no ``engine_version`` (gloo has none)."""
    engine = getattr(target.collectives, "dist_backend", None)
    if engine is None:
        return UNSUPPORTED, f"the {target.name} backend has no collective engine, so no NCCL and no version"
    return UNSUPPORTED, (
        f"the {target.name} backend's collective engine ({engine}) reports no version; "
        "torchdevice.dist_backend() names the engine that runs torch.distributed's NCCL process groups here"
    )


@fronts("nccl.version", optional_op("collectives", "engine_version", _no_engine_version))
def build_version(target: Target, ns: str, name: str) -> Callable[..., Any]:
    engine_version = cast(Any, target.collectives).engine_version  # an optional operation: its rule checked it is there

    def version() -> tuple:
        return tuple(engine_version())

    return version


declare_native("nccl.is_available", "torch's own check: False here (a torch build without NCCL, or tensors that are "
                                    "not CUDA tensors)")
declare_unsupported(("nccl.unique_id", "nccl.init_rank"),
                    "NCCL communicators are made by torch.distributed.init_process_group(backend='nccl'), which "
                    "torchdevice runs on the {backend} backend's engine (torchdevice.dist_backend())")
declare_unsupported("nccl.all_reduce", "torch.distributed.all_reduce across processes; in one process, "
                                       "torch.{ns}.comm.reduce_add then torch.{ns}.comm.broadcast")
declare_unsupported("nccl.reduce", "torch.{ns}.comm.reduce_add in one process, torch.distributed.reduce across "
                                   "processes")
declare_unsupported("nccl.broadcast", "torch.{ns}.comm.broadcast in one process, torch.distributed.broadcast across "
                                      "processes")
declare_unsupported("nccl.all_gather", "torch.{ns}.comm.gather in one process, torch.distributed.all_gather across "
                                       "processes")
declare_unsupported("nccl.reduce_scatter", "torch.distributed.reduce_scatter_tensor across processes")
