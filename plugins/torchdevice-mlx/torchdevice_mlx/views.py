"""View geometry, reading views and writing tensors, for :class:`~torchdevice_mlx.mlxtensor.MLXTensor`.

Owns: torch's size/stride/storage offset of a view (:func:`_view_geometry`, worked out here for the
common view ops, else :func:`_meta_geometry` on the meta device), a view's data recomputed from its base
(:func:`_view_array`), in-place writes through to a view's base (:func:`write`), which ops are views,
and the lowering tables bound on the first dispatch (:func:`_init_views`). Nothing here makes an
MLXTensor (making views is :mod:`torchdevice_mlx.dispatch`'s), so the class can import this module.

Aliasing and strides (MLX arrays are immutable)
  A *base* tensor owns its array and a version number; it is contiguous
  (offset 0, row-major strides). A view (``view``, ``transpose``, slicing,
  ``select``, ``diagonal``, ``as_strided``, ``unfold``, ``detach``, ...) records
  its base, the chain of view ops from it, and the size/stride/storage offset
  torch gives that view (the same numbers as natively: ``x.t().stride()``,
  ``is_contiguous()``, ``view()`` of a non-viewable layout raising torch's error).
  Its array is recomputed from the base when the base's version changed
  (replaying the chain in MLX, or gathering the base's elements at the view's
  strided positions). An in-place write to a base replaces its array; to a
  view, it is scattered into the base's array at the view's strided positions,
  in MLX. Only views that reinterpret data (``view(dtype)``, ``view_as_real``
  ...) are computed, and written back, on the host (counted fallbacks).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch._ops import OpOverload

from ._mlx import mx
from .conversion import _MX_ARRAY, _note_fallback, _track, array_from_torch, to_mx_dtype, torch_from_array

if TYPE_CHECKING:
    from .mlxtensor import MLXTensor

aten = torch.ops.aten

_STRIDES: dict = {}


def _contiguous_strides(size: Sequence[int]) -> tuple:
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


def _meta_geometry(op: OpOverload, src: MLXTensor, args: tuple, kwargs: dict) -> tuple:
    """The size/stride/offset torch gives ``op`` applied to a tensor laid out as ``src`` (on the meta device:
    torch's own rules, and torch's own error when the view is impossible)."""
    base = src._base_t if src._base_t is not None else src
    storage = torch.empty(max(base.numel(), 1), dtype=src.dtype, device="meta")
    like = storage.as_strided(tuple(src.shape), src.stride(), src.storage_offset())
    out = op(like, *args, **kwargs)
    return tuple(out.shape), out.stride(), out.storage_offset()


def _view_geometry(op: OpOverload, src: MLXTensor, args: tuple, kwargs: dict, kind: str | None = "") -> tuple:
    """torch's size/stride/storage offset of view op ``op`` applied to ``src`` (worked out here for the
    common view ops, else by torch on the meta device). ``kind``: the op's entry in _GEOMETRY, if known."""
    size = tuple(src.shape)
    if src._base_t is None:  # a base is contiguous
        stride, offset = _contiguous_strides(size), 0
    else:
        stride, offset = src.stride(), src.storage_offset()
    if kind == "":
        kind = _GEOMETRY.get(op)
    ndim = len(size)
    if kind == "same":
        return size, stride, offset
    if kind == "reshape" and stride == _contiguous_strides(size) and not kwargs:
        new = list(args[0])
        if -1 in new:
            known = 1
            for n in new:
                known *= n if n != -1 else 1
            new[new.index(-1)] = (src.numel() // known) if known else 0
        new_t = tuple(new)
        return new_t, _contiguous_strides(new_t), offset
    if kind == "t" and ndim <= 2:
        return size[::-1], stride[::-1], offset
    if kind == "transpose" and ndim and not kwargs:
        d0, d1 = args[0] % ndim, args[1] % ndim
        sz, st = list(size), list(stride)
        sz[d0], sz[d1], st[d0], st[d1] = sz[d1], sz[d0], st[d1], st[d0]
        return tuple(sz), tuple(st), offset
    if kind == "permute" and ndim and not kwargs:
        dims = [d % ndim for d in args[0]]
        return tuple(size[d] for d in dims), tuple(stride[d] for d in dims), offset
    if kind == "select" and ndim and not kwargs:
        d, i = args[0] % ndim, args[1]
        i = i + size[d] if i < 0 else i
        if 0 <= i < size[d]:
            return size[:d] + size[d + 1:], stride[:d] + stride[d + 1:], offset + i * stride[d]
    if kind == "slice" and ndim and not kwargs:
        d = (args[0] if args else 0) % ndim
        start = args[1] if len(args) > 1 and args[1] is not None else 0
        end = args[2] if len(args) > 2 and args[2] is not None else size[d]
        step = args[3] if len(args) > 3 else 1
        n = size[d]
        start, end = (start + n if start < 0 else start), (end + n if end < 0 else end)
        start, end = max(0, min(start, n)), max(0, min(end, n))
        if step > 0:
            length = max(0, -(-(end - start) // step))
            return (size[:d] + (length,) + size[d + 1:], stride[:d] + (stride[d] * step,) + stride[d + 1:],
                    offset + start * stride[d])
    if kind == "unsqueeze" and not kwargs:
        d = args[0] % (ndim + 1)
        inner = size[d] * stride[d] if d < ndim else 1
        return size[:d] + (1,) + size[d:], stride[:d] + (inner,) + stride[d:], offset
    return _meta_geometry(op, src, args, kwargs)


_GEOMETRY: dict = {}


def _init_geometry() -> None:
    _GEOMETRY.update({
        aten.alias.default: "same", aten.detach.default: "same",
        aten.view.default: "reshape", aten._unsafe_view.default: "reshape", aten._reshape_alias.default: "reshape",
        aten.t.default: "t", aten.transpose.int: "transpose", aten.permute.default: "permute",
        aten.select.int: "select", aten.slice.Tensor: "slice", aten.unsqueeze.default: "unsqueeze",
    })


def _index_array(geometry: tuple, total: int):
    """Flat positions in the base's (contiguous) storage of every element of a view laid out as ``geometry``."""
    core = mx()
    size, stride, offset = geometry
    itype = core.int32 if total < 2**31 else core.int64
    idx = core.array(offset, dtype=itype)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (core.arange(n, dtype=itype) * s).reshape(shape)
    return core.broadcast_to(idx, tuple(size))


def _geometry(tensor: MLXTensor) -> tuple:
    return tuple(tensor.shape), tensor.stride(), tensor.storage_offset()


def _view_array(view: MLXTensor, base: MLXTensor):
    """``view``'s data, computed from its base's current array."""
    chain = view._chain
    if chain is None:  # gathered at its strided positions
        return mx().take(base.mx_array.reshape(-1), _index_array(_geometry(view), base.numel()))
    arr = base.mx_array
    if arr.shape != view._root:
        arr = arr.reshape(view._root)
    for op, args, kwargs in chain:
        arr = _run_lowered(op, (arr, *args), kwargs)
    return arr


_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single memory "
            "location. Please clone() the tensor before performing the operation.")


def write(target: MLXTensor, value) -> None:
    """Make ``value`` (an MLX array) the data of ``target``, through to its base for a view."""
    base = target._base_t
    if base is None:
        current = target._mx  # a base's array has the tensor's shape and dtype
        if type(value) is _MX_ARRAY[0] and value.shape == current.shape and value.dtype == current.dtype:
            if current.size:
                target._mx = value
                target._version_n += 1
                _track(target)
            return
    core = mx()
    size = tuple(target.shape)
    if 0 in size:
        return  # nothing to write
    dtype = to_mx_dtype(target.dtype)
    if type(value) is not _MX_ARRAY[0]:
        value = core.array(value, dtype=dtype)
    if value.shape != size:
        value = core.broadcast_to(value, size)
    if value.dtype != dtype:
        value = value.astype(dtype)
    if base is None:
        target._mx = value
        target._version_n += 1
        _track(target)
        return
    stride, offset = target.stride(), target.storage_offset()
    if offset == 0 and target.numel() == base.numel() and stride == _contiguous_strides(size):
        base._mx = value.reshape(tuple(base.shape))
    elif target._chain is not None and any(op not in _STRIDED for op, _, _ in target._chain):
        _host_write(target, base, value)  # a view that reinterprets data (view(dtype), view_as_real ...)
    else:
        if any(s == 0 and n > 1 for n, s in zip(size, stride)):
            raise RuntimeError(_OVERLAP)
        flat = base.mx_array.reshape(-1)
        flat[_index_array((size, stride, offset), base.numel())] = value
        base._mx = flat.reshape(tuple(base.shape))
    base._version_n += 1
    _track(base)
    target._mx, target._seen = value, base._version_n


def _host_write(target: MLXTensor, base: MLXTensor, value) -> None:
    _note_fallback("<view write-back>")
    host = base.torch_cpu()
    view = host
    for op, args, kwargs in target._chain or ():
        view = op(view, *args, **kwargs)
    view.copy_(torch_from_array(value))
    base._mx = array_from_torch(host)



# -- which ops are views; the lowering tables ---------------------------------------------

#: View ops whose result is the same data at strided positions of the input (no reinterpretation).
_STRIDED: set = set()
_MULTI_VIEWS = {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.chunk.default}
_ALIASING: dict = {}


#: the lowering tables (torchdevice_mlx.lowerings imports mlx.core: bound on the first dispatch, so other
#: modules read them as ``views.LOWERINGS`` ..., never by a name imported before the binding)
LOWERINGS: dict = {}
TENSOR_LOWERINGS: dict = {}  # ops lowered on the tensors themselves (they write some arguments)
RANDOM_OPS: set = set()
HOST_OPS: set = set()


def _init_views() -> None:
    global LOWERINGS, TENSOR_LOWERINGS, RANDOM_OPS, HOST_OPS
    from . import lowerings

    LOWERINGS, RANDOM_OPS, HOST_OPS = lowerings.LOWERINGS, lowerings.RANDOM_OPS, lowerings.HOST_OPS
    TENSOR_LOWERINGS = lowerings.TENSOR_LOWERINGS
    _init_geometry()
    _STRIDED.update(_GEOMETRY)
    _STRIDED.update([aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.expand.default,
                     aten.diagonal.default, aten.unfold.default, aten.as_strided.default, aten.narrow.default,
                     aten.movedim.int, aten.movedim.intlist, aten.swapaxes.default, aten.swapdims.default,
                     aten.unflatten.int, aten.view.default])


def _aliases_its_input(func: OpOverload) -> bool:
    """Whether ATen op ``func`` returns one tensor aliasing its first argument (a view op, per its schema)."""
    hit = _ALIASING.get(func)
    if hit is None:
        schema = func._schema
        hit = _ALIASING[func] = bool(
            getattr(func, "is_view", False) and len(schema.returns) == 1
            # a composite (reshape, flatten, to, narrow ...) decomposes into the primitive view ops, each aliased
            and not torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")
            and str(schema.returns[0].type) == "Tensor" and schema.returns[0].alias_info is not None
            and not schema.returns[0].alias_info.is_write)
    return hit


def _run_lowered(op: OpOverload, args: tuple, kwargs: dict):
    lowering = LOWERINGS.get(op)
    if lowering is not None:
        return lowering(*args, **kwargs)
    # a view op MLX has no lowering for that reinterprets data (view(dtype), view_as_real ...): on the host
    _note_fallback(str(op))
    return array_from_torch(op(torch_from_array(args[0]), *args[1:], **kwargs).contiguous())
