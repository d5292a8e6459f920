"""Lowerings on MLX tensors themselves, not on their arrays (:data:`TENSOR_LOWERINGS`).

An op is lowered on its tensors where its result is more than an array (``clone``/``_to_copy`` keep the
memory format the program asks for: :mod:`torchdevice_mlx.layout`) or where it writes arguments its
schema does not mark as written (``native_batch_norm`` updates the running statistics).
"""
from __future__ import annotations

from typing import Any

import torch

from .layout import like_layout
from .lowerings import batch_norm_arrays, clone, to_copy
from .tensor import MLXTensor, new_base, unwrap
from .views import write

aten = torch.ops.aten


def native_batch_norm_tensors(x: MLXTensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                              running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool,
                              momentum: float, eps: float) -> tuple[MLXTensor, MLXTensor, MLXTensor]:
    """``native_batch_norm`` on MLX tensors: it updates the running statistics in place (its schema does not
    say so), so it is lowered on the tensors, not on their arrays."""
    if training and any(t is not None and not isinstance(t, MLXTensor) for t in (running_mean, running_var)):
        raise NotImplementedError("running statistics held outside MLX")  # the decomposition updates them
    xa, wa, ba = unwrap(x), unwrap(weight), unwrap(bias)
    rm, rv = unwrap(running_mean), unwrap(running_var)
    out, save_mean, save_invstd, new_rm, new_rv = batch_norm_arrays(xa, wa, ba, rm, rv, training, momentum, eps)
    if training and isinstance(running_mean, MLXTensor) and isinstance(running_var, MLXTensor):
        write(running_mean, new_rm)
        write(running_var, new_rv)
    return new_base(out), new_base(save_mean), new_base(save_invstd)


#: lowerings taking MLX tensors themselves (they make tensors with a layout, or write to arguments)
TENSOR_LOWERINGS: dict[Any, Any] = {
    aten.native_batch_norm.default: native_batch_norm_tensors,
    # memory_format (channels_last, or a preserved dense layout) honoured: torchdevice_mlx.layout
    aten.clone.default: like_layout(clone), aten._to_copy.default: like_layout(to_copy)}
