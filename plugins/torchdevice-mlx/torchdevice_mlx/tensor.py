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

Evaluation
  MLX is lazy: an op builds a graph node. Data is computed when the program
  reads it (``.item()``, ``.cpu()`` ...), and every pending tensor is evaluated
  by :func:`evaluate_pending` -- called by the backend's ``synchronize`` and its
  memory queries, so ``torch.cuda.memory_allocated()`` counts what the program's
  tensors hold, as CUDA does when the kernels are launched.
"""
from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
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


def _init_dtypes() -> None:
    for t, m in _dtype_pairs():
        _T2M[t], _M2T[m] = m, t


def to_mx_dtype(dtype: torch.dtype):
    try:
        return _T2M[dtype]
    except KeyError:
        if not _T2M:
            _init_dtypes()
            return to_mx_dtype(dtype)
        raise TypeError(f"MLX has no dtype for torch {dtype}") from None


def to_torch_dtype(dtype) -> torch.dtype:
    try:
        return _M2T[dtype]
    except KeyError:
        if not _M2T:
            _init_dtypes()
            return _M2T[dtype]
        raise TypeError(f"torch has no dtype for MLX {dtype}") from None


# -- host <-> MLX -----------------------------------------------------------

def array_from_torch(tensor: torch.Tensor):
    """A new MLX array holding a copy of a host torch tensor."""
    from .bridge import to_mlx

    return to_mlx(tensor)


def torch_from_array(array) -> torch.Tensor:
    """A host torch tensor holding a copy of ``array``'s data (evaluates it)."""
    from .bridge import from_mlx

    return from_mlx(array, copy=True)


# -- pending (unevaluated) tensors ------------------------------------------------

#: id(base tensor) -> weak reference, for every base tensor made or written since the last
#: evaluate_pending(); dead entries are dropped when the table outgrows _pending_limit
_pending: dict[int, weakref.ref] = {}
_pending_limit = [4096]


def _track(tensor: MLXTensor) -> None:
    _pending[id(tensor)] = weakref.ref(tensor)
    if len(_pending) > _pending_limit[0]:
        _compact_pending()


def _compact_pending() -> None:
    global _pending
    _pending = {k: r for k, r in list(_pending.items()) if r() is not None}
    _pending_limit[0] = max(4096, 2 * len(_pending))


def evaluate_pending() -> int:
    """Evaluate the MLX graph of every live tensor made or written since the last call; returns how many."""
    global _pending
    refs, _pending = _pending, {}
    arrays = []
    for ref in refs.values():
        tensor = ref()
        if tensor is not None:
            arrays.append(tensor._mx)
    if arrays:
        mx().eval(*arrays)
    return len(arrays)


# -- the tensor -------------------------------------------------------------

_wrapper = torch.Tensor._make_wrapper_subclass
_DATA = torch._C.TensorBase.__dict__["data"]  # torch's own Tensor.data getter/setter


class MLXTensor(torch.Tensor):
    """A torch tensor whose data is an MLX array (see the module docstring)."""

    _mx: Any
    # a base tensor keeps these class defaults; a view sets them
    _base_t: MLXTensor | None = None
    _chain: tuple | None = ()  # view ops from the base; None: gathered from the base by the view's strides
    _version_n: int = 0
    _seen: int = 0
    _root: tuple = ()

    @staticmethod
    def __new__(cls, array, *, base: MLXTensor | None = None, chain: tuple | None = (), requires_grad: bool = False,
                geometry: tuple | None = None):
        try:
            dtype = _M2T[array.dtype]
        except KeyError:
            dtype = to_torch_dtype(array.dtype)
        if geometry is None:
            out = _wrapper(cls, array.shape, dtype=dtype, device=_CPU, requires_grad=requires_grad)
        elif base is not None and torch.is_inference_mode_enabled() and not base.is_inference():
            # a view of a normal tensor made in inference mode is a normal tensor sharing its base's version
            # counter (torch's ADInplaceOrView sets it after this returns): made in inference mode it would be
            # an inference tensor, which has none
            with torch.inference_mode(False):
                out = _wrapper(cls, geometry[0], strides=geometry[1], storage_offset=geometry[2], dtype=dtype,
                               device=_CPU, requires_grad=requires_grad)
        else:
            size, stride, offset = geometry
            out = _wrapper(cls, size, strides=stride, storage_offset=offset, dtype=dtype, device=_CPU,
                           requires_grad=requires_grad)
        out._mx = array
        if base is None:
            _track(out)
        else:
            out._base_t = base
            out._chain = chain
            out._seen = base._version_n
            out._root = base._mx.shape  # the base's shape when the chain was recorded (squeeze_ can change it)
        return out

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
            self._mx = _view_array(self, base)
            self._seen = base._version_n
        return self._mx

    def torch_cpu(self) -> torch.Tensor:
        """A host copy of this tensor's data."""
        return torch_from_array(self.mx_array)

    def __repr__(self, *, tensor_contents=None) -> str:
        # printed as torch prints a host tensor (what the program's CPU run prints), with this tensor's
        # grad_fn / requires_grad, not as torch prints a subclass ("MLXTensor(...)")
        text = repr(self.torch_cpu())
        grad_fn = self.grad_fn
        if grad_fn is not None:
            name = type(grad_fn).__name__
            suffix = f"grad_fn=<{grad_fn.name().rsplit('::', 1)[-1] if name == 'CppFunction' else name}>"
        elif self.requires_grad:
            suffix = "requires_grad=True"
        else:
            suffix = ""
        if suffix:
            text = torch._tensor_str._add_suffixes(text[:-1], [suffix], len("tensor("), force_newline=False)
        if isinstance(self, torch.nn.Parameter):
            return "Parameter containing:\n" + text
        return text

    def __format__(self, format_spec: str) -> str:
        # torch formats only its own 0-dim tensors as numbers (f"{loss:.4f}"); a subclass gets object's
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    @property
    def data(self):
        return _DATA.__get__(self)

    @data.setter
    def data(self, new: torch.Tensor) -> None:
        # torch's setter swaps only the C++ tensor (size, dtype ...): the MLX array, kept on the Python
        # object, is taken from ``new`` too (Module.half()/.to(dtype)/.float() assign param.data so)
        if not isinstance(new, MLXTensor):
            new = MLXTensor.from_torch(new.detach())
        _DATA.__set__(self, new)
        for name in ("_base_t", "_chain", "_seen", "_root"):
            if name in new.__dict__:
                setattr(self, name, new.__dict__[name])
            else:
                self.__dict__.pop(name, None)
        self._mx = new._mx
        if self._base_t is None:
            _track(self)

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

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        # torch.compile(backend="mlx") traces its graphs with plain (fake) tensors; the gradients flowing into
        # the compiled backward at run time are MLX tensors, which its MLX function takes as they are
        return self

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return dispatch(func, args, kwargs or {})


def _new_base(array) -> MLXTensor:
    """``MLXTensor(array)`` without the class call (the hot path: every op's result)."""
    try:
        dtype = _M2T[array.dtype]
    except KeyError:
        dtype = to_torch_dtype(array.dtype)
    out = _wrapper(MLXTensor, array.shape, dtype=dtype, device=_CPU)
    out._mx = array
    _pending[id(out)] = weakref.ref(out)
    if len(_pending) > _pending_limit[0]:
        _compact_pending()
    return out


_CPU = torch.device("cpu")


def _rebuild(tensor: torch.Tensor, requires_grad: bool) -> MLXTensor:
    out = MLXTensor.from_torch(tensor)
    return out.requires_grad_(requires_grad) if requires_grad else out


# -- views: geometry, reading, writing ------------------------------------------------------

_STRIDES: dict = {}


def _contiguous_strides(size) -> tuple:
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


def _meta_geometry(op, src: MLXTensor, args: tuple, kwargs: dict) -> tuple:
    """The size/stride/offset torch gives ``op`` applied to a tensor laid out as ``src`` (on the meta device:
    torch's own rules, and torch's own error when the view is impossible)."""
    base = src._base_t if src._base_t is not None else src
    storage = torch.empty(max(base.numel(), 1), dtype=src.dtype, device="meta")
    like = storage.as_strided(tuple(src.shape), src.stride(), src.storage_offset())
    out = op(like, *args, **kwargs)
    return tuple(out.shape), out.stride(), out.storage_offset()


def _view_geometry(op, src: MLXTensor, args: tuple, kwargs: dict, kind: str | None = "") -> tuple:
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


# -- dispatch ---------------------------------------------------------------

#: View ops whose result is the same data at strided positions of the input (no reinterpretation).
_STRIDED: set = set()
_MULTI_VIEWS = {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.chunk.default}
_ALIASING: dict = {}


#: the lowering tables (torchdevice_mlx.lowerings imports mlx.core: bound on the first dispatch)
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


def _aliases_its_input(func) -> bool:
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


def _unwrap(x):
    if isinstance(x, MLXTensor):
        return x.mx_array
    if isinstance(x, torch.Tensor):
        return array_from_torch(x)
    return x


def _wrap(x):
    if isinstance(x, _mx_array()):
        return _new_base(x)
    return x


_MX_ARRAY: list = []


def _mx_array():
    """``mlx.core.array`` (looked up once)."""
    if not _MX_ARRAY:
        _MX_ARRAY.append(mx().array)
    return _MX_ARRAY[0]


def _run_lowered(op, args, kwargs):
    lowering = LOWERINGS.get(op)
    if lowering is not None:
        return lowering(*args, **kwargs)
    # a view op MLX has no lowering for that reinterprets data (view(dtype), view_as_real ...): on the host
    _note_fallback(str(op))
    return array_from_torch(op(torch_from_array(args[0]), *args[1:], **kwargs).contiguous())


def _make_view(op, src: MLXTensor, args: tuple, kwargs: dict, info: tuple | None = None) -> MLXTensor:
    """A view of ``src`` made by view op ``op``; ``info``: (its lowering, its _GEOMETRY kind, whether it is
    strided) when the caller has them."""
    if info is None:
        info = (LOWERINGS.get(op), _GEOMETRY.get(op), op in _STRIDED)
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


def _route(func) -> tuple:
    if not _STRIDED:
        _init_views()
        _mx_array()
    lowering = LOWERINGS.get(func)
    random = func in RANDOM_OPS
    if func in TENSOR_LOWERINGS:
        kind, lowering = _TENSORS, TENSOR_LOWERINGS[func]
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
    route = (kind, None if random else lowering, flat, random, func in HOST_OPS, view)
    _ROUTES[id(func)] = (func, route)
    return route


def dispatch(func, args: tuple, kwargs: dict):
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
        inplace = _inplace(func, args, kwargs)
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
        if decomp is not None:
            return _run_decomposition(func, decomp, args, kwargs)
    return _host_fallback(func, args, kwargs, count=not random)


_declined = threading.local()


def _not_lowered(func, args, kwargs):
    """An op whose lowering does not cover these arguments: torch's decomposition, else the host."""
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


def _run_decomposition(func, decomp, args, kwargs):
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


def _has_tensor(args, kwargs) -> bool:
    for x in (*args, *kwargs.values()):
        if isinstance(x, torch.Tensor) or (type(x) in (list, tuple) and any(isinstance(y, torch.Tensor) for y in x)):
            return True
    return False


class _MLXFactories(TorchDispatchMode):
    """While a decomposition of an op on MLX tensors runs: host tensors made from nothing are MLX tensors."""

    made = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if type(out) is torch.Tensor and out.device.type == "cpu" and not _has_tensor(args, kwargs):
            self.made = True
            return MLXTensor(array_from_torch(out))
        return out


def _multi_view(func, src: MLXTensor, args: tuple, kwargs: dict):
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


_COPY_TO = torch.ops.prims.copy_to.default
_FUNCTIONAL: dict = {}  # in-place op -> its lowered/decomposable out-of-place op, or None
_UNSEEN = object()
_METADATA_INPLACE = {aten.squeeze_, aten.unsqueeze_, aten.t_, aten.transpose_, aten.resize_, aten.as_strided_,
                     aten.swapdims_, aten.swapaxes_, aten.set_}
#: in-place shape changes -> the view op giving the same shape (over the same storage)
_METADATA_AS_VIEW = {"squeeze_": "squeeze", "unsqueeze_": "unsqueeze", "t_": "t", "transpose_": "transpose",
                     "swapdims_": "transpose", "swapaxes_": "transpose"}
_PYTHON_KEYS: list = []


def _metadata_inplace(func, target: MLXTensor, args: tuple, kwargs: dict):
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


def _inplace(func, args, kwargs):
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
        if functional is not None and (func in RANDOM_OPS or functional in RANDOM_OPS
                                       or (functional not in LOWERINGS and _decomposition(functional) is None)):
            functional = _FUNCTIONAL[func] = None
    if functional is None:
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
