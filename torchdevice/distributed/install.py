"""Installing the distributed translation: :func:`install` patches ``torch.distributed`` (and DDP) for the
target through the Patcher; :func:`uninstall`."""
from __future__ import annotations

import functools
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from .arguments import _state
from .reduce_ops import LOWERED, REFUSED, wrap_premul_sum
from .statuses import _foreign_engines
from .wrappers import (
    _wrap_all_gather,
    _wrap_all_gather_into_tensor,
    _wrap_all_to_all,
    _wrap_available,
    _wrap_broadcast,
    _wrap_ddp_init,
    _wrap_group_factory,
    _wrap_init_device_mesh,
    _wrap_reduce_scatter_tensor,
    _wrap_split_group,
)

if TYPE_CHECKING:
    from .._patching import Patcher
    from ..router import Target


def _patch_function(patcher: Patcher, modules: list[ModuleType], name: str,
                    make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace function ``name`` in every module of ``modules`` holding the same object."""
    import torch.distributed.distributed_c10d as c10d

    # patcher.get: what is there once the changes staged so far apply (a wrapper wraps the one before it)
    original = patcher.get(c10d, name)
    if original is None:
        original = patcher.get(modules[0], name)
    if original is None:
        return
    wrapper = make(original)
    for module in modules:
        if patcher.get(module, name) is original:
            patcher.set(module, name, wrapper)


def install(patcher: Patcher, target: Target) -> None:
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

    _state.target = target
    _state.engine = target.collectives.dist_backend
    _state.backend_name = target.name
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
        all_to_all_single = patcher.get(c10d, "all_to_all_single")
        subgroups = patcher.get(c10d, "new_subgroups_by_enumeration")  # the wrapped one: maps its backend too
        _patch_function(patcher, modules, "all_gather", _wrap_all_gather)
        _patch_function(patcher, modules, "all_gather_into_tensor", _wrap_all_gather_into_tensor)
        _patch_function(patcher, modules, "reduce_scatter_tensor", _wrap_reduce_scatter_tensor)
        # torch 2.13's names (the two above are their deprecated aliases), which FSDP2 calls directly
        _patch_function(patcher, modules, "all_gather_single", _wrap_all_gather_into_tensor)
        _patch_function(patcher, modules, "reduce_scatter_single", _wrap_reduce_scatter_tensor)
        _patch_function(patcher, modules, "all_to_all", lambda f: _wrap_all_to_all(f, all_to_all_single))
        _patch_function(patcher, modules, "split_group", lambda f: _wrap_split_group(f, subgroups))
    if _state.engine is not None and _state.engine != "nccl":  # PREMUL_SUM is NCCL's alone
        for name in (*LOWERED, *REFUSED):
            _patch_function(patcher, modules, name, functools.partial(wrap_premul_sum, name=name))
    ddp = ddp_module.DistributedDataParallel
    patcher.set(ddp, "__init__", _wrap_ddp_init(ddp.__init__))


def uninstall() -> None:
    """Forget the target (the patcher restores the attributes)."""
    _state.target = None
    _state.engine = None
    _state.foreign = frozenset()
    _state.claimed = frozenset()
