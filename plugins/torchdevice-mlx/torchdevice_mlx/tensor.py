"""The tensor class: :class:`MLXTensor`, a torch tensor whose data is an ``mlx.core.array``.

An :class:`MLXTensor` is a torch wrapper subclass (``_make_wrapper_subclass``) whose data is an
``mlx.core.array``; every ATen op reaching it goes through ``__torch_dispatch__`` (below autograd, so
backward and optimizers work unchanged), which runs :func:`torchdevice_mlx.dispatch.dispatch`: lowered
to MLX where a lowering exists, else decomposed by torch, else run on the host with torch (a counted,
logged fallback). Views keep torch's strides and alias their base (:mod:`torchdevice_mlx.views`); MLX
evaluates lazily, and :func:`torchdevice_mlx.conversion.evaluate_pending` evaluates every pending tensor.

Owns the class (construction, ``mx_array``, printing, ``.data``, pickling/deepcopy as a host tensor),
:func:`new_base` (every op's result), reading a view's data from its base (:func:`view_array`), the
arrays of an op's arguments (:func:`unwrap`) and the binding of ``__torch_dispatch__`` to
:func:`torchdevice_mlx.dispatch.dispatch`, which is above this module (it makes MLXTensors) and binds
itself when imported (``import torchdevice_mlx`` imports it).

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
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
from torch._ops import OpOverload
from torch._prims_common import is_non_overlapping_and_dense_or_false

from .bridge import from_mlx, to_mlx
from .conversion import PENDING, PENDING_LIMIT, TORCH_DTYPE_OF, compact_pending, to_torch_dtype, track
from .runtime import Array, mx
from .strides import index_array


def _dispatch_unbound(func: OpOverload, args: tuple, kwargs: dict) -> None:
    raise RuntimeError(f"{func} reached an MLX tensor before torchdevice_mlx.dispatch was imported "
                       "(import torchdevice_mlx, which imports it)")


#: runs every ATen op reaching an MLXTensor: torchdevice_mlx.dispatch binds its ``dispatch`` here when
#: it is imported (it makes MLXTensors, so this module cannot import it; ``import torchdevice_mlx`` does)
_dispatch: Callable[[Any, tuple, dict], Any] = _dispatch_unbound


def bind_dispatch(fn: Callable[[Any, tuple, dict], Any]) -> None:
    global _dispatch
    _dispatch = fn


_wrapper = torch.Tensor._make_wrapper_subclass
#: a torch.Tensor class (as_subclass's)
S = TypeVar("S", bound=torch.Tensor)
_DATA = torch._C.TensorBase.__dict__["data"]  # torch's own Tensor.data getter/setter


class MLXTensor(torch.Tensor):
    """A torch tensor whose data is an MLX array (see this module's docstring)."""

    _mx: Any
    # a base tensor keeps these class defaults; a view sets them
    _base_t: MLXTensor | None = None
    _chain: tuple | None = ()  # view ops from the base; None: gathered from the base by the view's strides
    _version_n: int = 0
    _seen: int = 0
    _root: tuple = ()

    @staticmethod
    def __new__(cls, array: Array, *, base: MLXTensor | None = None, chain: tuple | None = (), requires_grad: bool = False,
                geometry: tuple | None = None) -> MLXTensor:
        try:
            dtype = TORCH_DTYPE_OF[array.dtype]
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
            track(out)
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
        return cls(to_mlx(tensor), requires_grad=tensor.requires_grad)

    @property
    def mx_array(self) -> Array:
        """The current MLX array of this tensor (recomputed from the base for a stale view)."""
        base = self._base_t
        if base is None:
            return self._mx
        if self._seen != base._version_n:
            self._mx = view_array(self, base)
            self._seen = base._version_n
        return self._mx

    def torch_cpu(self) -> torch.Tensor:
        """A host copy of this tensor's data, laid out as torch's ``.cpu()`` of it would be: this tensor's own
        strides where they are dense and non-overlapping (so a tensor torch calls contiguous is contiguous on
        the host, whatever layout MLX computed it in: ``x.t().contiguous().cpu().view(-1)``), else contiguous."""
        host = from_mlx(self.mx_array, copy=True)
        stride = self.stride()
        if host.stride() == stride or host.dim() == 0:
            return host
        if is_non_overlapping_and_dense_or_false(self):
            return torch.empty_strided(host.shape, stride, dtype=host.dtype).copy_(host)
        return host.contiguous()

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # torch's is unannotated (returns Any)
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
        if type(self) is not MLXTensor:  # an as_subclass class: torch prints its name ("Image([...])")
            name = type(self).__name__
            text = name + "(" + text[len("tensor("):].replace("\n" + " " * len("tensor("), "\n" + " " * (len(name) + 1))
        return text

    def __format__(self, format_spec: str) -> str:
        # torch formats only its own 0-dim tensors as numbers (f"{loss:.4f}"); a subclass gets object's
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    @property
    def data(self) -> torch.Tensor:
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
            track(self)

    def __reduce_ex__(self, proto: Any) -> Any:
        # torch.save / pickle: saved as a plain host tensor, so checkpoints load without
        # torchdevice (weights_only too); the program's map_location/.to("cuda") brings it back.
        host = self.torch_cpu().requires_grad_(self.requires_grad)
        return host.__reduce_ex__(proto)

    def __deepcopy__(self, memo: dict) -> MLXTensor:
        return _rebuild(self.torch_cpu(), self.requires_grad)

    def numpy(self, *, force: bool = False) -> Any:  # a numpy.ndarray
        return cast(MLXTensor, self.detach()).torch_cpu().numpy()  # an ATen op on an MLXTensor gives one

    def tolist(self) -> Any:
        return self.torch_cpu().tolist()

    def item(self) -> Any:  # a Python number
        return self.torch_cpu().item()

    def as_subclass(self, cls: type[S]) -> S:
        """``self`` as an instance of ``cls``, aliasing its data and attached to autograd (torch's contract).

        torch's own ``as_subclass`` wraps the alias ATen returns, which for an MLX tensor already is a Python
        object (an MLXTensor), so it raised "already associated to a python object of type MLXTensor". Here the
        alias is made through ATen (autograd records ``AliasBackward0``, as natively) and then given class
        :func:`mlx_subclass` of ``cls``: ``cls`` and MLXTensor combined, so ``isinstance(out, cls)``, ``cls``'s
        methods and ``__torch_function__`` (torchvision's ``tv_tensors``) apply and the data stays in MLX.
        ``as_subclass(torch.Tensor)`` gives a plain MLXTensor."""
        if not (isinstance(cls, type) and issubclass(cls, torch.Tensor)):
            raise TypeError("Creating a Tensor subclass from a class that does not inherit from Tensor is not "
                            "possible. Make sure your class inherits from Tensor.")
        with torch._C.DisableTorchFunctionSubclass():
            out = torch.ops.aten.alias.default(self)
        out.__class__ = mlx_subclass(cls)
        return cast(S, out)

    def __coerce_same_metadata_as_tangent__(self, expected_metadata: Any, expected_type: type | None = None) -> MLXTensor:
        # torch.compile(backend="mlx") traces its graphs with plain (fake) tensors; the gradients flowing into
        # the compiled backward at run time are MLX tensors, which its MLX function takes as they are
        return self

    # torch's stubs type the disabled implementation as a plain function of (types, args, kwargs), unlike the
    # classmethod it stands for
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(cls, func: OpOverload, types: tuple, args: tuple = (),  # type: ignore[override]  # as above
                           kwargs: dict | None = None) -> Any:
        return _dispatch(func, args, kwargs or {})


_SUBCLASSES: dict[type, type] = {}


@classmethod  # type: ignore[misc]
def _default_torch_function(cls: type, func: Callable[..., Any], types: tuple, args: tuple = (),
                            kwargs: dict | None = None) -> Any:
    """torch's default ``Tensor.__torch_function__`` (results of ``cls``), as another object: torch's tensor
    metaclass replaces the default itself by the disabled one in any class that has a ``__torch_dispatch__``."""
    return torch.Tensor.__torch_function__.__func__(cls, func, types, args, kwargs)  # type: ignore[attr-defined]


def mlx_subclass(cls: type) -> type:
    """The class an MLX tensor takes for ``as_subclass(cls)``: MLXTensor for ``torch.Tensor``, ``cls`` when it
    already is an MLXTensor class, else ``cls`` and MLXTensor combined (``cls`` first in the MRO: its
    ``__torch_function__`` and methods win, MLXTensor's dispatch runs the ops), made once per ``cls``.

    ``cls``'s ``__torch_function__`` is the one it has natively, torch's default included (which keeps results
    of ``cls``: ``(x.as_subclass(S) * 2)`` is an ``S``), not MLXTensor's disabled one."""
    if cls is torch.Tensor or issubclass(cls, MLXTensor):
        return MLXTensor if cls is torch.Tensor else cls
    made = _SUBCLASSES.get(cls)
    if made is None:
        torch_function = next(k.__dict__["__torch_function__"] for k in cls.__mro__ if "__torch_function__" in k.__dict__)
        if torch_function is torch.Tensor.__dict__["__torch_function__"]:
            torch_function = _default_torch_function  # torch disables its own default in a class with a dispatch
        made = _SUBCLASSES[cls] = type(cls.__name__, (cls, MLXTensor), {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__torch_function__": torch_function,
            "__doc__": f"{cls.__qualname__} whose data is an MLX array (see MLXTensor.as_subclass)."})
    return made


def new_base(array: Array) -> MLXTensor:
    """``MLXTensor(array)`` without the class call (the hot path: every op's result)."""
    try:
        dtype = TORCH_DTYPE_OF[array.dtype]
    except KeyError:
        dtype = to_torch_dtype(array.dtype)
    out = _wrapper(MLXTensor, array.shape, dtype=dtype, device=_CPU)
    out._mx = array
    PENDING[id(out)] = weakref.ref(out)  # conversion.track, inlined: every op's result
    if len(PENDING) > PENDING_LIMIT[0]:
        compact_pending()
    return out


_CPU = torch.device("cpu")


def _rebuild(tensor: torch.Tensor, requires_grad: bool) -> MLXTensor:
    out = MLXTensor.from_torch(tensor)
    return cast(MLXTensor, out.requires_grad_(requires_grad)) if requires_grad else out  # requires_grad_ returns self


def view_array(view: MLXTensor, base: MLXTensor) -> Array:
    """``view``'s data, computed from its base's current array: its chain of view ops replayed, or (no chain)
    gathered at its strided positions."""
    chain = view._chain
    if chain is None:
        geometry = (tuple(view.shape), view.stride(), view.storage_offset())
        return mx().take(base.mx_array.reshape(-1), index_array(geometry, base.numel()))
    from . import lowerings  # imports mlx.core: only once MLX tensors exist

    arr = base.mx_array
    if arr.shape != view._root:
        arr = arr.reshape(view._root)
    for op, args, kwargs in chain:
        arr = lowerings.run_on_arrays(op, (arr, *args), kwargs)
    return arr


class Unholdable(NotImplementedError):
    """A tensor MLX cannot hold (a sparse one left on the host, HostPlacementWarning) among an op's arguments: the
    op runs in torch's own kernel on the host, as natively (not lowered, not decomposed)."""


def unwrap(x: Any) -> Any:
    """The MLX array of an op's argument: an MLX tensor's, a copy of a host tensor's; anything else as it is."""
    if isinstance(x, MLXTensor):
        return x.mx_array
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            raise Unholdable(f"MLX cannot hold a {x.layout} tensor")
        return to_mlx(x)
    return x
