"""Collectives of torch tensors over ``mx.distributed`` (MLX's ring, MPI, JACCL or NCCL backends).

The functions mirror ``torch.distributed``'s (in place on the tensors they are
given) so code written for ``torch.distributed`` reads the same, but the
transport is MLX's: processes started by ``mlx.launch`` (which writes the
hostfile and sets ``MLX_HOSTFILE``/``MLX_RANK``) and connected by
:func:`init`::

    # mlx.launch --backend ring --hosts 127.0.0.1 -n 2 -- python train.py
    import torch, torchdevice_mlx.distributed as mdist

    mdist.init()                                  # mx.distributed.init(backend="ring", strict=True)
    t = torch.full((4,), float(mdist.get_rank()))
    mdist.all_reduce(t)                           # t == 0 + 1 on every rank
    out = [torch.empty(4) for _ in range(mdist.get_world_size())]
    mdist.all_gather(out, t)

Operations and how they are carried:

* ``all_reduce(tensor, op)``: ``"sum"`` -> ``mx.distributed.all_sum``,
  ``"max"``/``"min"`` -> ``all_max``/``all_min``, ``"avg"`` -> ``all_sum``
  divided by the world size (floating and complex tensors). ``"product"``
  has no MLX collective: :class:`~torchdevice.errors.UnsupportedError`.
  ``torch.distributed.ReduceOp.SUM`` etc. are accepted too.
* ``all_gather`` / ``all_gather_into_tensor``, ``broadcast``, ``send``/``recv``
  move raw bytes (``uint8``), so every dtype arrives bit for bit, float64,
  complex128 and float8 included. ``broadcast`` is a byte-wise ``all_sum``
  in which only ``src`` contributes non-zero bytes: exact, one collective.
* ``send``/``recv``: MLX's ring connects each rank to its two neighbours
  only, so ``dst``/``src`` must be ``rank ± 1`` (mod world size) there;
  other pairs raise UnsupportedError. ``recv`` fills the given tensor.
* The reductions run in the tensor's dtype; MLX has no complex128, so an
  ``all_reduce`` of one raises UnsupportedError.

Each call copies the torch tensor into an MLX array (MLX never aliases torch
memory) and the result back into the tensor (zero-copy view of MLX's
result, then ``copy_``). Tensors stay where they are: torch host tensors.

It imports only ``mlx``, ``torch`` and torchdevice's core.
"""
from __future__ import annotations

import threading
from typing import Any

import mlx.core as mx
import torch
from torch._ops import OpOverload

from torchdevice.errors import UnsupportedError

from .runtime import Array

__all__ = [
    "init",
    "is_initialized",
    "get_rank",
    "get_world_size",
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "broadcast",
    "send",
    "recv",
    "barrier",
    "OPS",
]

BACKEND = "mlx"

#: Reduction names accepted by :func:`all_reduce` (lower case; ReduceOp members map onto them).
OPS = ("sum", "max", "min", "avg")

_MX_DTYPES = {
    torch.float32: mx.float32,
    torch.float16: mx.float16,
    torch.bfloat16: mx.bfloat16,
    torch.float64: mx.float64,
    torch.int8: mx.int8,
    torch.int16: mx.int16,
    torch.int32: mx.int32,
    torch.int64: mx.int64,
    torch.uint8: mx.uint8,
    torch.uint16: mx.uint16,
    torch.uint32: mx.uint32,
    torch.uint64: mx.uint64,
    torch.bool: mx.bool_,
    torch.complex64: mx.complex64,
}

_lock = threading.Lock()
_group = None


# -- the group ---------------------------------------------------------------------------------


def init(backend: str = "ring", strict: bool = True) -> Any:  # an mlx.core.distributed.Group
    """Connect this process to the others (``mx.distributed.init``) and return the group.

    ``backend`` is MLX's (``"ring"``, ``"mpi"``, ``"jaccl"``, ``"nccl"``,
    ``"any"``). With ``strict=True`` (the default) a missing launch
    environment raises instead of giving a group of one process. Idempotent.
    """
    global _group
    with _lock:
        if _group is None:
            _group = mx.distributed.init(strict=strict, backend=backend)
        return _group


def is_initialized() -> bool:
    return _group is not None


def _the_group(group: Any) -> Any:  # an mlx.core.distributed.Group, or None: the one init() made
    if group is not None:
        return group
    if _group is None:
        raise RuntimeError(
            "torchdevice_mlx.distributed is not initialized: call torchdevice_mlx.distributed.init() "
            "in every process (started by mlx.launch)"
        )
    return _group


def get_rank(group: Any = None) -> int:
    return _the_group(group).rank()


def get_world_size(group: Any = None) -> int:
    return _the_group(group).size()


# -- conversions ---------------------------------------------------------------------------------


def _bytes_of(tensor: torch.Tensor) -> Array:
    """The tensor's bytes as a 1-D uint8 MLX array (a copy)."""
    flat = tensor.detach().contiguous().reshape(-1)
    return mx.array(flat.view(torch.uint8))


def _typed(tensor: torch.Tensor, what: str) -> Array:
    """The tensor as a 1-D MLX array of the same dtype (a copy, bit for bit)."""
    dtype = _MX_DTYPES.get(tensor.dtype)
    if dtype is None:
        raise UnsupportedError(
            f"torchdevice_mlx.distributed.{what} of {tensor.dtype}",
            BACKEND,
            f"MLX has no {tensor.dtype}; reduce a tensor of a dtype MLX has "
            f"({', '.join(sorted(str(d).replace('torch.', '') for d in _MX_DTYPES))})",
        )
    return _bytes_of(tensor).view(dtype)


def _write(tensor: torch.Tensor, result: Array) -> None:
    """Copy an MLX result (typed or bytes) into ``tensor``."""
    mx.eval(result)
    out = torch.from_dlpack(result)
    if out.dtype != tensor.dtype:
        out = out.view(tensor.dtype)
    with torch.no_grad():
        tensor.copy_(out.view(tensor.shape))


def _op_name(op: OpOverload) -> str:
    if isinstance(op, str):
        name = op.lower()
    else:
        name = getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]
        name = name.lower()
    if name not in OPS:
        raise UnsupportedError(
            f"torchdevice_mlx.distributed.all_reduce(op={op!r})",
            BACKEND,
            "mx.distributed reduces with sum, max and min (and avg, computed from sum); "
            "for a product, all_gather and multiply",
        )
    return name


# -- collectives ----------------------------------------------------------------------------------


def all_reduce(tensor: torch.Tensor, op: Any = "sum", group: Any = None) -> None:
    """Reduce ``tensor`` across all processes, in place (``torch.distributed.all_reduce``).

    ``op``: ``"sum"`` (default), ``"max"``, ``"min"``, ``"avg"`` or the
    matching ``torch.distributed.ReduceOp``.
    """
    g = _the_group(group)
    name = _op_name(op)
    if name == "avg" and not (tensor.is_floating_point() or tensor.is_complex()):
        raise UnsupportedError(
            f"torchdevice_mlx.distributed.all_reduce(op='avg') of {tensor.dtype}",
            BACKEND,
            "average floating-point tensors, or all_reduce with 'sum' and divide as your integers need",
        )
    if tensor.numel() == 0:
        return
    x = _typed(tensor, "all_reduce")
    if name in ("sum", "avg"):
        result = mx.distributed.all_sum(x, group=g)
        if name == "avg":
            result = result / g.size()
            result = result.astype(x.dtype)
    elif name == "max":
        result = mx.distributed.all_max(x, group=g)
    else:
        result = mx.distributed.all_min(x, group=g)
    _write(tensor, result)


def all_gather_into_tensor(output: torch.Tensor, input: torch.Tensor, group: Any = None) -> None:
    """Gather every rank's ``input`` into ``output`` (``world * numel`` elements, rank order)."""
    g = _the_group(group)
    if output.dtype != input.dtype or output.numel() != input.numel() * g.size():
        raise ValueError(
            f"all_gather_into_tensor: output must hold world_size ({g.size()}) x input "
            f"({input.numel()} elements of {input.dtype}), got {output.numel()} elements of {output.dtype}"
        )
    result = mx.distributed.all_gather(_bytes_of(input), group=g)
    _write(output, result)


def all_gather(tensor_list: list, tensor: torch.Tensor, group: Any = None) -> None:
    """Fill ``tensor_list[r]`` with rank ``r``'s ``tensor`` (``torch.distributed.all_gather``).

    Every rank must contribute the same shape and dtype (as MLX requires).
    """
    g = _the_group(group)
    if len(tensor_list) != g.size():
        raise ValueError(f"all_gather: tensor_list must have world_size ({g.size()}) tensors, got {len(tensor_list)}")
    for i, t in enumerate(tensor_list):
        if t.shape != tensor.shape or t.dtype != tensor.dtype:
            raise ValueError(
                f"all_gather: tensor_list[{i}] is {tuple(t.shape)} {t.dtype}, expected {tuple(tensor.shape)} "
                f"{tensor.dtype} (MLX gathers equal sizes)"
            )
    result = mx.distributed.all_gather(_bytes_of(tensor), group=g)
    mx.eval(result)
    gathered = torch.from_dlpack(result).view(g.size(), -1)
    with torch.no_grad():
        for t, row in zip(tensor_list, gathered):
            t.copy_(row.view(tensor.dtype).view(tensor.shape))


def broadcast(tensor: torch.Tensor, src: int, group: Any = None) -> None:
    """Give every rank ``src``'s ``tensor``, in place (``torch.distributed.broadcast``).

    A byte-wise ``all_sum`` where the other ranks contribute zeros: the
    result is ``src``'s bytes exactly, whatever the dtype.
    """
    g = _the_group(group)
    if not 0 <= src < g.size():
        raise ValueError(f"broadcast: src {src} is not a rank of a group of {g.size()}")
    if tensor.numel() == 0:
        return
    data = _bytes_of(tensor)
    if g.rank() != src:
        data = mx.zeros_like(data)
    result = mx.distributed.all_sum(data, group=g)
    _write(tensor, result)


def _check_peer(peer: int, g: Any, what: str) -> None:
    rank, size = g.rank(), g.size()
    if not 0 <= peer < size or peer == rank:
        raise ValueError(f"{what}: peer {peer} is not another rank of a group of {size}")
    if peer not in ((rank + 1) % size, (rank - 1) % size):
        raise UnsupportedError(
            f"torchdevice_mlx.distributed.{what} between ranks {rank} and {peer}",
            BACKEND,
            "MLX's ring connects each rank to its neighbours (rank +/- 1) only; "
            "relay through them, or use broadcast / all_gather",
        )


def send(tensor: torch.Tensor, dst: int, group: Any = None) -> None:
    """Send ``tensor`` to rank ``dst`` (``torch.distributed.send``); returns when it is sent."""
    g = _the_group(group)
    _check_peer(dst, g, "send")
    mx.eval(mx.distributed.send(_bytes_of(tensor), dst, group=g))


def recv(tensor: torch.Tensor, src: int, group: Any = None) -> int:
    """Receive into ``tensor`` from rank ``src`` (``torch.distributed.recv``); returns ``src``."""
    g = _the_group(group)
    _check_peer(src, g, "recv")
    nbytes = tensor.numel() * tensor.element_size()
    result = mx.distributed.recv((nbytes,), mx.uint8, src, group=g)
    _write(tensor, result)
    return src


def barrier(group: Any = None) -> None:
    """Wait until every rank reaches the barrier (a one-element ``all_sum``)."""
    g = _the_group(group)
    mx.eval(mx.distributed.all_sum(mx.zeros((1,), dtype=mx.int32), group=g))
