"""ATen dispatch for :class:`~torchdevice_mlx.tensor.MLXTensor`: :func:`dispatch` and its routes.

Every ATen op reaching an MLXTensor (its ``__torch_dispatch__``, below autograd) is routed once per
op (:func:`_route`) and then:

1. a lowering in :data:`torchdevice_mlx.lowerings.LOWERINGS` (or, on the tensors themselves,
   :data:`torchdevice_mlx.tensor_lowerings.TENSOR_LOWERINGS`) runs it in MLX
   (lazily: MLX evaluates when data is needed);
2. else random ops run on the host with torch's CPU generator (so a seed
   gives the same numbers as torch on CPU);
3. else torch's decomposition table rewrites it into lowered ops (under :class:`_MLXFactories` when
   the decomposition makes tensors, so they are MLX tensors);
4. else it **falls back** to torch on the host: arguments are copied to CPU
   tensors, the op runs, results (and mutated arguments) are copied back.
   Each fallback is counted (:func:`~torchdevice_mlx.conversion.fallback_counts`) and logged once.

Also here: in-place ops (written back with :func:`~torchdevice_mlx.views.write`) and in-place shape
changes; views are made by :mod:`torchdevice_mlx.views`. This module binds :func:`dispatch` as the
class's dispatcher when imported.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from .bridge import to_mlx
from .conversion import note_fallback
from .runtime import ARRAY_CLASS, array_class
from .strides import contiguous_strides
from .tensor import MLXTensor, Unholdable, bind_dispatch, new_base, unwrap, view_array
from .views import (
    GEOMETRY,
    MULTI_VIEWS,
    STRIDED,
    aliases_its_input,
    init_views,
    make_view,
    multi_view,
    view_geometry,
    write,
)

aten = torch.ops.aten

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
    if isinstance(x, array_class()):
        return new_base(x)
    return x


#: id(op) -> (op, its route): decided once per ATen op (OpOverload hashes in Python, so every
#: `op in table` on the hot path costs; an int key does not). The op is kept so its id stays its own.
_ROUTES: dict[int, tuple] = {}
_LOWERED, _VIEW, _MULTI, _INPLACE, _OTHER, _TENSORS = range(6)


def _route(func: OpOverload) -> tuple:
    from . import lowerings, tensor_lowerings  # they import mlx.core: only once MLX tensors exist

    if not STRIDED:
        init_views()
        array_class()
    lowering = lowerings.LOWERINGS.get(func)
    random = func in lowerings.RANDOM_OPS
    if func in tensor_lowerings.TENSOR_LOWERINGS:
        kind, lowering = _TENSORS, tensor_lowerings.TENSOR_LOWERINGS[func]
    elif func in MULTI_VIEWS:
        kind = _MULTI
    elif func in GEOMETRY or aliases_its_input(func):
        kind = _VIEW
    elif func._schema.is_mutable or func.overloadpacket.__name__.endswith("_"):
        kind = _INPLACE
    elif lowering is not None and not random:
        kind = _LOWERED
    else:
        kind = _OTHER
    # no list argument (Tensor[] ...): arguments unwrapped without pytree
    flat = not any("[]" in str(a.type) or "List" in str(a.type) for a in func._schema.arguments)
    view = (lowering, GEOMETRY.get(func), func in STRIDED) if kind == _VIEW else None
    route = (kind, None if random else lowering, flat, random, func in lowerings.HOST_OPS, view)
    _ROUTES[id(func)] = (func, route)
    return route


def dispatch(func: OpOverload, args: tuple, kwargs: dict) -> Any:
    """Run ATen op ``func`` on arguments some of which are :class:`MLXTensor`."""
    entry = _ROUTES.get(id(func))
    kind, lowering, flat, random, host, view = entry[1] if entry is not None else _route(func)
    if kind == _LOWERED:
        try:
            if flat:
                result = lowering(*[a._mx if type(a) is MLXTensor and a._base_t is None else unwrap(a) for a in args],
                                  **({k: unwrap(v) for k, v in kwargs.items()} if kwargs else kwargs))
            else:
                result = lowering(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        except NotImplementedError:  # the lowering does not cover these arguments
            return _not_lowered(func, args, kwargs)
        if type(result) is ARRAY_CLASS[0]:
            return new_base(result)
        return tree_map(_wrap, result)
    if kind == _TENSORS:
        try:
            return lowering(*args, **kwargs)
        except NotImplementedError:
            return _not_lowered(func, args, kwargs)
    if kind == _VIEW and args and isinstance(args[0], MLXTensor):
        return make_view(func, args[0], args[1:], kwargs, view)
    if kind == _MULTI and args and isinstance(args[0], MLXTensor):
        return multi_view(func, args[0], tuple(args[1:]), kwargs)
    if kind == _INPLACE:
        try:
            inplace = _inplace(func, args, kwargs)
        except Unholdable:  # before anything is written
            return _host_fallback(func, args, kwargs)
        if inplace is not None:
            return inplace
    if lowering is not None:
        try:
            result = lowering(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        except NotImplementedError:
            return _not_lowered(func, args, kwargs)
        return tree_map(_wrap, result)
    if not random and not host:
        decomp = _decomposition(func)
        if decomp is not None and not _unholdable_among(args, kwargs):
            return _run_decomposition(func, decomp, args, kwargs)
    return _host_fallback(func, args, kwargs, count=not random)


_declined = threading.local()


def _not_lowered(func: OpOverload, args: tuple, kwargs: dict) -> Any:
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


def _run_decomposition(func: OpOverload, decomp: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
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

    def __torch_dispatch__(self, func: OpOverload, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if type(out) is torch.Tensor and out.device.type == "cpu" and not _has_tensor(args, kwargs):
            self.made = True
            return MLXTensor(to_mlx(out))
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


def _functional_of(func: OpOverload) -> OpOverload | None:
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


def _metadata_inplace(func: OpOverload, target: MLXTensor, args: tuple, kwargs: dict) -> MLXTensor:
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
    size, stride, offset = view_geometry(view_op, target, tuple(args), kwargs)
    if target._base_t is None and (offset != 0 or stride != contiguous_strides(size)):
        raise NotImplementedError(f"{func} would leave an MLX base tensor non-contiguous")
    if not _PYTHON_KEYS:
        _PYTHON_KEYS.append(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
                            | torch._C.DispatchKeySet(torch._C.DispatchKey.PythonTLSSnapshot))
    with torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEYS[0]):
        func(target, *args, **kwargs)  # metadata only: the wrapper's storage holds no data
    if target._base_t is None:
        target._mx = target._mx.reshape(size)
    else:
        from . import lowerings  # imports mlx.core: only once MLX tensors exist

        arr = lowerings.run_on_arrays(view_op, (target.mx_array, *args), kwargs)
        if target._chain is not None:
            target._chain = target._chain + ((view_op, tuple(args), kwargs),)
        target._mx = arr if target._chain is not None else view_array(target, target._base_t)
    return target


def _inplace(func: OpOverload, args: tuple, kwargs: dict) -> MLXTensor | None:
    target = args[0] if args else None
    if not isinstance(target, MLXTensor):
        return None
    if func is aten.copy_.default or func is _COPY_TO:
        write(target, unwrap(args[1]))
        return target
    if func.overloadpacket in _METADATA_INPLACE:
        return _metadata_inplace(func, target, args[1:], kwargs)
    functional = _FUNCTIONAL.get(func, _UNSEEN)
    if functional is _UNSEEN:
        functional = _FUNCTIONAL[func] = _functional_of(func)
        from . import lowerings  # imports mlx.core: only once MLX tensors exist

        if functional is not None and (func in lowerings.RANDOM_OPS or functional in lowerings.RANDOM_OPS
                                       or (functional not in lowerings.LOWERINGS
                                           and _decomposition(functional) is None)):
            functional = _FUNCTIONAL[func] = None
    if functional is None:
        return None
    result = dispatch(functional, args, kwargs)
    write(target, result.mx_array if isinstance(result, MLXTensor) else unwrap(result))
    return target


def _to_host(x: Any) -> Any:
    # contiguous: an MLX array can be strided (a lazy transpose), and some host kernels assume the
    # layout torch gives its own tensors -- the fused optimizers read param and grad as flat buffers,
    # natively guaranteed alike (AccumulateGrad matches the param's layout)
    return x.torch_cpu().contiguous() if isinstance(x, MLXTensor) else x


def _host_fallback(func: OpOverload, args: tuple, kwargs: dict, *, count: bool = True) -> Any:
    if count:
        note_fallback(str(func))

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
                    write(one_src, to_mlx(one_host))
                    mutated.append((one_host, one_src))

    def back(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            for host, src in mutated:
                if x is host:
                    return src
            # a result MLX cannot hold (sparse, from sparse arguments) stays on the host, as its arguments did
            return MLXTensor(to_mlx(x)) if x.layout == torch.strided else x
        return x

    return tree_map(back, out)


bind_dispatch(dispatch)
