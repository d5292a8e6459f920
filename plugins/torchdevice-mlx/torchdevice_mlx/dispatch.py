"""ATen dispatch for :class:`~torchdevice_mlx.mlxtensor.MLXTensor`: :func:`dispatch` and its routes.

Every ATen op reaching an MLXTensor (its ``__torch_dispatch__``, below autograd) is routed once per
op (:func:`_route`) and then:

1. a lowering in :data:`torchdevice_mlx.lowerings.LOWERINGS` runs it in MLX
   (lazily: MLX evaluates when data is needed);
2. else random ops run on the host with torch's CPU generator (so a seed
   gives the same numbers as torch on CPU);
3. else torch's decomposition table rewrites it into lowered ops (under :class:`_MLXFactories` when
   the decomposition makes tensors, so they are MLX tensors);
4. else it **falls back** to torch on the host: arguments are copied to CPU
   tensors, the op runs, results (and mutated arguments) are copied back.
   Each fallback is counted (:func:`~torchdevice_mlx.conversion.fallback_counts`) and logged once.

Also here: making views (:func:`_make_view`, :func:`_multi_view`: their geometry and data are
:mod:`torchdevice_mlx.views`'), in-place ops (written back with :func:`~torchdevice_mlx.views.write`)
and in-place shape changes. This module binds :func:`dispatch` as the class's dispatcher when imported.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from . import views  # the lowering tables: read as views.LOWERINGS ..., bound on the first dispatch
from .conversion import _MX_ARRAY, _mx_array, _note_fallback, array_from_torch
from .mlxtensor import MLXTensor, _new_base, bind_dispatch
from .views import (
    _GEOMETRY,
    _MULTI_VIEWS,
    _STRIDED,
    _aliases_its_input,
    _contiguous_strides,
    _init_views,
    _run_lowered,
    _view_array,
    _view_geometry,
    write,
)

aten = torch.ops.aten

class _Unholdable(NotImplementedError):
    """A tensor MLX cannot hold (a sparse one left on the host, HostPlacementWarning) among an op's arguments: the
    op runs in torch's own kernel on the host, as natively (not lowered, not decomposed)."""


def _unwrap(x: Any) -> Any:
    if isinstance(x, MLXTensor):
        return x.mx_array
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            raise _Unholdable(f"MLX cannot hold a {x.layout} tensor")
        return array_from_torch(x)
    return x


def _unholdable_among(args: tuple, kwargs: dict) -> bool:
    """Whether a tensor MLX cannot hold is among the arguments (checked off the hot path only)."""
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, (list, tuple)):
            if any(isinstance(b, torch.Tensor) and b.layout != torch.strided for b in a):
                return True
        elif isinstance(a, torch.Tensor) and a.layout != torch.strided:
            return True
    return False


def _wrap(x: Any) -> Any:
    if isinstance(x, _mx_array()):
        return _new_base(x)
    return x


def _make_view(op: OpOverload, src: MLXTensor, args: tuple, kwargs: dict, info: tuple | None = None) -> MLXTensor:
    """A view of ``src`` made by view op ``op``; ``info``: (its lowering, its _GEOMETRY kind, whether it is
    strided) when the caller has them."""
    if info is None:
        info = (views.LOWERINGS.get(op), _GEOMETRY.get(op), op in _STRIDED)
    lowering, kind, strided = info
    base = src._base_t if src._base_t is not None else src
    geometry = _view_geometry(op, src, args, kwargs, kind)
    if op is _AS_STRIDED:
        _check_in_storage(geometry, base.numel())
    if op is _AS_STRIDED or (lowering is None and strided) or src._chain is None:
        return _gathered_view(base, geometry)
    if lowering is not None:
        arr = lowering(src.mx_array, *args, **kwargs)
    else:
        arr = _run_lowered(op, (src.mx_array, *args), kwargs)
    if arr.shape != geometry[0]:
        # the lowering and torch disagree on the view's shape: the strided positions are torch's, and right
        _note_fallback(f"{op} (gathered)")
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


#: id(op) -> (op, its route): decided once per ATen op (OpOverload hashes in Python, so every
#: `op in table` on the hot path costs; an int key does not). The op is kept so its id stays its own.
_ROUTES: dict[int, tuple] = {}
_LOWERED, _VIEW, _MULTI, _INPLACE, _OTHER, _TENSORS = range(6)


def _route(func: OpOverload) -> tuple:
    if not _STRIDED:
        _init_views()
        _mx_array()
    lowering = views.LOWERINGS.get(func)
    random = func in views.RANDOM_OPS
    if func in views.TENSOR_LOWERINGS:
        kind, lowering = _TENSORS, views.TENSOR_LOWERINGS[func]
    elif func in _MULTI_VIEWS:
        kind = _MULTI
    elif func in _GEOMETRY or _aliases_its_input(func):
        kind = _VIEW
    elif func._schema.is_mutable or func.overloadpacket.__name__.endswith("_"):
        kind = _INPLACE
    elif lowering is not None and not random:
        kind = _LOWERED
    else:
        kind = _OTHER
    # no list argument (Tensor[] ...): arguments unwrapped without pytree
    flat = not any("[]" in str(a.type) or "List" in str(a.type) for a in func._schema.arguments)
    view = (lowering, _GEOMETRY.get(func), func in _STRIDED) if kind == _VIEW else None
    route = (kind, None if random else lowering, flat, random, func in views.HOST_OPS, view)
    _ROUTES[id(func)] = (func, route)
    return route


def dispatch(func: OpOverload, args: tuple, kwargs: dict):
    """Run ATen op ``func`` on arguments some of which are :class:`MLXTensor`."""
    entry = _ROUTES.get(id(func))
    kind, lowering, flat, random, host, view = entry[1] if entry is not None else _route(func)
    if kind == _LOWERED:
        try:
            if flat:
                result = lowering(*[a._mx if type(a) is MLXTensor and a._base_t is None else _unwrap(a) for a in args],
                                  **({k: _unwrap(v) for k, v in kwargs.items()} if kwargs else kwargs))
            else:
                result = lowering(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        except NotImplementedError:  # the lowering does not cover these arguments
            return _not_lowered(func, args, kwargs)
        if type(result) is _MX_ARRAY[0]:
            return _new_base(result)
        return tree_map(_wrap, result)
    if kind == _TENSORS:
        try:
            return lowering(*args, **kwargs)
        except NotImplementedError:
            return _not_lowered(func, args, kwargs)
    if kind == _VIEW and args and isinstance(args[0], MLXTensor):
        return _make_view(func, args[0], args[1:], kwargs, view)
    if kind == _MULTI and args and isinstance(args[0], MLXTensor):
        return _multi_view(func, args[0], tuple(args[1:]), kwargs)
    if kind == _INPLACE:
        try:
            inplace = _inplace(func, args, kwargs)
        except _Unholdable:  # before anything is written
            return _host_fallback(func, args, kwargs)
        if inplace is not None:
            return inplace
    if lowering is not None:
        try:
            result = lowering(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        except NotImplementedError:
            return _not_lowered(func, args, kwargs)
        return tree_map(_wrap, result)
    if not random and not host:
        decomp = _decomposition(func)
        if decomp is not None and not _unholdable_among(args, kwargs):
            return _run_decomposition(func, decomp, args, kwargs)
    return _host_fallback(func, args, kwargs, count=not random)


_declined = threading.local()


def _not_lowered(func: OpOverload, args: tuple, kwargs: dict):
    """An op whose lowering does not cover these arguments: torch's decomposition, else the host (directly when a
    tensor MLX cannot hold is among them: torch's own kernel, as natively)."""
    if _unholdable_among(args, kwargs):
        return _host_fallback(func, args, kwargs)
    decomp = _decomposition(func)
    active = getattr(_declined, "ops", None)
    if active is None:
        active = _declined.ops = set()
    if decomp is not None and func not in active:  # a decomposition calling the op back goes to the host
        active.add(func)
        try:
            return _run_decomposition(func, decomp, args, kwargs)
        finally:
            active.discard(func)
    return _host_fallback(func, args, kwargs)


#: op -> whether its decomposition makes new tensors (factories: torch.full(..., device=x.device) ...).
#: An MLXTensor reports device cpu, so those would be host tensors and the rest of the decomposition
#: would run on the host; such decompositions run under _MLXFactories, which makes them MLX tensors.
_MAKES_TENSORS: dict = {}


def _run_decomposition(func: OpOverload, decomp, args: tuple, kwargs: dict):
    quiet = _MAKES_TENSORS.get(func, 0)
    if quiet >= _QUIET_RUNS:
        return decomp(*args, **kwargs)
    mode = _MLXFactories()
    with mode:
        out = decomp(*args, **kwargs)
    # a decomposition seen making tensors always runs under the mode; one that made none in its first
    # _QUIET_RUNS runs no longer pays for it (a later run that makes one gives host tensors: right, slower)
    _MAKES_TENSORS[func] = -(1 << 30) if mode.made else quiet + 1
    return out


_QUIET_RUNS = 8


def _has_tensor(args: tuple, kwargs: dict) -> bool:
    for x in (*args, *kwargs.values()):
        if isinstance(x, torch.Tensor) or (type(x) in (list, tuple) and any(isinstance(y, torch.Tensor) for y in x)):
            return True
    return False


class _MLXFactories(TorchDispatchMode):
    """While a decomposition of an op on MLX tensors runs: host tensors made from nothing are MLX tensors."""

    made = False

    def __torch_dispatch__(self, func: OpOverload, types: tuple, args: tuple = (), kwargs: dict | None = None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if type(out) is torch.Tensor and out.device.type == "cpu" and not _has_tensor(args, kwargs):
            self.made = True
            return MLXTensor(array_from_torch(out))
        return out


def _multi_view(func: OpOverload, src: MLXTensor, args: tuple, kwargs: dict):
    # split/unbind/chunk: each piece is a slice/select view of src (args: those after src)
    if func is aten.unbind.int:
        dim = kwargs.get("dim", args[0] if args else 0)
    else:
        dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
    dim = dim % src.dim()
    if func is aten.unbind.int:
        return [_make_view(aten.select.int, src, (dim, i), {}) for i in range(src.shape[dim])]
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
        out.append(_make_view(aten.slice.Tensor, src, (dim, start, start + n, 1), {}))
        start += n
    return out


_decomp_table: dict | None = None


def _decomposition(func: OpOverload) -> Callable | None:
    global _decomp_table
    if _decomp_table is None:
        from torch._decomp import decomposition_table

        _decomp_table = dict(decomposition_table)
    fn = _decomp_table.get(func)
    if fn is not None:
        return fn
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        return func.decompose
    return None


def _functional_of(func: OpOverload):
    """The out-of-place overload for in-place op ``func`` (``add_.Tensor`` -> ``add.Tensor``), or None."""
    name = func.overloadpacket.__name__
    if not name.endswith("_") or name.startswith("_foreach"):
        return None
    packet = getattr(aten, name[:-1], None)
    if packet is None:
        return None
    return getattr(packet, func._overloadname, None)


_COPY_TO = torch.ops.prims.copy_to.default
_FUNCTIONAL: dict = {}  # in-place op -> its lowered/decomposable out-of-place op, or None
_UNSEEN = object()
_METADATA_INPLACE = {aten.squeeze_, aten.unsqueeze_, aten.t_, aten.transpose_, aten.resize_, aten.as_strided_,
                     aten.swapdims_, aten.swapaxes_, aten.set_}
#: in-place shape changes -> the view op giving the same shape (over the same storage)
_METADATA_AS_VIEW = {"squeeze_": "squeeze", "unsqueeze_": "unsqueeze", "t_": "t", "transpose_": "transpose",
                     "swapdims_": "transpose", "swapaxes_": "transpose"}
_PYTHON_KEYS: list = []


def _metadata_inplace(func: OpOverload, target: MLXTensor, args: tuple, kwargs: dict):
    """``squeeze_``/``unsqueeze_``/``transpose_`` ...: torch's own kernel changes the wrapper's sizes and strides
    (no data is touched), and the MLX array follows."""
    name = func.overloadpacket.__name__
    view_name = _METADATA_AS_VIEW.get(name)
    if name == "resize_" and tuple(args[0]) == tuple(target.shape):
        return target
    if view_name is None:
        raise NotImplementedError(f"{func} changes a tensor's storage or size in place, which MLX tensors do not support")
    packet = getattr(aten, view_name)
    view_op = packet.int if view_name == "transpose" else getattr(packet, func._overloadname)
    size, stride, offset = _view_geometry(view_op, target, tuple(args), kwargs)
    if target._base_t is None and (offset != 0 or stride != _contiguous_strides(size)):
        raise NotImplementedError(f"{func} would leave an MLX base tensor non-contiguous")
    if not _PYTHON_KEYS:
        _PYTHON_KEYS.append(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
                            | torch._C.DispatchKeySet(torch._C.DispatchKey.PythonTLSSnapshot))
    with torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEYS[0]):
        func(target, *args, **kwargs)  # metadata only: the wrapper's storage holds no data
    if target._base_t is None:
        target._mx = target._mx.reshape(size)
    else:
        arr = _run_lowered(view_op, (target.mx_array, *args), kwargs)
        if target._chain is not None:
            target._chain = target._chain + ((view_op, tuple(args), kwargs),)
        target._mx = arr if target._chain is not None else _view_array(target, target._base_t)
    return target


def _inplace(func: OpOverload, args: tuple, kwargs: dict):
    target = args[0] if args else None
    if not isinstance(target, MLXTensor):
        return None
    if func is aten.copy_.default or func is _COPY_TO:
        write(target, _unwrap(args[1]))
        return target
    if func.overloadpacket in _METADATA_INPLACE:
        return _metadata_inplace(func, target, args[1:], kwargs)
    functional = _FUNCTIONAL.get(func, _UNSEEN)
    if functional is _UNSEEN:
        functional = _FUNCTIONAL[func] = _functional_of(func)
        if functional is not None and (func in views.RANDOM_OPS or functional in views.RANDOM_OPS
                                       or (functional not in views.LOWERINGS and _decomposition(functional) is None)):
            functional = _FUNCTIONAL[func] = None
    if functional is None:
        return None
    result = dispatch(functional, args, kwargs)
    write(target, result.mx_array if isinstance(result, MLXTensor) else _unwrap(result))
    return target


def _to_host(x: Any) -> Any:
    # contiguous: an MLX array can be strided (a lazy transpose), and some host kernels assume the
    # layout torch gives its own tensors -- the fused optimizers read param and grad as flat buffers,
    # natively guaranteed alike (AccumulateGrad matches the param's layout)
    return x.torch_cpu().contiguous() if isinstance(x, MLXTensor) else x


def _host_fallback(func: OpOverload, args: tuple, kwargs: dict, *, count: bool = True):
    if count:
        _note_fallback(str(func))

    host_args, host_kwargs = tree_map(_to_host, args), tree_map(_to_host, kwargs)
    out = func(*host_args, **host_kwargs)
    # write mutated arguments back
    mutated = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            src = args[i] if i < len(args) else kwargs.get(arg.name)
            host = host_args[i] if i < len(args) else host_kwargs.get(arg.name)
            # a mutated list (``Tensor(a!)[]``: the _foreach_*_ and _fused_*_ ops) is written back element-wise
            pairs = zip(src, host) if isinstance(src, (list, tuple)) and isinstance(host, (list, tuple)) \
                else ((src, host),)
            for one_src, one_host in pairs:
                if isinstance(one_src, MLXTensor):
                    write(one_src, array_from_torch(one_host))
                    mutated.append((one_host, one_src))

    def back(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            for host, src in mutated:
                if x is host:
                    return src
            # a result MLX cannot hold (sparse, from sparse arguments) stays on the host, as its arguments did
            return MLXTensor(array_from_torch(x)) if x.layout == torch.strided else x
        return x

    return tree_map(back, out)


bind_dispatch(dispatch)
