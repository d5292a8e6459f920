"""float16/bfloat16 ops computed in float32 and rounded once, as torch computes them.

torch's CPU and CUDA kernels compute a reduced-precision op in its "opmath" type (float32: the
inputs converted, the arithmetic and any accumulation in float32, the result rounded to the
input's dtype once). A lowering written as several MLX ops on bfloat16 arrays rounds after each
of them (GELU, SiLU, log_softmax, var ...) and MLX accumulates cumulative sums and pooling windows
in bfloat16, so results differ from torch's by one or more bfloat16 steps (a sum over a row by far
more). :func:`apply` wraps the lowerings of such ops: where every floating array argument has one
half dtype, they are cast to float32, the lowering runs, and its float32 results are cast back.

Left as they are: ops that round once anyway (add, mul, neg, max, copies, views ...), and the
matmul/convolution family, whose float32 form would cost a half-precision GPU its fast kernels
(``addmm``/``conv`` round the product before adding the bias: one bfloat16 step from torch at most).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as core
import torch

from .runtime import Array

_HALF = (core.float16, core.bfloat16)
_FLOATS = (core.float16, core.bfloat16, core.float32, core.float64)
_HALF_DTYPES = {torch.float16: core.float16, torch.bfloat16: core.bfloat16}

#: ATen/prims overload packets (by name) computed in float32 for half inputs.
OPMATH = (
    # activations and their backward
    "gelu", "gelu_backward", "silu", "sigmoid", "exp", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
    "erfinv", "erf_inv", "reciprocal", "exp2", "atan2", "pow",
    # softmax family
    "_softmax", "_softmax_backward_data", "_log_softmax_backward_data",  # _log_softmax: in its lowering
    # reductions and scans
    "mean", "var", "var_mean", "std", "prod", "cumsum", "cumprod", "nll_loss_forward", "nll_loss_backward",
    # pooling and normalisation
    "avg_pool2d", "avg_pool2d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
    "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training", "native_batch_norm_backward",
    # fused pointwise
    "lerp", "addcmul", "addcdiv", "fmod", "round",
)


def _half_of(values: Array) -> object | None:
    """The one half dtype of the floating arrays among ``values``; None if there are none, if any is
    float32/64, or if they mix float16 with bfloat16 (promotion decides those: left to the lowering)."""
    half = None
    for v in values:
        if type(v) is core.array and v.dtype in _FLOATS:
            if v.dtype not in _HALF or (half is not None and v.dtype != half):
                return None
            half = v.dtype
    return half


def _up(v: Any, half: Any) -> Any:  # v: an argument (an array or not); half: an MLX dtype
    return v.astype(core.float32) if type(v) is core.array and v.dtype == half else v


def _down(v: Any, half: Any) -> Any:
    if type(v) is core.array:
        return v.astype(half) if v.dtype == core.float32 else v
    if isinstance(v, (tuple, list)):
        return type(v)(_down(x, half) for x in v)
    return v


#: ops whose third argument is ``half_to_float`` (a float32 result asked for: the lowering gives it)
_HALF_TO_FLOAT = ("_softmax", "_log_softmax")


def opmath(fn: Callable, *, half_to_float: bool = False) -> Callable:
    def lowering(*args: Any, **kwargs: Any) -> Any:
        half = _half_of(args) if not kwargs else _half_of((*args, *kwargs.values()))
        if half is None or (half_to_float and (kwargs.get("half_to_float") or (len(args) > 2 and args[2]))):
            return fn(*args, **kwargs)
        if kwargs:
            dtype = kwargs.get("dtype")
            if dtype is not None:
                if _HALF_DTYPES.get(dtype) != half:  # another result dtype asked for: the lowering gives it
                    return fn(*args, **kwargs)
                kwargs = {**kwargs, "dtype": torch.float32}
            kwargs = {k: _up(v, half) for k, v in kwargs.items()}
        return _down(fn(*(_up(a, half) for a in args), **kwargs), half)
    lowering.__wrapped__ = fn  # type: ignore[attr-defined]
    return lowering


def apply(lowerings: dict) -> None:
    """Wrap the lowerings of :data:`OPMATH` ops in ``lowerings`` (in place)."""
    names = set(OPMATH)
    for op, fn in list(lowerings.items()):
        packet = getattr(op, "overloadpacket", None)
        if packet is not None and packet.__name__ in names and not hasattr(fn, "__wrapped__"):
            lowerings[op] = opmath(fn, half_to_float=packet.__name__ in _HALF_TO_FLOAT)
