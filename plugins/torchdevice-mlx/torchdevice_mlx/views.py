"""Views of :class:`~torchdevice_mlx.tensor.MLXTensor`: which ops are views, their geometry, making them,
and writing tensors (through to a view's base).

Owns: torch's size/stride/storage offset of a view (:func:`view_geometry`, worked out here for the
common view ops, else :func:`meta_geometry` on the meta device), which ops are views (:data:`GEOMETRY`,
:data:`STRIDED`, :data:`MULTI_VIEWS`, :func:`aliases_its_input`), making views (:func:`make_view`,
:func:`multi_view`) and in-place writes through to a view's base (:func:`write`). Reading a view's data
from its base is :func:`torchdevice_mlx.tensor.view_array`.

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

from typing import Any

import torch
from torch._ops import OpOverload

from .bridge import from_mlx, to_mlx
from .conversion import note_fallback, to_mx_dtype, track
from .runtime import ARRAY_CLASS, Array, mx
from .strides import contiguous_strides, index_array
from .tensor import MLXTensor

aten = torch.ops.aten


def meta_geometry(op: OpOverload, src: MLXTensor, args: tuple, kwargs: dict) -> tuple:
    """The size/stride/offset torch gives ``op`` applied to a tensor laid out as ``src`` (on the meta device:
    torch's own rules, and torch's own error when the view is impossible)."""
    base = src._base_t if src._base_t is not None else src
    storage = torch.empty(max(base.numel(), 1), dtype=src.dtype, device="meta")
    like = storage.as_strided(tuple(src.shape), src.stride(), src.storage_offset())
    out = op(like, *args, **kwargs)
    return tuple(out.shape), out.stride(), out.storage_offset()


def view_geometry(op: OpOverload, src: MLXTensor, args: tuple, kwargs: dict, kind: str | None = "") -> tuple:
    """torch's size/stride/storage offset of view op ``op`` applied to ``src`` (worked out here for the
    common view ops, else by torch on the meta device). ``kind``: the op's entry in GEOMETRY, if known."""
    size = tuple(src.shape)
    offset: int | torch.SymInt
    if src._base_t is None:  # a base is contiguous
        stride, offset = contiguous_strides(size), 0
    else:
        stride, offset = src.stride(), src.storage_offset()
    if kind == "":
        kind = GEOMETRY.get(op)
    ndim = len(size)
    if kind == "same":
        return size, stride, offset
    if kind == "reshape" and stride == contiguous_strides(size) and not kwargs:
        new = list(args[0])
        if -1 in new:
            known = 1
            for n in new:
                known *= n if n != -1 else 1
            new[new.index(-1)] = (src.numel() // known) if known else 0
        new_t = tuple(new)
        return new_t, contiguous_strides(new_t), offset
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
    return meta_geometry(op, src, args, kwargs)


#: view op -> how view_geometry works out its geometry (filled by init_views)
GEOMETRY: dict[OpOverload, str] = {}


def _init_geometry() -> None:
    GEOMETRY.update({
        aten.alias.default: "same", aten.detach.default: "same",
        aten.view.default: "reshape", aten._unsafe_view.default: "reshape", aten._reshape_alias.default: "reshape",
        aten.t.default: "t", aten.transpose.int: "transpose", aten.permute.default: "permute",
        aten.select.int: "select", aten.slice.Tensor: "slice", aten.unsqueeze.default: "unsqueeze",
    })


_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single memory "
            "location. Please clone() the tensor before performing the operation.")


def write(target: MLXTensor, value: Any) -> None:
    """Make ``value`` (an MLX array) the data of ``target``, through to its base for a view."""
    base = target._base_t
    if base is None:
        current = target._mx  # a base's array has the tensor's shape and dtype
        if type(value) is ARRAY_CLASS[0] and value.shape == current.shape and value.dtype == current.dtype:
            if current.size:
                target._mx = value
                target._version_n += 1
                track(target)
            return
    core = mx()
    size = tuple(target.shape)
    if 0 in size:
        return  # nothing to write
    dtype = to_mx_dtype(target.dtype)
    if type(value) is not ARRAY_CLASS[0]:
        value = core.array(value, dtype=dtype)
    if value.shape != size:
        value = core.broadcast_to(value, size)
    if value.dtype != dtype:
        value = value.astype(dtype)
    if base is None:
        target._mx = value
        target._version_n += 1
        track(target)
        return
    stride, offset = target.stride(), target.storage_offset()
    if offset == 0 and target.numel() == base.numel() and stride == contiguous_strides(size):
        base._mx = value.reshape(tuple(base.shape))
    elif target._chain is not None and any(op not in STRIDED for op, _, _ in target._chain):
        _host_write(target, base, value)  # a view that reinterprets data (view(dtype), view_as_real ...)
    else:
        if any(s == 0 and n > 1 for n, s in zip(size, stride)):
            raise RuntimeError(_OVERLAP)
        flat = base.mx_array.reshape(-1)
        flat[index_array((size, stride, offset), base.numel())] = value
        base._mx = flat.reshape(tuple(base.shape))
    base._version_n += 1
    track(base)
    target._mx, target._seen = value, base._version_n


def _host_write(target: MLXTensor, base: MLXTensor, value: Array) -> None:
    note_fallback("<view write-back>")
    host = base.torch_cpu()
    view = host
    for op, args, kwargs in target._chain or ():
        view = op(view, *args, **kwargs)
    view.copy_(from_mlx(value, copy=True))
    base._mx = to_mlx(host)


# -- which ops are views; the lowering tables ---------------------------------------------

#: View ops whose result is the same data at strided positions of the input (no reinterpretation).
STRIDED: set[OpOverload] = set()
MULTI_VIEWS = {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.chunk.default}
_ALIASING: dict[OpOverload, bool] = {}


def init_views() -> None:
    """Fill the tables of view ops (on the first dispatch: they name ATen ops, which torch makes on first use)."""
    _init_geometry()
    STRIDED.update(GEOMETRY)
    STRIDED.update([aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.expand.default,
                     aten.diagonal.default, aten.unfold.default, aten.as_strided.default, aten.narrow.default,
                     aten.movedim.int, aten.movedim.intlist, aten.swapaxes.default, aten.swapdims.default,
                     aten.unflatten.int, aten.view.default])


def aliases_its_input(func: OpOverload) -> bool:
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


# -- making views ---------------------------------------------------------------------------

def make_view(op: OpOverload, src: MLXTensor, args: tuple, kwargs: dict, info: tuple | None = None) -> MLXTensor:
    """A view of ``src`` made by view op ``op``; ``info``: (its lowering, its GEOMETRY kind, whether it is
    strided) when the caller has them."""
    if info is None:  # not from the dispatch (which has them): imported here, off its path
        from . import lowerings  # imports mlx.core: only once MLX tensors exist

        info = (lowerings.LOWERINGS.get(op), GEOMETRY.get(op), op in STRIDED)
    lowering, kind, strided = info
    base = src._base_t if src._base_t is not None else src
    geometry = view_geometry(op, src, args, kwargs, kind)
    if op is _AS_STRIDED:
        _check_in_storage(geometry, base.numel())
    if op is _AS_STRIDED or (lowering is None and strided) or src._chain is None:
        return _gathered_view(base, geometry)
    if lowering is not None:
        arr = lowering(src.mx_array, *args, **kwargs)
    else:
        from . import lowerings

        arr = lowerings.run_on_arrays(op, (src.mx_array, *args), kwargs)
    if arr.shape != geometry[0]:
        # the lowering and torch disagree on the view's shape: the strided positions are torch's, and right
        note_fallback(f"{op} (gathered)")
        return _gathered_view(base, geometry)
    return MLXTensor(arr, base=base, chain=src._chain + ((op, args, kwargs),), geometry=geometry)


_AS_STRIDED = aten.as_strided.default


def _gathered_view(base: MLXTensor, geometry: tuple) -> MLXTensor:
    """A view read from (and written to) its base's storage at its strided positions."""
    out = MLXTensor(base.mx_array, base=base, chain=None, geometry=geometry)
    out._seen = -1  # computed on first use
    return out


def _check_in_storage(geometry: tuple, numel: int) -> None:
    size, stride, offset = geometry
    if any(n == 0 for n in size):
        return
    last = offset + sum((n - 1) * st for n, st in zip(size, stride))
    if offset < 0 or last >= numel or any(st < 0 for st in stride):
        # torch would read whatever its storage holds there; an MLX tensor's storage is its base's data only
        raise RuntimeError(f"as_strided: size {list(size)}, stride {list(stride)} and storage offset {offset} reach "
                           f"outside the {numel} elements of the MLX tensor's storage")


def multi_view(func: OpOverload, src: MLXTensor, args: tuple, kwargs: dict) -> list[MLXTensor]:
    # split/unbind/chunk: each piece is a slice/select view of src (args: those after src)
    if func is aten.unbind.int:
        dim = kwargs.get("dim", args[0] if args else 0)
    else:
        dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
    dim = dim % src.dim()
    if func is aten.unbind.int:
        return [make_view(aten.select.int, src, (dim, i), {}) for i in range(src.shape[dim])]
    if func is aten.chunk.default:
        pieces = args[0]
        size = -(-src.shape[dim] // pieces)
        sizes = [min(size, src.shape[dim] - s) for s in range(0, src.shape[dim], size)]
    elif func is aten.split.Tensor:
        size = args[0]
        sizes = [min(size, src.shape[dim] - s) for s in range(0, src.shape[dim], size)] or [0]
    else:
        sizes = list(args[0])
    out, start = [], 0
    for n in sizes:
        out.append(make_view(aten.slice.Tensor, src, (dim, start, start + n, 1), {}))
        start += n
    return out
