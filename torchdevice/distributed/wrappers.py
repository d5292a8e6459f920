"""The wrappers of ``torch.distributed`` functions installed while translating: process-group factories,
the collectives gloo lacks or shapes differently, ``broadcast``, the ``is_*_available`` answers,
``init_device_mesh``, DDP's ``__init__``."""
from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable

import torch

from .. import boundary
from ..errors import UnsupportedError
from .arguments import _ddp_index, _state, map_backend, map_device_id
from .teardown import register_collect_before_exit

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup, Work
    from torch.distributed.device_mesh import DeviceMesh

    _Fn = Callable[..., Any]  #: a torch.distributed function, and its wrapper


def _marked(wrapper: _Fn, orig: _Fn) -> _Fn:
    """``wrapper``, marked as torchdevice's wrapper of ``orig`` (``__torchdevice_wrapped__``)."""
    wrapper.__torchdevice_wrapped__ = orig  # type: ignore[attr-defined]
    return wrapper


def _wrap_group_factory(orig: _Fn, what: str, *, has_device_id: bool = False) -> _Fn:
    """init_process_group / new_group / new_subgroups*: map ``backend`` (and ``device_id``)."""
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        arguments = bound.arguments
        device_id = arguments.get("device_id")
        if has_device_id and device_id is not None:
            arguments["device_id"] = device_id = map_device_id(device_id)
        if "backend" in sig.parameters:
            arguments["backend"] = map_backend(arguments.get("backend"), device_id, what)
        if _state.engine == "gloo":
            register_collect_before_exit()  # a DDP cycle must not free the group while Python finalizes
        try:
            return orig(*bound.args, **bound.kwargs)
        finally:
            if what == "init_process_group":
                boundary.rewarm()  # it clears dynamo's caches of torch functions (distributed_c10d)

    return _marked(wrapper, orig)


def _done_work() -> Work:
    # torch's stubs lack it; torch.distributed's own code makes completed works with it
    from torch._C._distributed_c10d import _create_work_from_future  # type: ignore[attr-defined]

    future: torch.futures.Future[None] = torch.futures.Future()
    future.set_result(None)
    return _create_work_from_future(future)


def _real(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def _wrap_all_gather(orig: _Fn) -> _Fn:
    import torch.distributed as dist

    @functools.wraps(orig)
    def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group: ProcessGroup | None = None,
                   async_op: bool = False) -> Work | None:
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

    return _marked(all_gather, orig)


def _wrap_all_gather_into_tensor(orig: _Fn) -> _Fn:
    import torch.distributed as dist

    @functools.wraps(orig)
    def all_gather_into_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                               group: ProcessGroup | None = None, async_op: bool = False) -> Work | None:
        if (
            output_tensor.dim() == input_tensor.dim() + 1
            and not dist.distributed_c10d._rank_not_in_group(group)
            and output_tensor.shape[0] == dist.get_world_size(group)
            and output_tensor.shape[1:] == input_tensor.shape
        ):
            # stacked output (world, *shape): the concatenated form of input.unsqueeze(0)
            return orig(output_tensor, input_tensor.unsqueeze(0), group, async_op)
        return orig(output_tensor, input_tensor, group, async_op)

    return _marked(all_gather_into_tensor, orig)


def _wrap_reduce_scatter_tensor(orig: _Fn) -> _Fn:
    import torch.distributed as dist

    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def reduce_scatter_tensor(*args: Any, **kwargs: Any) -> Work | None:
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

    return _marked(reduce_scatter_tensor, orig)


def _wrap_all_to_all(orig: _Fn, all_to_all_single: Callable[..., Work | None]) -> _Fn:
    import torch.distributed as dist

    @functools.wraps(orig)
    def all_to_all(output_tensor_list: list[torch.Tensor], input_tensor_list: list[torch.Tensor],
                   group: ProcessGroup | None = None, async_op: bool = False) -> Work | None:
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

    return _marked(all_to_all, orig)


def _wrap_split_group(
        orig: _Fn, new_subgroups_by_enumeration: Callable[..., tuple[ProcessGroup | None, list[ProcessGroup]]]) -> _Fn:
    import torch.distributed as dist

    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def split_group(*args: Any, **kwargs: Any) -> ProcessGroup | None:
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

    return _marked(split_group, orig)


class _NotCuda(torch.Tensor):
    """A view of a translated tensor that answers ``is_cuda`` False (see :func:`_wrap_broadcast`)."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return False


def _wrap_broadcast(orig: _Fn) -> _Fn:
    """``broadcast`` asks ``torch.cuda.get_device_capability`` of every tensor reporting ``is_cuda``.

    torch 2.13 does it to choose an fp8 workaround for GPUs older than sm90.
    A translated tensor reports ``is_cuda`` True but lives on a device with no
    compute capability (the namespace raises rather than invent one), so the
    engine is handed the same tensor under a class answering ``is_cuda`` False:
    same storage, so the received values land in the caller's tensor.
    """
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def broadcast(*args: Any, **kwargs: Any) -> Work | None:
        bound = sig.bind(*args, **kwargs)
        tensor = bound.arguments.get("tensor")
        if isinstance(tensor, torch.Tensor) and tensor.device.type != "cuda" and tensor.is_cuda:
            bound.arguments["tensor"] = tensor.as_subclass(_NotCuda)
        return orig(*bound.args, **bound.kwargs)

    return _marked(broadcast, orig)


def _wrap_available(orig: _Fn, engine_name: str | None) -> _Fn:
    """The program is told the source family's engine is available; torch's own code (c10d checks
    ``is_nccl_available()`` before naming ``ProcessGroupNCCL``, a class a CPU build lacks) gets torch's
    answer (:func:`torchdevice.boundary.split`)."""

    @functools.wraps(orig)
    def available(*args: Any, **kwargs: Any) -> bool:
        name = engine_name
        if name is None:  # is_backend_available(backend)
            backend = args[0] if args else kwargs.get("backend")
            name = str(backend).lower() if backend is not None else None
        if name in _state.claimed and _state.engine is not None and _state.target.report_available:
            return True
        return orig(*args, **kwargs)

    return _marked(boundary.split(available, orig), orig)


def _wrap_init_device_mesh(orig: _Fn) -> _Fn:
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def init_device_mesh(*args: Any, **kwargs: Any) -> DeviceMesh:
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

    return _marked(init_device_mesh, orig)


class LastGroupReference:
    """A translated DDP module's process group, held by the attribute added last to the module, after DDP's
    own reducer and logger.

    Freeing the module then drops the group's last reference from Python, and torch releases the GIL
    before it destroys a group freed there. Freed by the reducer instead, as happens when the program
    destroyed the group first (``destroy_process_group()`` at the end of ``main`` while its DDP model
    is still a local variable), gloo's group joins its worker thread with the GIL held while that
    worker, freeing a finished collective's tensors, waits for the GIL: a hang at exit (seen with sim's
    DDP; NCCL, which the program was written for, has no such worker). It pickles empty, as DDP drops
    its group when pickled."""

    __slots__ = ("group",)

    def __init__(self, group: ProcessGroup | None) -> None:
        self.group = group

    def __reduce__(self) -> tuple[type[LastGroupReference], tuple[None]]:
        return (LastGroupReference, (None,))


#: the DDP attribute that holds its group's last reference (:class:`LastGroupReference`)
LAST_GROUP_REFERENCE = "_torchdevice_last_group_reference"


def _wrap_ddp_init(orig: _Fn) -> _Fn:
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def __init__(*args: Any, **kwargs: Any) -> None:
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
        orig(*bound.args, **bound.kwargs)
        module = arguments["self"]
        module.__dict__[LAST_GROUP_REFERENCE] = LastGroupReference(getattr(module, "process_group", None))

    return _marked(__init__, orig)
