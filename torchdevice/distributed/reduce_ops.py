"""Reduce ops the engine lacks, lowered to ones it has, with NCCL's numbers.

``ReduceOp.PREMUL_SUM(factor)`` (NCCL only; FSDP2 reduce-scatters with it under
``set_gradient_divide_factor``) is NCCL's "multiply every input by ``factor``, then sum":
lowered to that multiply (by ``factor`` in the tensor's dtype, as NCCL takes the scalar)
plus ``ReduceOp.SUM``, for ``all_reduce`` and ``all_reduce_coalesced`` (in place, as NCCL
overwrites the tensor anyway), ``reduce_scatter_single`` (torch 2.13's name, which FSDP2 calls;
``reduce_scatter_tensor`` is its deprecated alias) and ``reduce_scatter`` (on a scaled
copy: NCCL leaves the input as it was) and so for their coalesced forms
(``_coalescing_manager`` records the lowered calls). ``reduce`` (only the destination's tensor
changes) and tensors that are not floating point raise :class:`~torchdevice.errors.UnsupportedError`
naming the op and the engine. ``ReduceOp.AVG`` needs nothing on gloo: torch 2.13's gloo has it for
all of these (measured, tests/dist_programs/nccl_collectives.py).
"""
from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..errors import UnsupportedError
from .arguments import _state

if TYPE_CHECKING:
    _Fn = Callable[..., Any]

#: the collectives lowered, and the parameter holding what they reduce
LOWERED = {"all_reduce": "tensor", "all_reduce_coalesced": "tensors", "reduce_scatter_tensor": "input",
           "reduce_scatter_single": "input", "reduce_scatter": "input_list"}
#: what cannot be lowered (only the destination's tensor may change)
REFUSED = ("reduce",)


def _premul_factor(op: Any) -> float | torch.Tensor | None:
    """The factor of a ``ReduceOp.PREMUL_SUM(factor)``, or None for any other op."""
    import torch.distributed as dist

    # a plain ReduceOp.SUM is a RedOpType (no .op); PREMUL_SUM(f) a ReduceOp holding op and factor
    if getattr(op, "op", None) == dist.ReduceOp.PREMUL_SUM:
        return op.factor
    return None


def _scale(tensor: torch.Tensor, factor: float | torch.Tensor, what: str, in_place: bool) -> torch.Tensor:
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise UnsupportedError(f"{what} with ReduceOp.PREMUL_SUM on a {tensor.dtype} tensor",
                               f"{_state.backend_name} ({_state.engine})",
                               "a floating-point tensor: the factor is applied in the tensor's dtype")
    # NCCL converts the factor to the tensor's dtype before it multiplies
    scale = torch.as_tensor(factor).to(device=tensor.device, dtype=tensor.dtype)
    return tensor.mul_(scale) if in_place else tensor * scale


def wrap_premul_sum(orig: _Fn, name: str) -> _Fn:
    """``orig`` (a reduce collective) taking ``ReduceOp.PREMUL_SUM`` on an engine without it."""
    import torch.distributed as dist

    sig = inspect.signature(orig)
    param = LOWERED.get(name)

    @functools.wraps(orig)
    def lowered(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        factor = _premul_factor(bound.arguments.get("op"))
        if factor is None:
            return orig(*args, **kwargs)
        if param is None:
            raise UnsupportedError(f"torch.distributed.{name} with ReduceOp.PREMUL_SUM",
                                   f"{_state.backend_name} ({_state.engine})",
                                   "all_reduce with ReduceOp.PREMUL_SUM (lowered to a scale and SUM)")
        what = f"torch.distributed.{name}"
        in_place = name.startswith("all_reduce")
        value = bound.arguments[param]
        if isinstance(value, torch.Tensor):
            bound.arguments[param] = _scale(value, factor, what, in_place)
        else:
            bound.arguments[param] = [_scale(t, factor, what, in_place) for t in value]
        bound.arguments["op"] = dist.ReduceOp.SUM
        return orig(*bound.args, **bound.kwargs)

    lowered.__torchdevice_wrapped__ = orig  # type: ignore[attr-defined]
    return lowered
