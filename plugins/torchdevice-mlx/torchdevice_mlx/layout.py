"""Memory formats of MLX tensors: ``channels_last`` and the other dense layouts torch keeps.

An MLX base tensor is always contiguous (row-major over its shape). A tensor in another dense layout --
``x.contiguous(memory_format=torch.channels_last)``, ``x.to(memory_format=...)``, ``clone()`` of such a
tensor (``preserve_format``), a host ``channels_last`` tensor or module moved to the device -- is made
as torch would hold it: a base in the layout's physical order (NHWC for channels_last) and a ``permute``
view of it back to the logical shape, so ``stride()`` and ``is_contiguous(memory_format=...)`` answer as
natively. The numbers never change (MLX computes on logical shapes). Results of other ops are contiguous
tensors (natively an elementwise op or a convolution of a channels_last input is channels_last too): the
format is honoured where the program asks for it, not propagated through ops.
"""
from __future__ import annotations

from typing import Any

import torch

from .bridge import to_mlx
from .runtime import Array, mx
from .strides import contiguous_strides
from .tensor import MLXTensor, new_base, unwrap
from .views import make_view

aten = torch.ops.aten

#: memory formats -> the tensor rank they apply to
_RANKED = {torch.channels_last: 4, torch.channels_last_3d: 5}


def _wanted_stride(shape: tuple[int, ...], like: Any, memory_format: torch.memory_format | None) -> tuple | None:
    """The strides torch gives a copy of ``like`` (a tensor, or None) in ``memory_format``; None: contiguous."""
    if memory_format in _RANKED:
        if len(shape) != _RANKED[memory_format]:
            return None  # torch raises for the wrong rank: the op's own checks ran before this (meta)
        return torch.empty(shape, device="meta", memory_format=memory_format).stride()
    if memory_format in (None, torch.preserve_format) and isinstance(like, torch.Tensor) and like.dim() > 1 \
            and not like.is_contiguous() and tuple(like.shape) == tuple(shape):
        return torch.empty_like(torch.empty_strided(like.shape, like.stride(), device="meta")).stride()
    return None


def laid_out(array: Array, stride: tuple | None) -> MLXTensor:
    """An MLX tensor with ``array``'s values and torch strides ``stride`` (a dense layout: a base in its
    physical order and a permute view of it); contiguous when ``stride`` is None or not a permutation of the
    contiguous strides (then only the numbers are kept)."""
    shape = tuple(array.shape)
    if stride is None or len(stride) < 2 or tuple(stride) == contiguous_strides(shape):
        return new_base(array)
    order = sorted(range(len(shape)), key=lambda d: (-stride[d], d))  # outermost first
    base = new_base(mx().contiguous(mx().transpose(array, order)))
    inverse = [order.index(d) for d in range(len(shape))]
    out = make_view(aten.permute.default, base, (inverse,), {})
    if tuple(out.stride()) != tuple(stride):  # size-1 dimensions torch strides otherwise: keep the numbers only
        return new_base(array)
    return out


def like_layout(array_lowering: Any) -> Any:
    """A tensor lowering of ``clone``/``_to_copy`` from their array lowering that honours ``memory_format``."""

    def lowering(a: Any, *args: Any, **kwargs: Any) -> Any:
        memory_format = kwargs.get("memory_format")
        result = array_lowering(unwrap(a), *[unwrap(x) for x in args], **kwargs)
        return laid_out(result, _wanted_stride(tuple(result.shape), a, memory_format))

    lowering.__name__ = getattr(array_lowering, "__name__", "lowering")
    return lowering


def from_host(tensor: torch.Tensor) -> MLXTensor:
    """A new MLX tensor with a copy of host ``tensor``, in its dense layout (channels_last stays channels_last)."""
    stride = _wanted_stride(tuple(tensor.shape), tensor, torch.preserve_format)
    return laid_out(to_mlx(tensor), stride)
