"""MLX-backed torch tensors: :class:`MLXTensor` and its ATen dispatch.

An :class:`MLXTensor` is a torch wrapper subclass (``_make_wrapper_subclass``)
whose data is an ``mlx.core.array``; every ATen op reaching it goes through
``__torch_dispatch__`` (below autograd, so backward and optimizers work
unchanged):

1. a lowering in :data:`torchdevice_mlx.lowerings.LOWERINGS` runs it in MLX
   (lazily: MLX evaluates when data is needed);
2. else random ops run on the host with torch's CPU generator (so a seed
   gives the same numbers as torch on CPU);
3. else torch's decomposition table rewrites it into lowered ops;
4. else it **falls back** to torch on the host: arguments are copied to CPU
   tensors, the op runs, results (and mutated arguments) are copied back.
   Each fallback is counted (:func:`fallback_counts`) and logged once.

Device identity
  The tensor reports device ``cpu`` to torch. The mlx backend's
  ``device_type`` already is ``cpu``, so translation maps ``cuda`` & co. to
  it; autograd, optimizers (by default their single-tensor paths: subclasses are
  not eligible for foreach/fused, which torch decides by exact type; an explicit
  ``foreach=True``/``fused=True`` runs torch's host kernels, every mutated list
  written back) and serialization treat it as a host tensor. It is told apart by its type
  (``isinstance(t, MLXTensor)``). A renamed PrivateUse1 device was rejected:
  it needs a C++ allocator registration for factories, and every optimizer's
  device checks and torchdevice's translation would then see a device type
  no backend declares.

Aliasing (MLX arrays are immutable)
  A *base* tensor owns its array and a version number. A view (``view``,
  ``transpose``, slicing, ``select``, ``detach``, ...) records its base and
  the chain of view ops from it; its array is recomputed from the base when
  the base's version changed. An in-place write to a base replaces its
  array; to a view, it is written through to the base: directly when the
  chain only reshapes, else by replaying the chain on a host copy of the
  base with torch, ``copy_`` into that view, and copying the base back
  (correct for every view op; slow, and counted as a fallback).
"""
from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ._mlx import mx

log = logging.getLogger("torchdevice.mlx")
aten = torch.ops.aten

_counts: Counter = Counter()
_logged: set = set()
_lock = threading.Lock()


def fallback_counts() -> dict[str, int]:
    """How many times each ATen op fell back to torch on the host (op name -> count)."""
    with _lock:
        return dict(_counts)


def reset_fallback_counts() -> None:
    with _lock:
        _counts.clear()


def _report_fallbacks() -> dict[str, int]:
    return fallback_counts()


try:  # `torchdevice run --report` lists the fallbacks (a core without the hook just has no section)
    from torchdevice import trace as _trace

    _trace.add_section("mlx: ATen ops run on the host (fallbacks)", _report_fallbacks)
except (ImportError, AttributeError):
    pass


def _note_fallback(name: str) -> None:
    with _lock:
        _counts[name] += 1
        first = name not in _logged
        _logged.add(name)
    if first:
        # info, not warning: torchdevice prints nothing unless TORCHDEVICE_LOG asks (README)
        log.info("torchdevice mlx: %s has no MLX lowering; it runs on the host (torch CPU)", name)


# -- dtypes -----------------------------------------------------------------

def _dtype_pairs():
    core = mx()
    pairs = [
        (torch.float32, core.float32), (torch.float16, core.float16), (torch.bfloat16, core.bfloat16),
        (torch.float64, core.float64), (torch.int8, core.int8), (torch.int16, core.int16),
        (torch.int32, core.int32), (torch.int64, core.int64), (torch.uint8, core.uint8),
        (torch.bool, core.bool_), (torch.complex64, core.complex64),
    ]
    return pairs


_T2M: dict = {}
_M2T: dict = {}


def to_mx_dtype(dtype: torch.dtype):
    if not _T2M:
        for t, m in _dtype_pairs():
            _T2M[t], _M2T[m] = m, t
    try:
        return _T2M[dtype]
    except KeyError:
        raise TypeError(f"MLX has no dtype for torch {dtype}") from None


def to_torch_dtype(dtype) -> torch.dtype:
    if not _M2T:
        to_mx_dtype(torch.float32)
    return _M2T[dtype]


# -- host <-> MLX -----------------------------------------------------------

def array_from_torch(tensor: torch.Tensor):
    """A new MLX array holding a copy of a host torch tensor."""
    from .bridge import to_mlx

    return to_mlx(tensor)


def torch_from_array(array) -> torch.Tensor:
    """A host torch tensor holding a copy of ``array``'s data (evaluates it)."""
    from .bridge import from_mlx

    return from_mlx(array, copy=True)


# -- the tensor -------------------------------------------------------------

class MLXTensor(torch.Tensor):
    """A torch tensor whose data is an MLX array (see the module docstring)."""

    _mx: Any
    _base_t: MLXTensor | None
    _chain: tuple
    _version_n: int
    _seen: int

    @staticmethod
    def __new__(cls, array, *, base: MLXTensor | None = None, chain: tuple = (), requires_grad: bool = False):
        out = torch.Tensor._make_wrapper_subclass(
            cls, tuple(array.shape), dtype=to_torch_dtype(array.dtype), device="cpu",
            requires_grad=requires_grad,
        )
        out._mx = array
        out._base_t = base
        out._chain = chain
        out._version_n = 0
        out._seen = base._version_n if base is not None else 0
        return out

    def __init__(self, *args, **kwargs):
        super().__init__()

    @classmethod
    def from_torch(cls, tensor: torch.Tensor) -> MLXTensor:
        """A new MLX-backed tensor holding a copy of ``tensor`` (no autograd link)."""
        if isinstance(tensor, MLXTensor):
            return tensor
        return cls(array_from_torch(tensor), requires_grad=tensor.requires_grad)

    @property
    def mx_array(self):
        """The current MLX array of this tensor (recomputed from the base for a stale view)."""
        base = self._base_t
        if base is None:
            return self._mx
        if self._seen != base._version_n:
            arr = base.mx_array
            for op, args, kwargs in self._chain:
                arr = _run_lowered(op, (arr, *args), kwargs)
            self._mx = arr
            self._seen = base._version_n
        return self._mx

    def torch_cpu(self) -> torch.Tensor:
        """A host copy of this tensor's data."""
        return torch_from_array(self.mx_array)

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"MLXTensor({self.torch_cpu()!r})"

    def __reduce_ex__(self, proto):
        # torch.save / pickle: saved as a plain host tensor, so checkpoints load without
        # torchdevice (weights_only too); the program's map_location/.to("cuda") brings it back.
        host = self.torch_cpu().requires_grad_(self.requires_grad)
        return host.__reduce_ex__(proto)

    def __deepcopy__(self, memo):
        return _rebuild(self.torch_cpu(), self.requires_grad)

    def numpy(self, *, force: bool = False):
        return self.detach().torch_cpu().numpy()

    def tolist(self):
        return self.torch_cpu().tolist()

    def item(self):
        return self.torch_cpu().item()

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return dispatch(func, args, kwargs or {})


def _rebuild(tensor: torch.Tensor, requires_grad: bool) -> MLXTensor:
    out = MLXTensor.from_torch(tensor)
    return out.requires_grad_(requires_grad) if requires_grad else out


def write(target: MLXTensor, value) -> None:
    """Make ``value`` (an MLX array) the data of ``target``, through to its base for a view."""
    core = mx()
    value = core.broadcast_to(value, tuple(target.shape)).astype(to_mx_dtype(target.dtype))
    base = target._base_t
    if base is None:
        target._mx = value
        target._version_n += 1
        return
    if all(op in _RESHAPE_VIEWS for op, _, _ in target._chain):
        base._mx = value.reshape(tuple(base.shape))
    else:
        _note_fallback("<view write-back>")
        host = base.torch_cpu()
        view = host
        for op, args, kwargs in target._chain:
            view = op(view, *args, **kwargs)
        view.copy_(torch_from_array(value))
        base._mx = array_from_torch(host)
    base._version_n += 1
    target._mx, target._seen = value, base._version_n


# -- dispatch ---------------------------------------------------------------

#: View ops: (op -> True if the result is a pure reshape of the input's data).
_VIEW_OPS: dict = {}
_RESHAPE_VIEWS: set = set()


def _init_views() -> None:
    reshape = [aten.view.default, aten._unsafe_view.default, aten.alias.default, aten.detach.default,
               aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
               aten._reshape_alias.default]
    other = [aten.t.default, aten.transpose.int, aten.permute.default, aten.expand.default,
             aten.slice.Tensor, aten.select.int, aten.diagonal.default, aten.unfold.default]
    for op in reshape:
        _VIEW_OPS[op] = True
        _RESHAPE_VIEWS.add(op)
    for op in other:
        _VIEW_OPS[op] = False


_MULTI_VIEWS = {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.chunk.default}
_ALIASING: dict = {}


def _aliases_its_input(func) -> bool:
    """Whether ATen op ``func`` returns one tensor aliasing its first argument (a view op, per its schema)."""
    hit = _ALIASING.get(func)
    if hit is None:
        schema = func._schema
        hit = _ALIASING[func] = bool(
            getattr(func, "is_view", False) and len(schema.returns) == 1
            and str(schema.returns[0].type) == "Tensor" and schema.returns[0].alias_info is not None
            and not schema.returns[0].alias_info.is_write)
    return hit


def _unwrap(x):
    if isinstance(x, MLXTensor):
        return x.mx_array
    if isinstance(x, torch.Tensor):
        return array_from_torch(x)
    return x


def _wrap(x):
    if isinstance(x, mx().array):
        return MLXTensor(x)
    return x


_MX_ARRAY: list = []


def _mx_array():
    """``mlx.core.array`` (looked up once)."""
    if not _MX_ARRAY:
        _MX_ARRAY.append(mx().array)
    return _MX_ARRAY[0]


def _run_lowered(op, args, kwargs):
    from .lowerings import LOWERINGS

    lowering = LOWERINGS.get(op)
    if lowering is not None:
        return lowering(*args, **kwargs)
    # a view op MLX has no lowering for (as_strided, view_as_real ...): its data computed on the host
    _note_fallback(str(op))
    return array_from_torch(op(torch_from_array(args[0]), *args[1:], **kwargs).contiguous())


def _make_view(op, src: MLXTensor, args: tuple, kwargs: dict) -> MLXTensor:
    base = src._base_t if src._base_t is not None else src
    arr = _run_lowered(op, (src.mx_array, *args), kwargs)
    out = MLXTensor(arr, base=base, chain=src._chain + ((op, args, kwargs),))
    return out


#: id(op) -> (op, its route): decided once per ATen op (OpOverload hashes in Python, so every
#: `op in table` on the hot path costs; an int key does not). The op is kept so its id stays its own.
_ROUTES: dict[int, tuple] = {}


def _route(func) -> tuple:
    from .lowerings import HOST_OPS, LOWERINGS, RANDOM_OPS

    if not _VIEW_OPS:
        _init_views()
    lowering = LOWERINGS.get(func)
    random = func in RANDOM_OPS
    route = (
        func in _VIEW_OPS and lowering is not None,  # a lowered view
        func in _MULTI_VIEWS,  # split/unbind/chunk
        _aliases_its_input(func),  # any other view op
        func._schema.is_mutable or func.overloadpacket.__name__.endswith("_"),  # in place
        None if random else lowering,
        random,
        func in HOST_OPS,
    )
    _ROUTES[id(func)] = (func, route)
    return route


def dispatch(func, args: tuple, kwargs: dict):
    """Run ATen op ``func`` on arguments some of which are :class:`MLXTensor`."""
    entry = _ROUTES.get(id(func))
    view, multi, alias, mutable, lowering, random, host = entry[1] if entry is not None else _route(func)
    if (view or multi or alias) and args and isinstance(args[0], MLXTensor):
        if view:
            return _make_view(func, args[0], tuple(args[1:]), kwargs)
        if multi:
            return _multi_view(func, args[0], tuple(args[1:]), kwargs)
        # any other view op (diagonal, as_strided, ...) must alias too: an in-place write through it reaches
        # the base, never a silent copy (write() replays the view chain with torch on the host)
        return _make_view(func, args[0], tuple(args[1:]), kwargs)
    if mutable:
        inplace = _inplace(func, args, kwargs)
        if inplace is not None:
            return inplace
    if lowering is not None:
        try:
            if any(type(a) in (list, tuple) for a in args):
                result = lowering(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
            else:  # the common flat case, without pytree's overhead
                result = lowering(*[_unwrap(a) for a in args], **{k: _unwrap(v) for k, v in kwargs.items()})
            if type(result) is _mx_array():
                return MLXTensor(result)
        except NotImplementedError:  # the lowering does not cover these arguments
            return _host_fallback(func, args, kwargs)
        return tree_map(_wrap, result)
    if not random and not host:
        decomp = _decomposition(func)
        if decomp is not None:
            return decomp(*args, **kwargs)
    return _host_fallback(func, args, kwargs, count=not random)


def _multi_view(func, src: MLXTensor, args: tuple, kwargs: dict):
    # split/unbind/chunk: each piece is a slice/select view of src.
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


def _decomposition(func) -> Callable | None:
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


def _functional_of(func):
    """The out-of-place overload for in-place op ``func`` (``add_.Tensor`` -> ``add.Tensor``), or None."""
    name = func.overloadpacket.__name__
    if not name.endswith("_") or name.startswith("_foreach"):
        return None
    packet = getattr(aten, name[:-1], None)
    if packet is None:
        return None
    return getattr(packet, func._overloadname, None)


_METADATA_INPLACE = {aten.squeeze_, aten.unsqueeze_, aten.t_, aten.transpose_, aten.resize_, aten.as_strided_,
                     aten.swapdims_, aten.swapaxes_, aten.set_}


def _inplace(func, args, kwargs):
    from .lowerings import LOWERINGS, RANDOM_OPS

    target = args[0] if args else None
    if not isinstance(target, MLXTensor):
        return None
    if func is aten.copy_.default:
        write(target, _unwrap(args[1]))
        return target
    if func.overloadpacket in _METADATA_INPLACE:
        # a wrapper's sizes are fixed at creation: refuse rather than keep a wrong shape
        raise NotImplementedError(f"{func} changes a tensor's shape in place, which MLX tensors do not support")
    functional = _functional_of(func)
    if functional is None or func in RANDOM_OPS or functional in RANDOM_OPS:
        return None
    if functional not in LOWERINGS and _decomposition(functional) is None:
        return None
    result = dispatch(functional, args, kwargs)
    write(target, result.mx_array if isinstance(result, MLXTensor) else _unwrap(result))
    return target


def _to_host(x):
    # contiguous: an MLX array can be strided (a lazy transpose), and some host kernels assume the
    # layout torch gives its own tensors -- the fused optimizers read param and grad as flat buffers,
    # natively guaranteed alike (AccumulateGrad matches the param's layout)
    return x.torch_cpu().contiguous() if isinstance(x, MLXTensor) else x


def _host_fallback(func, args, kwargs, *, count: bool = True):
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

    def back(x):
        if isinstance(x, torch.Tensor):
            for host, src in mutated:
                if x is host:
                    return src
            return MLXTensor(array_from_torch(x))
        return x

    return tree_map(back, out)
