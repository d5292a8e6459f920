"""``torch.cuda.FloatTensor`` and the other legacy typed tensor classes, ``Tensor.type(torch.cuda.X)`` and
``torch.set_default_tensor_type(torch.cuda.X)``, translated onto the backend.

Each class of :data:`LEGACY_TYPES` that ``torch.<ns>`` has (only ``torch.cuda`` has them) becomes a stand-in
(:class:`LegacyTensorType`) while translating:

* calling it is torch's legacy constructor on the program's device: sizes (ints, a ``torch.Size``) give an
  uninitialised tensor (``torch.empty``), a tensor of that type gives an alias of it, a storage on the device
  a tensor over it; anything else (no argument, a sequence of data, a numpy array ...) is read by torch's own
  CPU class of the same dtype (``torch.FloatTensor``), so its rules and errors are torch's, and moved to the
  device; ``device=`` must name the namespace's device type, as CUDA requires;
* ``isinstance(t, torch.cuda.FloatTensor)`` is True for a dense float32 tensor on the target's device type
  (where a ``device="cuda"`` tensor is, as ``Tensor.is_cuda`` answers), False otherwise;
* ``t.type(torch.cuda.FloatTensor)`` / ``t.type("torch.cuda.FloatTensor")`` is ``t.to(device, dtype)``
  (``t`` itself when it is already there, as on CUDA); another ``"torch.cuda.<name>"`` is refused as CUDA refuses
  an unknown name (ValueError), or, for a sparse type (``"torch.cuda.sparse.FloatTensor"``), with
  :class:`~torchdevice.UnsupportedError` (the sparse classes of ``torch.cuda.sparse`` are not translated);
* ``torch.set_default_tensor_type(torch.cuda.FloatTensor)`` (or its name) sets the default dtype as torch's
  own function does with the CPU class (same checks, same deprecation warning), then the default device of
  the calling thread to the program's device, through the translated ``torch.set_default_device("cuda")``; a
  CPU type set afterwards clears that default device again.

``torch.Tensor(...)`` (the untyped legacy constructor, which ``torch.set_default_device`` does not reach) follows
it too: while a legacy type of ``torch.<ns>`` is the thread's default, it is that namespace's class of the default
dtype.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, NoReturn

import torch

from .. import devices
from .. import trace as _trace
from ..errors import UnsupportedError
from ..router import Target
from ..vocabulary import RealDevice
from .rules import TRANSLATED, declared
from .table import fronts

#: the legacy typed tensor classes of ``torch.cuda``, and their dtypes
LEGACY_TYPES: dict[str, torch.dtype] = {
    "FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16, "LongTensor": torch.int64, "IntTensor": torch.int32,
    "ShortTensor": torch.int16, "CharTensor": torch.int8, "ByteTensor": torch.uint8, "BoolTensor": torch.bool,
}

_NOTE = ("the legacy constructor on the {backend} backend's device (sizes give an uninitialised tensor, a sequence "
         "its data as torch's CPU class of the dtype reads it, a tensor of the type an alias), and isinstance is "
         "True for dense tensors of its dtype where {ns} tensors live on the {backend} backend")
TENSOR_TYPE_NOTE = ("given a torch.{ns} legacy type (the class or its name), moves and casts to the {backend} "
                    "backend's device and that dtype (the tensor itself when already there), as on {ns}; any other "
                    "argument goes to torch")
DEFAULT_TYPE_NOTE = ("given a torch.{ns} legacy type (the class or its name), sets the default dtype (floating types "
                     "only, as torch) and this thread's default device to the {backend} backend's, as "
                     "set_default_device('{ns}') does, torch.Tensor(...) included; a CPU type goes to torch and clears that "
                     "default device")


class LegacyTensorType(type):
    """Metaclass of the stand-ins for ``torch.<ns>.<X>Tensor``: construction makes a torch.Tensor on the
    program's device, ``isinstance`` checks a tensor's dtype, layout and device type."""

    dtype: torch.dtype
    layout: torch.layout
    _ns: str
    _cpu: type  # torch's CPU class of the same dtype (torch.FloatTensor)
    _device_type: str  # the target's
    _backend: str
    _how: str

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
        if _trace.active:
            _trace.note(f"torch.{cls._ns}.{cls.__name__}", cls._how)
        device = devices.map_device(cls._ns)
        if "device" in kwargs:
            given = kwargs.pop("device")
            if given is not None:
                device = cls._device_of(given)
        if len(args) == 1 and not kwargs:
            arg = args[0]
            if isinstance(arg, torch.Tensor):
                return cls._alias(arg)
            if isinstance(arg, (torch.UntypedStorage, torch.TypedStorage)):
                return cls._over(arg)
        if args and not kwargs and (all(a.__class__ is int for a in args)
                                    or (len(args) == 1 and args[0].__class__ is torch.Size)):
            return torch.empty(*args, dtype=cls.dtype, device=device)
        return cls._cpu(*args, **kwargs).to(device)  # torch's CPU class reads it (its rules, its errors)

    def _device_of(cls, device: Any) -> Any:
        """``device=``: a device of the namespace's type (or its ordinal), mapped to the target's."""
        ordinal = devices.ordinal(device)
        real = RealDevice(cls._ns, ordinal) if ordinal is not None else RealDevice(device)
        if real.type not in (cls._ns, cls._device_type):  # the target's: a torch.device("cuda") made while translating
            raise RuntimeError(
                f"legacy constructor expects device type: {cls._ns} but device type: {real.type} was passed")
        return devices.map_device(real)

    def _alias(cls, other: torch.Tensor) -> torch.Tensor:
        if not cls.__instancecheck__(other):
            raise TypeError(f"expected {cls!r} (a {cls.dtype} tensor on the {cls._device_type} device, where "
                            f"{cls._ns} tensors live on the {cls._backend} backend), got a {other.dtype} "
                            f"{other.layout} tensor on {other.device}")
        return torch.ops.aten.alias(other)

    def _over(cls, storage: torch.UntypedStorage | torch.TypedStorage) -> torch.Tensor:
        if storage.device.type != cls._device_type:
            raise TypeError(f"{cls!r}(storage): expected a storage on the {cls._device_type} device (where "
                            f"{cls._ns} storages live on the {cls._backend} backend), got one on {storage.device}")
        return torch.empty(0, dtype=cls.dtype, device=storage.device).set_(storage)

    def __instancecheck__(cls, obj: object) -> bool:
        return (isinstance(obj, torch.Tensor) and obj.dtype is cls.dtype and obj.layout is torch.strided
                and obj.device.type == cls._device_type)

    def __repr__(cls) -> str:
        return f"<class 'torch.{cls._ns}.{cls.__name__}'>"


@fronts(tuple(LEGACY_TYPES), declared(TRANSLATED, _NOTE), kind="class")
def build_tensor_type(target: Target, ns: str, name: str) -> type:
    note = _NOTE.format(backend=target.name, ns=ns)
    return LegacyTensorType(name, (), {
        "dtype": LEGACY_TYPES[name], "layout": torch.strided, "is_cuda": ns == "cuda", "is_xpu": ns == "xpu",
        "is_sparse": False, "is_sparse_csr": False, "__module__": f"torch.{ns}", "__qualname__": name,
        "__doc__": getattr(torch, ns).__dict__[name].__doc__, "_ns": ns, "_cpu": getattr(torch, name),
        "_device_type": target.device_type, "_backend": target.name, "_how": f"{TRANSLATED}: {note}",
    })


def _legacy(state: dict[str, Any], ns: str, arg: Any) -> LegacyTensorType | None:
    """The installed stand-in ``arg`` is or names (``torch.cuda.FloatTensor``, ``"torch.cuda.FloatTensor"``)."""
    if isinstance(arg, LegacyTensorType):
        return arg
    if arg.__class__ is str and arg.startswith(f"torch.{ns}.") and arg[len(ns) + 7:] in LEGACY_TYPES:
        found = state.get(f"{ns}.{arg[len(ns) + 7:]}")
        return found if isinstance(found, LegacyTensorType) else None
    return None


def _refuse(ns: str, name: str, backend: str) -> NoReturn:
    """``Tensor.type("torch.cuda.<not a legacy dense type>")``: what CUDA says of an unknown name; a sparse type
    cannot be honoured."""
    if name.startswith(f"torch.{ns}.sparse.") and name.rpartition(".")[2] in LEGACY_TYPES:
        raise UnsupportedError("torch.Tensor.type", backend,
                               f"{name}: sparse legacy types are not translated; use .to_sparse() on the tensor "
                               f"moved with .to('{ns}')")
    raise ValueError(f"invalid type: {name!r}")


def _tensor_type(original: Callable[..., Any], state: dict[str, Any], ns: str, backend: str,
                 how: str) -> Callable[..., Any]:
    def type(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:  # noqa: A001  (Tensor.type's own name)
        arg = args[0] if args else kwargs.get("dtype")
        legacy = _legacy(state, ns, arg)
        if legacy is None:
            if arg.__class__ is str and arg.startswith(f"torch.{ns}."):
                _refuse(ns, arg, backend)  # torch would initialise CUDA for it
            return original(self, *args, **kwargs)
        if _trace.active:
            _trace.note("torch.Tensor.type", how)
        non_blocking = args[1] if len(args) > 1 else kwargs.get("non_blocking", False)
        memory_format = kwargs.get("memory_format", torch.preserve_format)
        return self.to(devices.map_device(ns), legacy.dtype, non_blocking=non_blocking, memory_format=memory_format)

    type.__doc__ = original.__doc__
    return type


_default = threading.local()  # .device_set: this thread's default device came from a legacy type


def _set_default_tensor_type(original: Callable[..., Any], state: dict[str, Any], ns: str,
                             how: str) -> Callable[..., Any]:
    def set_default_tensor_type(t: Any, /) -> None:
        legacy = _legacy(state, ns, t)
        if legacy is None:
            original(t)
            if getattr(_default, "device_set", False):
                _default.device_set = False
                torch.set_default_device(None)
            return
        if _trace.active:
            _trace.note("torch.set_default_tensor_type", how)
        original(legacy._cpu)  # torch's checks (floating types only) and deprecation warning; the dtype
        torch.set_default_device(ns)  # the translated one: the program's device
        _default.device_set = True

    set_default_tensor_type.__doc__ = original.__doc__
    return set_default_tensor_type


def _tensor_new(original: Callable[..., Any], state: dict[str, Any], ns: str) -> staticmethod:
    """``torch.Tensor(...)`` (the untyped legacy constructor): while a ``torch.<ns>`` legacy type is this thread's
    default tensor type, the legacy type of the default dtype (on the program's device, as on CUDA)."""
    names = {dtype: name for name, dtype in LEGACY_TYPES.items()}

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls is torch.Tensor and getattr(_default, "device_set", False):
            legacy = state.get(f"{ns}.{names.get(torch.get_default_dtype())}")
            if isinstance(legacy, LegacyTensorType):
                return legacy(*args, **kwargs)
        return original(cls, *args, **kwargs)

    return staticmethod(__new__)


def install(patcher: Any, target: Target, ns: str) -> None:
    """``Tensor.type`` and ``torch.set_default_tensor_type`` taking ``torch.<ns>``'s stand-ins (built by the
    install into ``target.state``) and their names."""
    if not any(isinstance(target.state.get(f"{ns}.{name}"), LegacyTensorType) for name in LEGACY_TYPES):
        return
    fmt = {"ns": ns, "backend": target.name}
    how_type = f"{TRANSLATED}: {TENSOR_TYPE_NOTE.format(**fmt)}"
    how_default = f"{TRANSLATED}: {DEFAULT_TYPE_NOTE.format(**fmt)}"
    patcher.set(torch.Tensor, "type", _tensor_type(patcher.get(torch.Tensor, "type"), target.state, ns,
                                                   target.name, how_type))
    patcher.set(torch, "set_default_tensor_type", _set_default_tensor_type(
        patcher.get(torch, "set_default_tensor_type"), target.state, ns, how_default))
    patcher.set(torch.Tensor, "__new__", _tensor_new(torch._C.TensorBase.__new__, target.state, ns))
