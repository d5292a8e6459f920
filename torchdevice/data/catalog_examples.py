"""Valid arguments for calling every catalog function, kept beside the catalog (``catalog.json``).

``tests/honesty/test_published_status.py`` calls each device function of the catalog with these
arguments while translation to the CPU backend is on, and checks the result
against the catalog's documented return type (:func:`returns_ok`), or that an
"unsupported" function raises :class:`torchdevice.UnsupportedError`.

* :data:`EXAMPLES` -- per function *name*, shared by ``torch.cuda``,
  ``torch.xpu``, ``torch.mtia`` and ``torch.mps``; :data:`SPECIFIC` overrides a
  full API name where a namespace spells the call differently (``torch.mps``
  takes no device arguments). Each example is a function of the namespace
  module (the patched ``torch.cuda`` ...) returning ``(args, kwargs)``, so
  arguments such as a stream or an RNG state come from the namespace itself.
* :data:`RETURNS` -- the documented return type where the catalog only says
  ``Any`` (taken from the function's torch documentation).
* :data:`DISTRIBUTED` -- the ``torch.distributed`` examples, run in order by
  every rank of a 2-process group (see :class:`DistContext`).

Where no valid argument can exist off CUDA (a ``MemPool`` or a CUDA allocator
object cannot be constructed without CUDA) the example passes ``None`` and
says so; such functions are unsupported off CUDA and raise before looking at
their arguments.
"""
from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any, Callable, NoReturn

import torch

Call = Callable[[ModuleType], "tuple[tuple, dict]"]


def call(*args: object, **kwargs: object) -> Call:
    """An example with fixed arguments."""
    return lambda module: (args, kwargs)


def _with(fn: Callable[[ModuleType], tuple]) -> Call:
    """An example whose positional arguments are computed from the namespace module."""
    return lambda module: (tuple(fn(module)), {})


def _linear() -> tuple[torch.nn.Linear, tuple[torch.Tensor]]:
    layer = torch.nn.Linear(2, 2)
    return layer, (torch.randn(1, 2),)


#: Function name -> examples (a list of calls), for every namespace that has the function.
EXAMPLES: dict[str, list[Call]] = {
    "caching_allocator_alloc": [call(1024), call(1024, 0, None)],
    "caching_allocator_delete": [call(0)],  # a pointer from caching_allocator_alloc (unsupported off CUDA)
    "caching_allocator_enable": [call(True), call(value=True)],
    "can_device_access_peer": [call(0, 0)],
    "cast": [call(int, 3)],
    "change_current_allocator": [call(None)],  # no _CUDAAllocator can be built without CUDA
    "check_error": [call(0)],
    "classproperty": [call(lambda cls: 42)],
    "clock_rate": [call(), call(0)],
    "cudart": [call()],
    "current_blas_handle": [call()],
    "current_device": [call()],
    "current_stream": [call(), call(0)],
    "default_stream": [call(), call(0)],
    "device_count": [call()],
    "device_memory_used": [call(), call(0)],
    "empty_cache": [call()],
    "get_allocator_backend": [call()],
    "get_arch_list": [call()],
    "get_device_capability": [call(), call(0)],
    "get_device_name": [call(), call(0)],
    "get_device_properties": [call(), call(0)],
    "get_gencode_flags": [call()],
    "get_per_process_memory_fraction": [call(), call(0)],
    "get_rng_state": [call(), call(0)],
    "get_rng_state_all": [call()],
    "get_stream_from_external": [call(0), call(0, 0)],
    "get_sync_debug_mode": [call()],
    "graph_pool_handle": [call()],
    "host_memory_stats": [call()],
    "host_memory_stats_as_nested_dict": [call()],
    "init": [call()],
    "initial_seed": [call()],
    "ipc_collect": [call()],
    "is_available": [call()],
    "is_bf16_supported": [call(), call(False)],
    "is_current_stream_capturing": [call()],
    "is_initialized": [call()],
    "is_tf32_supported": [call()],
    "list_gpu_processes": [call(), call(0)],
    "lru_cache": [call(16), call(maxsize=None, typed=False)],
    "make_graphed_callables": [lambda module: (_linear(), {})],
    "manual_seed": [call(0)],
    "manual_seed_all": [call(0)],
    "max_memory_allocated": [call(), call(0)],
    "max_memory_cached": [call(), call(0)],
    "max_memory_reserved": [call(), call(0)],
    "mem_get_info": [call(), call(0)],
    "memory_allocated": [call(), call(0)],
    "memory_cached": [call(), call(0)],
    "memory_reserved": [call(), call(0)],
    "memory_snapshot": [call()],
    "memory_stats": [call(), call(0)],
    "memory_stats_as_nested_dict": [call(), call(0)],
    "memory_summary": [call(), call(0, True)],
    "memory_usage": [call(), call(0)],
    "power_draw": [call(), call(0)],
    "record_memory_history": [call("all"), call(None)],
    "reset_accumulated_host_memory_stats": [call()],
    "reset_accumulated_memory_stats": [call(), call(0)],
    "reset_max_memory_allocated": [call(), call(0)],
    "reset_max_memory_cached": [call(), call(0)],
    "reset_peak_host_memory_stats": [call()],
    "reset_peak_memory_stats": [call(), call(0)],
    "seed": [call()],
    "seed_all": [call()],
    "set_device": [call(0)],
    "set_per_process_memory_fraction": [call(1.0), call(1.0, 0)],
    "set_rng_state": [_with(lambda m: (m.get_rng_state(),)), _with(lambda m: (m.get_rng_state(0), 0))],
    "set_rng_state_all": [_with(lambda m: (m.get_rng_state_all(),))],
    "set_stream": [_with(lambda m: (m.current_stream(),)), call(None)],
    "set_sync_debug_mode": [call("default"), call(0)],
    "snapshot": [call()],
    "stream": [_with(lambda m: (m.Stream(),)), call(None)],
    "synchronize": [call(), call(0)],
    "temperature": [call(), call(0)],
    "use_mem_pool": [call(None)],  # no MemPool can be built without CUDA
    "utilization": [call(), call(0)],
    # torch.mps
    "compile_shader": [call("kernel void full(device float* out, uint idx [[thread_position_in_grid]]) "
                            "{ out[idx] = 1.0; }")],
    "current_allocated_memory": [call()],
    "driver_allocated_memory": [call()],
    "recommended_max_memory": [call()],
}

#: Full API name -> examples, where a namespace's signature differs from the shared one.
SPECIFIC: dict[str, list[Call]] = {
    "torch.mps.synchronize": [call()],
    "torch.mps.set_per_process_memory_fraction": [call(1.0)],
    "torch.mps.get_rng_state": [call(), call("mps")],
    "torch.mps.set_rng_state": [_with(lambda m: (m.get_rng_state(),))],
    "torch.xpu.is_bf16_supported": [call()],
}


def examples(api: str) -> list[Call]:
    """The examples for ``api`` (``"torch.cuda.memory_allocated"``); KeyError if it has none."""
    if api in SPECIFIC:
        return SPECIFIC[api]
    return EXAMPLES[api.rpartition(".")[2]]


#: The documented return type where the catalog says ``Any`` (from torch's documentation of the function).
RETURNS: dict[str, str] = {
    "caching_allocator_alloc": "<class 'int'>",
    "caching_allocator_delete": "None",
    "cast": "value",  # typing.cast returns its value unchanged
    "classproperty": "classproperty",
    "cudart": "module",
    "current_blas_handle": "<class 'int'>",
    "init": "None",
    "ipc_collect": "None",
    "is_bf16_supported": "<class 'bool'>",
    "is_current_stream_capturing": "<class 'bool'>",
    "is_initialized": "<class 'bool'>",
    "lru_cache": "callable",
    "make_graphed_callables": "callable",
    "memory_snapshot": "list",
    "graph_pool_handle": "tuple",
    "set_stream": "None",
    "use_mem_pool": "context manager",
    "compile_shader": "object",
}


def documented_return(api: str, catalog_returns: str) -> str:
    """The return type an API is documented to have: the catalog's, refined by :data:`RETURNS` for ``Any``."""
    if catalog_returns == "Any":
        return RETURNS.get(api.rpartition(".")[2], "Any")
    return catalog_returns


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def returns_ok(documented: str, value: Any, module: ModuleType | None = None) -> bool:
    """Whether ``value`` has the ``documented`` type (a catalog return-type string).

    Substitutions, by design: ``torch._utils._CudaDeviceProperties`` (and
    ``_XpuDeviceProperties``) is satisfied by :class:`torchdevice.DeviceProperties`,
    which has CUDA's field names; the namespace's ``Stream`` / ``StreamContext``
    types are checked against the namespace ``module`` as it is (patched, they
    are the backend's classes, so ``isinstance`` is the test CUDA code uses).
    """
    from torchdevice.backend import DeviceProperties

    simple = {
        "None": lambda v: v is None,
        "<class 'int'>": _is_int,
        "<class 'bool'>": lambda v: isinstance(v, bool),
        "<class 'str'>": lambda v: isinstance(v, str),
        "<class 'float'>": lambda v: isinstance(v, float),
        "<class 'torch.Tensor'>": lambda v: isinstance(v, torch.Tensor),
        "tuple[int, int]": lambda v: isinstance(v, tuple) and len(v) == 2 and all(_is_int(x) for x in v),
        "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "list[int]": lambda v: isinstance(v, list) and all(_is_int(x) for x in v),
        "list[torch.Tensor]": lambda v: isinstance(v, list) and all(isinstance(x, torch.Tensor) for x in v),
        "dict[str, typing.Any]": lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
        "list": lambda v: isinstance(v, list),
        "tuple": lambda v: isinstance(v, tuple),
        "callable": callable,
        "object": lambda v: v is not None,
        "value": lambda v: True,
        "Any": lambda v: True,
        "module": lambda v: isinstance(v, ModuleType),
        "context manager": lambda v: hasattr(v, "__enter__") and hasattr(v, "__exit__"),
        "classproperty": lambda v: v is not None,
        "<class 'torch._utils._CudaDeviceProperties'>": lambda v: isinstance(v, DeviceProperties)
        or type(v).__name__ == "_CudaDeviceProperties",
        "<class 'torch._utils._XpuDeviceProperties'>": lambda v: isinstance(v, DeviceProperties)
        or type(v).__name__ == "_XpuDeviceProperties",
    }
    if documented in simple:
        return bool(simple[documented](value))
    if documented.endswith("Stream'>") and module is not None:
        return isinstance(value, module.Stream)
    if documented.endswith("StreamContext'>") and module is not None:
        return isinstance(value, module.StreamContext)
    if "torch.distributed" in documented:
        return _dist_type_ok(documented, value)
    raise KeyError(f"no check for documented return type {documented!r}")


def _dist_type_ok(documented: str, value: Any) -> bool:
    import torch.distributed as dist

    optional = documented.startswith("typing.Optional[")
    if optional and value is None:
        return True
    if "Work]" in documented:
        work = dist.distributed_c10d.Work
        if documented.startswith("list["):
            return isinstance(value, list) and all(isinstance(w, work) for w in value)
        return isinstance(value, work)
    if documented.endswith("Backend'>"):
        return isinstance(value, str)  # dist.Backend values are str subclasses / plain str
    if "DeviceMesh" in documented:
        from torch.distributed.device_mesh import DeviceMesh

        return isinstance(value, DeviceMesh)
    if "ProcessGroup]" in documented or documented.endswith("ProcessGroup'>"):
        return isinstance(value, dist.ProcessGroup)
    raise KeyError(f"no check for documented return type {documented!r}")


# -- torch.distributed ---------------------------------------------------------------------


class DistContext:
    """What a distributed example sees: ``rank``, ``world_size`` (2), ``device`` ("cuda": the program's
    own device string, translated), ``init_method`` and a ``scratch`` dict shared by later examples."""

    def __init__(self, rank: int, world_size: int, init_method: str, device: str = "cuda") -> None:
        self.rank, self.world_size, self.init_method, self.device = rank, world_size, init_method, device
        self.scratch: dict[str, Any] = {}

    def t(self, *values: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)

    @property
    def peer(self) -> int:
        return 1 - self.rank


DistCall = Callable[[DistContext], "tuple[tuple, dict]"]


def _d(fn: Callable[[DistContext], Iterable[Any]]) -> DistCall:
    return lambda ctx: (tuple(fn(ctx)), {})


def _dk(fn: Callable[[DistContext], dict]) -> DistCall:
    return lambda ctx: ((), fn(ctx))


def _p2p_ops(ctx: DistContext) -> list[list[torch.distributed.P2POp]]:
    import torch.distributed as dist

    send = ctx.t(float(ctx.rank))
    recv = ctx.t(-1.0)
    return [[dist.P2POp(dist.isend, send, ctx.peer), dist.P2POp(dist.irecv, recv, ctx.peer)]]


def _rendezvous_handler(url: str, **kwargs: object) -> NoReturn:
    raise RuntimeError("not used")


#: ``torch.distributed`` examples, called by every rank in this order (collectives must match across ranks).
#: ``init_process_group`` comes first and ``destroy_process_group`` last.
DISTRIBUTED: dict[str, DistCall | Call] = {  # call(): an example ignoring its argument
    "is_available": call(),
    "is_gloo_available": call(),
    "is_mpi_available": call(),
    "is_nccl_available": call(),
    "is_ucc_available": call(),
    "is_xccl_available": call(),
    "is_torchelastic_launched": call(),
    "is_backend_available": call("nccl"),
    "get_default_backend_for_device": call("cuda"),
    "supports_complex": _d(lambda ctx: (__import__("torch.distributed").distributed.ReduceOp.SUM,)),
    "register_rendezvous_handler": call("torchdevice-example", _rendezvous_handler),
    "get_node_local_rank": call(0),
    "init_process_group": _dk(lambda ctx: dict(backend="nccl", init_method=ctx.init_method, rank=ctx.rank,
                                               world_size=ctx.world_size)),
    "is_initialized": call(),
    "get_backend": call(),
    "get_backend_config": call(),
    "get_rank": call(),
    "get_world_size": call(),
    "get_pg_count": call(),
    "get_process_group_ranks": _d(lambda ctx: (__import__("torch.distributed").distributed.group.WORLD,)),
    "get_global_rank": _d(lambda ctx: (__import__("torch.distributed").distributed.group.WORLD, 1)),
    "get_group_rank": _d(lambda ctx: (__import__("torch.distributed").distributed.group.WORLD, 1)),
    "barrier": call(),
    "monitored_barrier": call(),
    "all_reduce": _d(lambda ctx: (ctx.t(1.0, 2.0),)),
    "all_reduce_coalesced": _d(lambda ctx: ([ctx.t(1.0), ctx.t(2.0, 3.0)],)),
    "broadcast": _d(lambda ctx: (ctx.t(float(ctx.rank)), 0)),
    "reduce": _d(lambda ctx: (ctx.t(1.0), 0)),
    "all_gather": _d(lambda ctx: ([ctx.t(0.0), ctx.t(0.0)], ctx.t(float(ctx.rank)))),
    # one list per rank, each with one tensor per input
    "all_gather_coalesced": _d(lambda ctx: ([[ctx.t(0.0)], [ctx.t(0.0)]], [ctx.t(float(ctx.rank))])),
    "all_gather_into_tensor": _d(lambda ctx: (ctx.t(0.0, 0.0), ctx.t(float(ctx.rank)))),
    "all_gather_object": _d(lambda ctx: ([None, None], {"rank": ctx.rank})),
    "broadcast_object_list": _d(lambda ctx: ([ctx.rank, "x"], 0)),
    "gather": _dk(lambda ctx: dict(tensor=ctx.t(float(ctx.rank)),
                                   gather_list=[ctx.t(0.0), ctx.t(0.0)] if ctx.rank == 0 else None, dst=0)),
    "gather_object": _dk(lambda ctx: dict(obj=ctx.rank, object_gather_list=[None, None] if ctx.rank == 0 else None,
                                          dst=0)),
    "scatter": _dk(lambda ctx: dict(tensor=ctx.t(0.0),
                                    scatter_list=[ctx.t(1.0), ctx.t(2.0)] if ctx.rank == 0 else None, src=0)),
    "scatter_object_list": _dk(lambda ctx: dict(scatter_object_output_list=[None],
                                                scatter_object_input_list=["a", "b"] if ctx.rank == 0 else None,
                                                src=0)),
    "reduce_scatter": _d(lambda ctx: (ctx.t(0.0), [ctx.t(1.0), ctx.t(2.0)])),
    "reduce_scatter_tensor": _d(lambda ctx: (ctx.t(0.0), ctx.t(1.0, 2.0))),
    "all_to_all": _d(lambda ctx: ([ctx.t(0.0), ctx.t(0.0)], [ctx.t(1.0), ctx.t(2.0)])),
    "all_to_all_single": _d(lambda ctx: (ctx.t(0.0, 0.0), ctx.t(1.0, 2.0))),
    "send": _d(lambda ctx: (ctx.t(5.0), ctx.peer)),
    "recv": _d(lambda ctx: (ctx.t(0.0), ctx.peer)),
    "isend": _d(lambda ctx: (ctx.t(6.0), ctx.peer)),
    "irecv": _d(lambda ctx: (ctx.t(0.0), ctx.peer)),
    "batch_isend_irecv": _d(_p2p_ops),
    "send_object_list": _d(lambda ctx: (["obj"], ctx.peer)),
    "recv_object_list": _d(lambda ctx: ([None], ctx.peer)),
    "new_group": _dk(lambda ctx: dict(ranks=[0, 1])),
    "new_subgroups": _dk(lambda ctx: dict(group_size=1)),
    "new_subgroups_by_enumeration": _dk(lambda ctx: dict(ranks_per_subgroup_list=[[0], [1]])),
    "split_group": _dk(lambda ctx: dict(split_ranks=[[0], [1]])),
    "init_device_mesh": _d(lambda ctx: ("cuda", (2,))),
    "rendezvous": _d(lambda ctx: (ctx.scratch["rendezvous_url"], ctx.rank, ctx.world_size)),
    "breakpoint": _dk(lambda ctx: dict(rank=0, skip=1)),  # the first call is skipped: no debugger opens
    "destroy_process_group": call(),
}

#: Examples whose send/recv pairing needs the ranks to call in opposite order.
DIST_PAIRED = {"send": "recv", "isend": "irecv", "send_object_list": "recv_object_list"}

#: Documented return types of ``torch.distributed`` functions the catalog lists as ``Any``.
DIST_RETURNS: dict[str, str] = {
    "all_gather": "None", "all_gather_coalesced": "None", "all_gather_into_tensor": "None",
    "all_gather_object": "None", "all_reduce": "None", "all_reduce_coalesced": "None", "all_to_all": "None",
    "all_to_all_single": "None", "barrier": "None", "broadcast": "None", "broadcast_object_list": "None",
    "destroy_process_group": "None", "gather": "None", "gather_object": "None", "monitored_barrier": "None",
    "reduce": "None", "reduce_scatter": "None", "reduce_scatter_tensor": "None", "scatter": "None",
    "scatter_object_list": "None", "send_object_list": "None", "recv_object_list": "<class 'int'>",
    "register_rendezvous_handler": "None", "breakpoint": "None",
    "new_group": "<class 'torch.distributed.ProcessGroup'>",
    "new_subgroups": "tuple", "new_subgroups_by_enumeration": "tuple", "rendezvous": "object",
}


def dist_documented_return(name: str, catalog_returns: str) -> str:
    if catalog_returns == "Any":
        return DIST_RETURNS.get(name, "Any")
    return catalog_returns


__all__ = ["EXAMPLES", "SPECIFIC", "RETURNS", "DISTRIBUTED", "DIST_RETURNS", "DistContext", "examples",
           "documented_return", "returns_ok", "call"]
