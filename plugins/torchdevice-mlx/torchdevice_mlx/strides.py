"""torch's strided layouts as numbers: contiguous strides, and the storage positions a layout reaches.

MLX arrays have no strides torch can see: an MLX view's strides are torch's, worked out from these
(:mod:`torchdevice_mlx.views`), and its data is read from and written to its base's storage at the
positions :func:`index_array` gives.
"""
from __future__ import annotations

from .runtime import Array, mx

_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}


def contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a row-major (contiguous) tensor of shape ``size``, as torch gives them."""
    hit = _STRIDES.get(size)
    if hit is None:
        strides, acc = [], 1
        for n in reversed(size):
            strides.append(acc)
            acc *= max(n, 1)
        hit = tuple(reversed(strides))
        if len(_STRIDES) < 4096:
            _STRIDES[tuple(size)] = hit
    return hit


def index_array(geometry: tuple, total: int) -> Array:
    """Flat positions in a (contiguous) storage of ``total`` elements of every element of a tensor laid out as
    ``geometry`` (size, stride, storage offset)."""
    core = mx()
    size, stride, offset = geometry
    itype = core.int32 if total < 2**31 else core.int64
    idx = core.array(offset, dtype=itype)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (core.arange(n, dtype=itype) * s).reshape(shape)
    return core.broadcast_to(idx, tuple(size))
